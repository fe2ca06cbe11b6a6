package io.idempotency.spring;

import io.idempotency.core.ExpiredRecordCleaner;
import io.idempotency.jdbc.PostgresPartitionMaintenance;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.beans.factory.InitializingBean;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

/**
 * The retention's background work, on one thread of its own, every {@code idempotency.retention.cleanup.interval}:
 * batched deletes of expired records, or — in partitioned mode — partitions created ahead and, when cleanup is
 * enabled, partitions dropped once all their records have expired. Every run logs what it removed, and counts it in
 * the metric {@code idempotency.cleanup.removed} when Micrometer is present. Safe on several instances at once.
 * <p>
 * In partitioned mode a claim needs a partition for the current time, so this instance creates the partitions that
 * are due while the bean is initialised: before any lifecycle starts, so before the web server (or a message listener)
 * takes requests. A lock not had within the DDL lock timeout does not stop the start as long as a partition covers
 * the current time (the scheduled runs try again); without one, the start fails, since every claim would.
 * Partitions are dropped by the scheduled runs only, never during startup.
 */
class RetentionScheduler extends PeriodicTask implements InitializingBean {

    private static final Logger log = LoggerFactory.getLogger(RetentionScheduler.class);

    /** Longest wait before the first scheduled run. */
    private static final Duration FIRST_RUN_AT_MOST = Duration.ofSeconds(10);

    private final ExpiredRecordCleaner cleaner;
    private final PostgresPartitionMaintenance partitions;
    private final boolean createPartitions;
    private final boolean dropPartitions;
    private final Duration retention;
    private final IdempotencyMeters meters;

    /** Batched deletes of expired records. */
    static RetentionScheduler deleting(ExpiredRecordCleaner cleaner, Duration interval, IdempotencyMeters meters) {
        return new RetentionScheduler(cleaner, null, false, false, null, interval, meters);
    }

    /**
     * Partitions created ahead (when {@code createPartitions}: every instance keeps them ready, whether or not its
     * cleanup is enabled, unless they are managed outside the application) and, when {@code dropPartitions}, dropped
     * after {@code retention}.
     */
    static RetentionScheduler partitioned(PostgresPartitionMaintenance partitions, boolean createPartitions,
                                          boolean dropPartitions, Duration retention, Duration interval,
                                          IdempotencyMeters meters) {
        return new RetentionScheduler(null, partitions, createPartitions, dropPartitions, retention, interval, meters);
    }

    private RetentionScheduler(ExpiredRecordCleaner cleaner, PostgresPartitionMaintenance partitions,
                               boolean createPartitions, boolean dropPartitions, Duration retention, Duration interval,
                               IdempotencyMeters meters) {
        super("idempotency-cleanup", interval);
        this.cleaner = cleaner;
        this.partitions = partitions;
        this.createPartitions = createPartitions;
        this.dropPartitions = dropPartitions;
        this.retention = retention;
        this.meters = meters;
    }

    /** In partitioned mode: the partitions that are due, before anything takes requests. */
    @Override
    public void afterPropertiesSet() {
        if (partitions == null) {
            return;
        }
        if (createPartitions || dropPartitions) {
            String denied = partitions.maintenanceDenied(createPartitions, dropPartitions);
            if (denied != null) {
                String settings = (createPartitions ? "idempotency.retention.cleanup.create-partitions=true" : "")
                        + (createPartitions && dropPartitions ? " and " : "")
                        + (dropPartitions ? "idempotency.retention.cleanup.enabled=true" : "");
                throw new IdempotencyConfigurationException("The application keeps the partitions of the idempotency"
                        + " table (" + settings + "), but " + denied + ": PostgreSQL lets only a table's owner"
                        + " attach, detach and drop its partitions, and a new one is a table of the schema. "
                        + (createPartitions ? "Partitions made ahead would run out, and then every claim fail"
                        : "No expired partition would ever be dropped") + ", so the application does not start.",
                        "Make the application's role the owner of the table and of each of its partitions (ALTER"
                        + " TABLE … OWNER TO)" + (createPartitions ? ", with CREATE on the schema" : "") + ", or"
                        + " leave the partitions to whoever owns them:"
                        + " idempotency.retention.cleanup.create-partitions=false and"
                        + " idempotency.retention.cleanup.enabled=false.");
            }
        }
        if (createPartitions) {
            createPartitionsAtStartup();
        } else if (!partitions.coversNow()) {
            throw new IdempotencyConfigurationException("No partition of the idempotency table covers the current"
                    + " time, and idempotency.retention.cleanup.create-partitions=false leaves creating them to"
                    + " something else. Every claim would fail, so the application does not start.", "Create the"
                    + " partitions (or a default partition) with the tool that manages them, or let the application"
                    + " create them (idempotency.retention.cleanup.create-partitions=true).");
        }
    }

