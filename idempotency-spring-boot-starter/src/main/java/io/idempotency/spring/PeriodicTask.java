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
 * application runs. A failed run — whatever it threw, an undeclared checked exception included — is logged and tried
 * again at the next interval.
 * <p>
 * Stopped in the phase of the web server's graceful shutdown ({@link #PHASE}): a run that does not end at once (a
 * resolver waiting on a third party) is waited for while the web server drains, not before it stops taking requests.
 */
abstract class PeriodicTask implements SmartLifecycle {

    private static final Logger log = LoggerFactory.getLogger(PeriodicTask.class);

    /**
     * Spring Boot's {@code WebServerApplicationContext.GRACEFUL_SHUTDOWN_PHASE} (not referenced: an application need
     * not have a web server). In the default phase, which stops first, the wait for a run in progress would come
     * before the web server's graceful shutdown begins: it would go on taking requests, and start draining them only
     * once the run had ended or {@code spring.lifecycle.timeout-per-shutdown-phase} had run out.
     */
    static final int PHASE = SmartLifecycle.DEFAULT_PHASE - 1024;

    private final String name;
    private final Duration interval;
    private ScheduledExecutorService executor;

    /** How long {@link #stop()} waits for a run in progress. */
    private static final Duration STOP_WAIT = Duration.ofSeconds(10);

    /** Bounds the wait of {@link #stop(Runnable)}, whose caller gives up after its own timeout anyway. */
    private static final Duration STOP_WAIT_FOR_LIFECYCLE = Duration.ofMinutes(5);

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

    /** Starts the schedule; a task already running keeps the one it has. */
    @Override
    public synchronized void start() {
        if (executor != null) {
            return; // a second schedule would run beside the first, and no stop would end it
        }
        ScheduledExecutorService started = Executors.newSingleThreadScheduledExecutor(runnable -> {
            Thread thread = new Thread(null, runnable, name, 0, false); // inheriting no thread-locals of the starter
            thread.setDaemon(true);
            return thread;
        });
        executor = started;
        started.scheduleWithFixedDelay(() -> runSafely(started), Math.max(1, millis(firstDelay())),
                Math.max(1, millis(interval)), TimeUnit.MILLISECONDS);
    }

    /** {@code duration} in milliseconds; beyond about 292 million years, which do not fit a long, "never". */
    static long millis(Duration duration) {
        return duration.compareTo(Duration.ofMillis(Long.MAX_VALUE)) >= 0 ? Long.MAX_VALUE : duration.toMillis();
    }

    /** One run on {@code schedule}; a stop shuts that schedule down (a later start makes another one). */
    private void runSafely(ScheduledExecutorService schedule) {
        try {
            runOnce();
        } catch (Exception e) {
            // a checked exception too: code that declares none may still throw one (an IdempotencyStore or a resolver
            // in Kotlin passes the driver's SQLException on), and the executor would end the schedule on it as on an
            // error
            if (schedule.isShutdown()) {
                // interrupted by the stop: no run follows, and the failure is the stop's, not the database's
                log.info("{} stopped during a run: {}", name, e.toString());
                return;
            }
            log.warn("{} failed; it runs again in {}", name, interval, e);
        } catch (Throwable e) {
            // a scheduled executor ends the schedule for good, without a word, on anything its task throws: an error
            // in an application's resolver (a class that fails to initialise, an assertion), or a throwable of neither
            // kind thrown undeclared, must not end cleanup or sweeping on this instance until it restarts
            log.error("{} failed; it runs again in {}", name, interval, e);
        }
    }

    /**
     * Stops the schedule and interrupts a run in progress (a sweep then takes no further claim over, a cleanup deletes
     * no further batch), and waits for that run to end, at most {@link #STOP_WAIT}: the connection pool and the
     * application's resolver are closed once this returns.
     */
    @Override
    public void stop() {
        ScheduledExecutorService stopped = halt();
        if (stopped != null) {
            awaitEnd(stopped, STOP_WAIT);
        }
    }

    /**
     * As {@link #stop()}, but lets Spring's lifecycle wait for the run in progress, as long as it waits for every
     * component of this phase ({@code spring.lifecycle.timeout-per-shutdown-phase}).
     */
    @Override
    public void stop(Runnable callback) {
        ScheduledExecutorService stopped = halt();
        if (stopped == null) {
            callback.run();
            return;
        }
        Thread waiting = new Thread(() -> {
            try {
                awaitEnd(stopped, STOP_WAIT_FOR_LIFECYCLE);
            } finally {
                callback.run();
            }
        }, name + "-stop");
        waiting.setDaemon(true);
        waiting.start();
    }

    private synchronized ScheduledExecutorService halt() {
        ScheduledExecutorService stopped = executor;
        if (stopped != null) {
            stopped.shutdownNow();
            executor = null;
        }
        return stopped;
    }

    private void awaitEnd(ScheduledExecutorService stopped, Duration wait) {
        try {
            if (!stopped.awaitTermination(wait.toMillis(), TimeUnit.MILLISECONDS)) {
                log.warn("{} was still running {} after it was asked to stop; the application stops without waiting"
                        + " for it", name, wait);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    @Override
    public int getPhase() {
        return PHASE;
    }

    @Override
    public synchronized boolean isRunning() {
        return executor != null;
    }
}
