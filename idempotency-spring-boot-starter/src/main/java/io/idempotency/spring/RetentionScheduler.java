package io.idempotency.spring;

import io.idempotency.core.ExpiredRecordCleaner;
import io.idempotency.jdbc.PostgresPartitionMaintenance;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.time.Duration;

/**
 * Removes records past their retention, on one background thread of its own, every
 * {@code idempotency.retention.cleanup.interval}: batched deletes, or — in partitioned mode — partitions created ahead
 * and dropped when all their records have expired. In partitioned mode the first run happens at startup, before the
 * application takes requests, because a claim needs a partition for the current time. Every run logs what it
 * removed, and counts it in the metric {@code idempotency.cleanup.removed} when Micrometer is present. Safe on several
 * instances at once.
 */
class RetentionScheduler extends PeriodicTask {

    private static final Logger log = LoggerFactory.getLogger(RetentionScheduler.class);

    private final ExpiredRecordCleaner cleaner;
    private final PostgresPartitionMaintenance partitions;
    private final Duration retention;
    private final IdempotencyMeters meters;

    /**
     * @param cleaner    batched deletes, or null in partitioned mode
     * @param partitions partition maintenance, or null in delete mode
     * @param meters     where to count what was removed
     */
    RetentionScheduler(ExpiredRecordCleaner cleaner, PostgresPartitionMaintenance partitions, Duration retention,
                       Duration interval, IdempotencyMeters meters) {
        super("idempotency-cleanup", interval);
        this.cleaner = cleaner;
        this.partitions = partitions;
        this.retention = retention;
        this.meters = meters;
    }

    /** One run, as the schedule does it. */
    @Override
    void runOnce() {
        if (partitions != null) {
            PostgresPartitionMaintenance.Run run = partitions.run(retention);
            if (run.skipped()) {
                log.debug("Idempotency partition maintenance skipped: another instance is running it");
                return;
            }
            if (!run.created().isEmpty() || !run.dropped().isEmpty()) {
                log.info("Idempotency partitions: created {}, dropped {}", run.created(), run.dropped());
            }
            meters.partitionsDropped(run.dropped().size());
            return;
        }
        ExpiredRecordCleaner.Run run = cleaner.run();
        if (run.deleted() > 0) {
            log.info("Removed {} expired idempotency records in {} ms ({} batches)", run.deleted(),
                    run.took().toMillis(), run.batches());
        }
        meters.recordsRemoved(run.deleted());
    }

    @Override
    public void start() {
        if (partitions != null) {
            runOnce(); // claims need a partition for now: fail the start rather than every request
        }
        super.start();
    }

    @Override
    Duration firstDelay() {
        // the first delete run soon after startup, not an interval later
        return partitions != null ? interval() : Duration.ofMillis(Math.min(interval().toMillis(), 10_000));
    }
}
