package io.idempotency.spring;

/**
 * The largest header section the embedded server sends over HTTP/1.1, once it has started (see
 * {@link IdempotencyAutoConfiguration#headerSectionLimit(Class, org.springframework.core.env.Environment)}); unlimited
 * before, and for a server the library does not know. A resolver's answer is held to it as a handler's is
 * ({@link ReplayableResolver}). One engine may answer through several servers: web child contexts of a parent that
 * holds the engine, each with a server of its own. Any of them may be asked for a record again, so the limit is the
 * smallest of theirs. Thread-safe.
 */
final class HeaderSectionLimit {

    private volatile long bytes = Long.MAX_VALUE;

    long bytes() {
        return bytes;
    }

    /** Holds the answers to {@code bytes} too, the limit of one more server that sends them. */
    synchronized void limit(long bytes) {
        this.bytes = Math.min(this.bytes, bytes);
    }
}
