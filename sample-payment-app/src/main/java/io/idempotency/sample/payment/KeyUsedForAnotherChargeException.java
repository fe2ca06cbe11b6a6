package io.idempotency.sample.payment;

import io.idempotency.core.DefiniteFailureException;

/**
 * The idempotency key was used before for a charge of another order of the payer, and its record has been deleted
 * since (retention): the key the gateway gets is derived from the idempotency key, so the gateway may know it by that
 * charge, and would answer this one with it. This request did not call the gateway. A
 * {@link DefiniteFailureException}, since nothing was charged: the starter marks the claim FAILED at once. Answered
 * 422 by {@link ChargeExceptionHandler}.
 */
public class KeyUsedForAnotherChargeException extends DefiniteFailureException {

    private final String orderId;

    /** @param orderId the order of this request */
    public KeyUsedForAnotherChargeException(String orderId) {
        super("the idempotency key of a charge of order " + orderId + " was used before for a charge of another order");
        this.orderId = orderId;
    }

    /** The order of this request. */
    public String orderId() {
        return orderId;
    }
}
