package io.idempotency.sample.payment.gateway;

/**
 * The body of {@code POST /gateway/charges}, e.g. {@code {"orderId":"o-1","amount":"12.50","currency":"EUR"}}.
 *
 * @param orderId  the order to charge
 * @param amount   a positive decimal with at most two fraction digits
 * @param currency three upper-case letters
 */
public record GatewayChargeRequest(String orderId, String amount, String currency) {
}
