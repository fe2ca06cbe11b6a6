package io.idempotency.sample.payment;

/**
 * The payer already paid the order with another amount or currency: a business conflict found by the second wall,
 * not a replay. Thrown before anything is written and answered with 409 {@code application/problem+json} by
 * {@link PaymentExceptionHandler}; being an exception, it rolls the request back and is not stored under the key, so
 * the key stays usable for a corrected request.
 */
public class OrderAlreadyPaidException extends RuntimeException {

    private final Payment existing;

    /** @param existing the payment the payer already made for the order */
    public OrderAlreadyPaidException(Payment existing) {
        super("order " + existing.orderId() + " is already paid with " + existing.amount() + " "
                + existing.currency() + " (payment " + existing.id() + "); a payment with another amount or"
                + " currency for the same order is refused");
        this.existing = existing;
    }

    /** The payment the payer already made for the order. */
    public Payment existing() {
        return existing;
    }
}
