package io.idempotency.spring;

/**
 * The largest header section the embedded server sends over HTTP/1.1, once it has started (see
 * {@link IdempotencyAutoConfiguration#headerSectionLimit(Class, org.springframework.core.env.Environment)}); unlimited
 * before, and for a server the library does not know. A resolver's answer is held to it as a handler's is
 * ({@link ReplayableResolver}). Thread-safe.
 */
final class HeaderSectionLimit {

    private volatile long bytes = Long.MAX_VALUE;

    long bytes() {
        return bytes;
    }

    void set(long bytes) {
        this.bytes = bytes;
    }
}