    private void createPartitionsAtStartup() {
        try {
            // waits (at most the DDL lock timeout) for an instance creating them right now, rather than skip
            report(partitions.createAhead(true), new HashSet<>());
        } catch (RuntimeException e) {
            if (!PostgresPartitionMaintenance.isLockNotAvailable(e)) {
                throw e;
            }
            if (!partitions.coversNow()) {
                throw new IdempotencyConfigurationException("No partition of the idempotency table covers the current"
                        + " time, and none could be created at startup because a lock was not available in time ("
                        + e.getMessage() + "). Every claim would fail, so the application does not start.", "Find the"
                        + " session that holds a lock on the table (pg_locks) or create the partition, and start"
                        + " again.", e);
            }
            log.warn("Idempotency partitions could not all be created at startup, because a lock was not available in"
                    + " time; a partition for the current time exists, so the application starts, and the next"
                    + " scheduled run (in {}) tries again: {}", firstDelay(), e.getMessage());
        }
    }

    /** One run, as the schedule does it. */
    @Override
    void runOnce() {
        if (partitions != null) {
            maintainPartitions();
            return;
        }
        long[] removed = {0};
        ExpiredRecordCleaner.Run run;
        try {
            // counted batch by batch: a run that fails half-way has still removed what its batches committed
            run = cleaner.run(batch -> {
                removed[0] += batch;
                meters.recordsRemoved(batch);
            });
        } catch (RuntimeException e) {
            if (removed[0] > 0) {
                log.info("Removed {} expired idempotency record{} before the cleanup run failed", removed[0],
                        removed[0] == 1 ? "" : "s");
            }
            throw e;
        }
        if (run.deleted() > 0) {
            log.info("Removed {} expired idempotency record{} in {} ms ({} batch{})", run.deleted(),
                    run.deleted() == 1 ? "" : "s", run.took().toMillis(), run.batches(),
                    run.batches() == 1 ? "" : "es");
        }
    }

    private void maintainPartitions() {
        // a run creates twice when it drops (before, and after a detach that may have waited): a range still blocked
        // the second time is the same finding, warned of once
        Set<String> warned = new HashSet<>();
        // dropping does not depend on the creation: still done when it failed, then reported
        RuntimeException creationFailure = createPartitions ? createAhead(warned) : null;
        if (dropPartitions) {
            PostgresPartitionMaintenance.Run run;
            List<String> dropped = new ArrayList<>();
            try {
                // counted table by table: a run that fails half-way has still dropped the tables before
                run = partitions.dropExpired(retention, name -> {
                    dropped.add(name);
                    meters.partitionsDropped(1);
                }, key -> log.warn("Idempotency claim of {} removed from an expired partition, its outcome never"
                        + " resolved: claimed more than the retention ago, its lease since run out, and no retry or"
                        + " stale claim sweep decided it (the sweeper off, or its resolver failing). Whether its side"
                        + " effect happened is known only to the third party; a retry with its key now runs the"
                        + " request again", key.describe()));
            } catch (RuntimeException e) {
                if (!dropped.isEmpty()) {
                    log.info("Idempotency partitions dropped before the run failed: {}", dropped);
                }
                RuntimeException recreation = createPartitions ? createAhead(warned) : null;
                if (recreation != null) {
                    e.addSuppressed(recreation);
                }
                throw e;
            }
            if (createPartitions) {
                // a detach waits for the requests in progress on the table, as long as an interval: the partitions
                // that fell due meanwhile are made now, so that the next creation is still an interval away, as the
                // partitions kept ahead are sized for
                creationFailure = createAhead(warned);
            }
            if (run.skipped()) {
                log.debug("Idempotency partitions not dropped in this run: another instance is dropping them");
            } else {
                if (!run.dropped().isEmpty()) {
                    log.info("Idempotency partitions dropped: {}", run.dropped());
                }
                if (!run.notDropped().isEmpty()) {
                    log.warn("Idempotency tables detached for removal could not be dropped, and each run tries again"
                            + " (the other expired partitions are still dropped): {}. The library never drops with"
                            + " CASCADE: drop the objects that depend on these tables (such as views), or the tables"
                            + " themselves", run.notDropped());
                }
            }
        }
        if (creationFailure != null) {
            throw creationFailure;
        }
    }

    /** The partitions due, the blocked ranges not in {@code warned} warned of; what went wrong, if anything. */
    private RuntimeException createAhead(Set<String> warned) {
        try {
            PostgresPartitionMaintenance.Run run = partitions.createAhead(false);
            if (run.skipped()) {
                log.debug("Idempotency partitions not created in this run: another instance is creating them");
            } else {
                report(run, warned);
            }
            return null;
        } catch (RuntimeException e) {
            return e;
        }
    }

    /**
     * What a creation did: the partitions it made, and the ranges a default partition's rows kept it from that are
     * not in {@code warned} (the ranges already warned of in this run), which are added to it.
     */
    private static void report(PostgresPartitionMaintenance.Run run, Set<String> warned) {
        if (!run.created().isEmpty()) {
            log.info("Idempotency partitions created: {}", run.created());
        }
        List<String> blocked = run.blocked().stream().filter(warned::add).toList();
        if (!blocked.isEmpty()) {
            log.warn("Idempotency partitions not created for {}: the table's default partition holds rows in those"
                    + " ranges; move them out of the default partition (detach it, create the ranges, insert the"
                    + " rows again) so that they can be dropped with their partition", blocked);
        }
    }

    @Override
    Duration firstDelay() {
        // soon after startup, not an interval later: the first removal, or another try at partitions not created
        return Duration.ofMillis(Math.min(millis(interval()), FIRST_RUN_AT_MOST.toMillis()));
    }
}
