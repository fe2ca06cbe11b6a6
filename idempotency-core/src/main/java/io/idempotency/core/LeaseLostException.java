package io.idempotency.core;

/**
 * A claim committed before its work could not record its result because its lease ran out and another request or the
 * sweeper took the claim over (the fencing token no longer matches). The late result, and the local writes made with
 * it, are discarded, so that they cannot overwrite what the new holder records.
 */
public class LeaseLostException extends RuntimeException {

    private final transient ScopedKey key;

    public LeaseLostException(ScopedKey key) {
        super("the lease on " + key + " was taken over before the result could be recorded");
        this.key = key;
    }

    public ScopedKey key() {
        return key;
    }
}
