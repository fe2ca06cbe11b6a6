package io.idempotency.spring;

/**
 * What the starter's background work reports, kept free of any metrics library so that the starter runs without
 * Micrometer; with Micrometer and a {@code MeterRegistry}, {@link MicrometerIdempotencyMeters} counts it.
 */
interface IdempotencyMeters {

    IdempotencyMeters NONE = new IdempotencyMeters() {
    };

    default void recordsRemoved(long count) {
    }

    default void partitionsDropped(int count) {
    }

    default void staleClaimsResolved(int completed, int failed) {
    }
}
