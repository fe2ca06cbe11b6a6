package io.idempotency.sample.payment;

/**
 * What the app knows of one of the provider's payments: the status and version of the newest event applied.
 *
 * @param transactionId the provider's id of the payment
 * @param orderId       the order it is for
 * @param status        its status as of the newest event applied
 * @param version       that event's version
 */
public record ProviderPayment(String transactionId, String orderId, ProviderStatus status, long version) {
}
