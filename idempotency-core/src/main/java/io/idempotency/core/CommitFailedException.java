package io.idempotency.core;

/**
 * The transaction holding a request's effects and its stored answer failed to commit (for example a deferred
 * constraint, a serialization failure or a lost connection). Nothing of the request was kept, so the answer the
 * handler produced must not be sent: the client gets a 5xx and may retry.
 */
public class CommitFailedException extends RuntimeException {

    private final transient ScopedKey key;

    public CommitFailedException(ScopedKey key, Throwable cause) {
        super("the transaction for " + key + " failed to commit", cause);
        this.key = key;
    }

    public ScopedKey key() {
        return key;
    }
}
