package io.idempotency.spring;

/**
 * The largest header section the server sends over HTTP/1.1: the embedded one once it has started (see
 * {@link IdempotencyAutoConfiguration#headerSectionLimit(Class, org.springframework.core.env.Environment)}), or the
 * default of the Tomcat or Jetty a war is deployed to
 * ({@link IdempotencyAutoConfiguration#containerHeaderSectionLimit(String)}); unlimited before, and for a server the
 * library does not know. A resolver's answer is held to it as a handler's is
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
