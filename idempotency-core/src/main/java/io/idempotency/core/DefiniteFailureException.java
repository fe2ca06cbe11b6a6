package io.idempotency.core;

/**
 * Thrown by a handler in {@link IdempotencyMode#INTENT_FIRST} mode to say that its work definitely did not happen
 * (for example, the gateway refused the charge before doing anything): the claim is marked FAILED at once and the
 * same request, sent again, runs again; another request with the key is a mismatch (the gateway may have seen the
 * key's downstream key, which that request would send again). Any other exception is an unknown outcome, which leaves the claim for the
 * {@link StaleClaimResolver} once its lease has run out.
 */
public class DefiniteFailureException extends RuntimeException {

    public DefiniteFailureException(String message) {
        super(message);
    }

    public DefiniteFailureException(String message, Throwable cause) {
        super(message, cause);
    }
}
