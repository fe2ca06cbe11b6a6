package io.idempotency.spring;

import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.MeterRegistry;

/** {@link IdempotencyMeters} as Micrometer counters. Only loaded when Micrometer is on the class path. */
final class MicrometerIdempotencyMeters implements IdempotencyMeters {

    /** Records (tag {@code unit=records}) or partitions ({@code unit=partitions}) removed by the cleanup. */
    static final String REMOVED = "idempotency.cleanup.removed";

    /** Stale claims the sweeper resolved, tagged {@code outcome} = {@code completed} or {@code failed}. */
    static final String RESOLVED = "idempotency.sweeper.resolved";

    private final Counter records;
    private final Counter partitions;
    private final Counter completed;
    private final Counter failed;

    MicrometerIdempotencyMeters(MeterRegistry registry) {
        records = Counter.builder(REMOVED).tag("unit", "records")
                .description("Idempotency records removed after their retention").register(registry);
        partitions = Counter.builder(REMOVED).tag("unit", "partitions")
                .description("Idempotency partitions dropped after their retention").register(registry);
        completed = Counter.builder(RESOLVED).tag("outcome", "completed")
                .description("Stale idempotency claims the sweeper completed with the resolver's answer")
                .register(registry);
        failed = Counter.builder(RESOLVED).tag("outcome", "failed")
                .description("Stale idempotency claims the sweeper marked FAILED, so that a retry runs again")
                .register(registry);
    }

    @Override
    public void recordsRemoved(long count) {
        records.increment(count);
    }

    @Override
    public void partitionsDropped(int count) {
        partitions.increment(count);
    }

    @Override
    public void staleClaimsResolved(int completedCount, int failedCount) {
        completed.increment(completedCount);
        failed.increment(failedCount);
    }
}
