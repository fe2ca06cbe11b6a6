package io.idempotency.sample.payment;

import io.idempotency.core.DefiniteFailureException;

/**
 * The payer's order is charged, or being charged, under another idempotency key: this request did not call the
 * gateway. A {@link DefiniteFailureException}, since nothing was charged: the starter marks the claim FAILED at once
 * instead of holding the key for the lease. Answered 409 by {@link ChargeExceptionHandler}.
 */
public class OrderAlreadyChargedException extends DefiniteFailureException {

    private final String orderId;
    private final Charge existing;

    /**
     * @param orderId  the order
     * @param existing the charge recorded for the payer and order, or null while the other request's outcome is not
     *                 recorded yet (it runs, or it crashed and waits for its lease to run out)
     */
    public OrderAlreadyChargedException(String orderId, Charge existing) {
        super("order " + orderId + " is charged, or being charged, under another idempotency key");
        this.orderId = orderId;
        this.existing = existing;
    }

    /** The order. */
    public String orderId() {
        return orderId;
    }

    /** The charge recorded for the payer and order, or null. */
    public Charge existing() {
        return existing;
    }
}
