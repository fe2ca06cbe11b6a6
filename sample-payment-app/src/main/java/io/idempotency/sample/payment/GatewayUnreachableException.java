package io.idempotency.sample.payment;

import io.idempotency.core.DefiniteFailureException;

/**
 * The gateway could not be reached at all (connection refused, or no connection within the connect timeout): the
 * charge request never left this application, so the charge definitely was not made. A
 * {@link DefiniteFailureException}, so that the starter marks the claim FAILED at once and a retry with the same key
 * runs again without waiting for the lease. Answered 503 by {@link ChargeExceptionHandler}.
 */
public class GatewayUnreachableException extends DefiniteFailureException {

    /** @param message what failed; @param cause the connection failure */
    public GatewayUnreachableException(String message, Throwable cause) {
        super(message, cause);
    }
}
