package io.idempotency.spring;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.context.SmartLifecycle;

import java.time.Duration;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

/**
 * Background work of the starter (cleanup, sweeping) on one daemon thread of its own, at a fixed delay while the
 * application runs. A failed run — whatever it threw — is logged and tried again at the next interval.
 */
abstract class PeriodicTask implements SmartLifecycle {

    private static final Logger log = LoggerFactory.getLogger(PeriodicTask.class);

    private final String name;
    private final Duration interval;
    private ScheduledExecutorService executor;

    PeriodicTask(String name, Duration interval) {
        this.name = name;
        this.interval = interval;
    }

    /** One run of the work. */
    abstract void runOnce();

    Duration interval() {
        return interval;
    }

    /** Delay before the first scheduled run. */
    Duration firstDelay() {
        return interval;
    }

    @Override
    public void start() {
        executor = Executors.newSingleThreadScheduledExecutor(runnable -> {
            Thread thread = new Thread(runnable, name);
            thread.setDaemon(true);
            return thread;
        });
        executor.scheduleWithFixedDelay(this::runSafely, Math.max(1, firstDelay().toMillis()),
                Math.max(1, interval.toMillis()), TimeUnit.MILLISECONDS);
    }

    private void runSafely() {
        try {
            runOnce();
        } catch (RuntimeException e) {
            log.warn("{} failed; it runs again in {}", name, interval, e);
        } catch (Error e) {
            // a scheduled executor ends the schedule for good, without a word, on anything its task throws: an error
            // in an application's resolver (a class that fails to initialise, an assertion) must not end cleanup or
            // sweeping on this instance until it restarts
            log.error("{} failed; it runs again in {}", name, interval, e);
        }
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
