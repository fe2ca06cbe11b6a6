package io.idempotency.core;

/**
 * An answer to be stored for replay is larger than the configured cap on stored bodies
 * ({@code idempotency.max-stored-body-size} in the Spring Boot starter). It was not stored: the result of
 * {@link IdempotencyTemplate} work is refused and the work's writes are rolled back, as they are for an HTTP answer
 * above the cap; a {@link StaleClaimResolver}'s answer is refused like a resolver that fails, so the claim stays
 * PROCESSING and is resolved again once the lease of whoever asked has run out. Nothing is ever stored cut short.
 */
public class StoredBodyTooLargeException extends RuntimeException {

    private final transient ScopedKey key;
    private final long size;
    private final long maxSize;

    /**
     * @param what    what was to be stored, as the message names it, e.g. "the result of the work"
     * @param size    its body length in bytes
     * @param maxSize the cap, in bytes
     */
    public StoredBodyTooLargeException(ScopedKey key, String what, long size, long maxSize) {
        super(what + " for " + key + " is " + size + " bytes, more than the " + maxSize + " bytes stored for replay"
                + " (idempotency.max-stored-body-size): nothing of it was stored");
        this.key = key;
        this.size = size;
        this.maxSize = maxSize;
    }

    public ScopedKey key() {
        return key;
    }

    /** The body length of the refused answer, in bytes. */
    public long size() {
        return size;
    }

    /** The cap it exceeded, in bytes. */
    public long maxSize() {
        return maxSize;
    }
}
