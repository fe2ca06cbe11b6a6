package io.idempotency.spring;

import io.idempotency.core.StaleClaimSweeper;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.MeterRegistry;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.context.SmartLifecycle;

import java.time.Duration;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

/**
 * Runs the {@link StaleClaimSweeper} every {@code idempotency.sweeper.interval} on a background thread of its own,
 * logs what it resolved, and counts it in {@value #RESOLVED_METRIC} (tag {@code outcome} = {@code completed} or
 * {@code failed}) when Micrometer is present. A failed sweep is logged and retried at the next interval.
 */
class StaleClaimSweepScheduler implements SmartLifecycle {

    static final String RESOLVED_METRIC = "idempotency.sweeper.resolved";

    private static final Logger log = LoggerFactory.getLogger(StaleClaimSweepScheduler.class);

    private final StaleClaimSweeper sweeper;
    private final Duration interval;
    private final Counter completed;
    private final Counter failed;
    private ScheduledExecutorService executor;

    StaleClaimSweepScheduler(StaleClaimSweeper sweeper, Duration interval, Object registry) {
        this.sweeper = sweeper;
        this.interval = interval;
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

    @Override
    public void start() {
        executor = Executors.newSingleThreadScheduledExecutor(runnable -> {
            Thread thread = new Thread(runnable, "idempotency-sweeper");
            thread.setDaemon(true);
            return thread;
        });
        long period = Math.max(1, interval.toMillis());
        executor.scheduleWithFixedDelay(() -> {
            try {
                sweepOnce();
            } catch (RuntimeException e) {
                log.warn("Sweep of stale idempotency claims failed; it runs again in {}", interval, e);
            }
        }, period, period, TimeUnit.MILLISECONDS);
    }

    @Override
    public void stop() {
        if (executor != null) {
            executor.shutdownNow();
            executor = null;
        }
    }

    @Override
    public boolean isRunning() {
        return executor != null;
    }
}
