package io.idempotency.core;

/**
 * Intent-first work reached the engine after it was shut down (its application context is closing): nothing would
 * renew its lease, so the work did not run, and the claim it took is kept from no one. Not a mistake in the work or
 * its message: the same work runs on an instance that is running, so a message listener gives its message back (a
 * redelivery) rather than dead-lettering it, as it would for the other {@link IllegalStateException}s the engine
 * throws.
 */
public class EngineShutDownException extends IllegalStateException {

    public EngineShutDownException(ScopedKey key, Throwable cause) {
        super("the idempotency engine has been shut down: no work under " + key + " can start", cause);
    }
}
