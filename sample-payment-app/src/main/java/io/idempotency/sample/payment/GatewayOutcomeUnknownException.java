package io.idempotency.sample.payment;

/**
 * The gateway was asked but gave no usable answer (a timeout, a 5xx, a connection lost mid-request, an unexpected
 * status): the charge may or may not have been made. Deliberately not a {@code DefiniteFailureException}: the starter
 * keeps the claim PROCESSING until its lease runs out, and then {@link GatewayChargeResolver} asks the gateway what
 * became of it. Answered 502 by {@link ChargeExceptionHandler}.
 */
public class GatewayOutcomeUnknownException extends RuntimeException {

    /** @param message what failed */
    public GatewayOutcomeUnknownException(String message) {
        super(message);
    }

    /** @param message what failed; @param cause the underlying failure */
    public GatewayOutcomeUnknownException(String message, Throwable cause) {
        super(message, cause);
    }
}
