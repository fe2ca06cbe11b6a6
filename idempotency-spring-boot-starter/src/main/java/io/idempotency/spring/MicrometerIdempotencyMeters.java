package io.idempotency.spring;

import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.MeterRegistry;

/** {@link IdempotencyMeters} as Micrometer counters. Only loaded when Micrometer is on the class path. */
final class MicrometerIdempotencyMeters implements IdempotencyMeters {

    /** Records (tag {@code unit=records}) or partitions ({@code unit=partitions}) removed by the cleanup. */
    static final String REMOVED = "idempotency.cleanup.removed";

    /** Stale claims the sweeper resolved, tagged {@code outcome} = {@code completed} or {@code failed}. */
    static final String RESOLVED = "idempotency.sweeper.resolved";

    /**
     * One description for each name, whatever its tag: a registry keeps one per name (Actuator's metrics endpoint,
     * Prometheus' HELP line), that of whichever counter of the name it met first.
     */
    private static final String REMOVED_DESCRIPTION = "Idempotency records (unit=records) or partitions"
            + " (unit=partitions) removed after their retention";

    private static final String RESOLVED_DESCRIPTION = "Stale idempotency claims the sweeper resolved: completed with"
            + " the resolver's answer (outcome=completed), or marked FAILED so that a retry runs again"
            + " (outcome=failed)";

    private final Counter records;
    private final Counter partitions;
    private final Counter completed;
    private final Counter failed;

    MicrometerIdempotencyMeters(MeterRegistry registry) {
        records = counter(registry, REMOVED, REMOVED_DESCRIPTION, "unit", "records");
        partitions = counter(registry, REMOVED, REMOVED_DESCRIPTION, "unit", "partitions");
        completed = counter(registry, RESOLVED, RESOLVED_DESCRIPTION, "outcome", "completed");
        failed = counter(registry, RESOLVED, RESOLVED_DESCRIPTION, "outcome", "failed");
    }

    private static Counter counter(MeterRegistry registry, String name, String description, String tag,
                                   String value) {
        return Counter.builder(name).tag(tag, value).description(description).register(registry);
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
