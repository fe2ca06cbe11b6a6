package io.idempotency.spring;

import io.idempotency.core.StaleClaimSweeper;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.MeterRegistry;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.time.Duration;

/**
 * Runs the {@link StaleClaimSweeper} every {@code idempotency.sweeper.interval} on a background thread of its own,
 * logs what it resolved, and counts it in {@value #RESOLVED_METRIC} (tag {@code outcome} = {@code completed} or
 * {@code failed}) when Micrometer is present.
 */
class StaleClaimSweepScheduler extends PeriodicTask {

    static final String RESOLVED_METRIC = "idempotency.sweeper.resolved";

    private static final Logger log = LoggerFactory.getLogger(StaleClaimSweepScheduler.class);

    private final StaleClaimSweeper sweeper;
    private final Counter completed;
    private final Counter failed;

    StaleClaimSweepScheduler(StaleClaimSweeper sweeper, Duration interval, Object registry) {
        super("idempotency-sweeper", interval);
        this.sweeper = sweeper;
        if (registry instanceof MeterRegistry meters) {
            completed = Counter.builder(RESOLVED_METRIC).tag("outcome", "completed")
                    .description("Stale idempotency claims the sweeper completed with the resolver's answer")
                    .register(meters);
            failed = Counter.builder(RESOLVED_METRIC).tag("outcome", "failed")
                    .description("Stale idempotency claims the sweeper marked FAILED, so that a retry runs again")
                    .register(meters);
        } else {
            completed = null;
            failed = null;
        }
    }

    @Override
    void runOnce() {
        sweepOnce();
    }

    /** One sweep, as the schedule does it. */
    StaleClaimSweeper.Sweep sweepOnce() {
        StaleClaimSweeper.Sweep sweep = sweeper.sweep();
        if (sweep.resolved() > 0) {
            log.info("Resolved {} stale idempotency claims: {} completed, {} marked failed", sweep.resolved(),
                    sweep.completed(), sweep.failed());
        }
        if (completed != null) {
            completed.increment(sweep.completed());
            failed.increment(sweep.failed());
        }
        return sweep;
    }
}
