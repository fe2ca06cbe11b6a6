package io.idempotency.core;

import java.time.Duration;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Future;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.BooleanSupplier;

/** Keeps a claim's lease while its holder works: a handler, or a resolver asked about a stale claim. */
final class Leases {

    private static final System.Logger log = System.getLogger(Leases.class.getName());

    /** The longest duration whose milliseconds a long holds. */
    private static final Duration LONGEST_COUNTED = Duration.ofMillis(Long.MAX_VALUE);

    private Leases() {
    }

    /**
     * Renews the lease of the claim {@code token} holds every third of the lease, on {@code renewals}, until the
     * returned holding is cancelled or a renewal finds the claim taken over (its result will then be refused).
     *
     * @throws java.util.concurrent.RejectedExecutionException when {@code renewals} has been shut down
     */
    static Holding hold(ScheduledExecutorService renewals, IdempotencyStore store, ScopedKey key, String token,
                        Duration lease) {
        return hold(renewals, store, key, token, lease, 0);
    }

    /**
     * As {@link #hold(ScheduledExecutorService, IdempotencyStore, ScopedKey, String, Duration)}, for a lease that may
     * have been written up to {@code writtenMillisAgo} ago: the first renewal comes a third of the lease after that,
     * at once if that time has passed.
     */
    static Holding hold(ScheduledExecutorService renewals, IdempotencyStore store, ScopedKey key, String token,
                        Duration lease, long writtenMillisAgo) {
        long period = period(lease);
        long firstDelay = Math.max(0, period - Math.max(0, writtenMillisAgo));
        Holding holding = new Holding();
        try {
            holding.schedule.complete(renewals.scheduleWithFixedDelay(
                    () -> renew(renewals, holding, store, key, token, lease, period, 0), firstDelay, period,
                    TimeUnit.MILLISECONDS));
        } catch (Throwable e) {
            // the executor may have queued the renewal before it failed (no native thread for a worker it started):
            // the renewal, run all the same, would otherwise wait for its schedule for ever, on a renewal thread
            holding.schedule.completeExceptionally(e);
            throw e;
        }
        return holding;
    }

    /** How often a lease is renewed, in milliseconds: every third of it. */
    static long period(Duration lease) {
        // a lease beyond what milliseconds count (the store cuts it to what it can hold) is renewed as the longest
        return Math.max(1, (lease.compareTo(LONGEST_COUNTED) >= 0 ? Long.MAX_VALUE : lease.toMillis()) / 3);
    }

    /** The first wait before a failed renewal is tried again (a third of the period if that is shorter). */
    static final long FIRST_RETRY_MILLIS = 1000;

    /**
     * One renewal of the lease {@code holding} keeps. One that fails is tried again soon, not only at the next period:
     * a renewal that waited for a pool connection until the pool gave up (HikariCP's 30 s) has used up most of a
     * period already, and the next one could come after the lease has run out. Tried again after a second (or a third
     * of the period), then after twice as long each time, while that is shorter than the period, beside the renewals
     * of the schedule.
     *
     * @param retryAfter how long this renewal waited as a retry of a failed one; 0 for one of the schedule
     */
    private static void renew(ScheduledExecutorService renewals, Holding holding, IdempotencyStore store,
                              ScopedKey key, String token, Duration lease, long period, long retryAfter) {
        ScheduledFuture<?> schedule = holding.schedule.join();
        try {
            holding.renewing.lock(); // see handBack and stop: a renewal is never under way beside them
            try {
                if (!schedule.isCancelled() && !store.renew(key, token, lease)) {
                    schedule.cancel(false);
                }
            } finally {
                holding.renewing.unlock();
            }
        } catch (Throwable e) {
            if (schedule.isCancelled() || renewals.isShutdown()) {
                // stopped while it waited (see stop), or the engine is shutting down (its renewal threads interrupted):
                // nobody needs this renewal any more, and it is not tried again
                return;
            }
            // tried again (an error too, and a checked exception a store in Kotlin passes on undeclared: thrown on,
            // either would end the schedule for good, without a word); if the lease runs out meanwhile, fencing
            // protects the new holder. The holder may then lose its claim: say so, as it happens, rather than only
            // when its result is refused
            long retry = retryAfter == 0 ? Math.max(1, Math.min(FIRST_RETRY_MILLIS, period / 3)) : retryAfter * 2;
            boolean retried = false;
            if (retry < period) {
                try {
                    holding.retrying(renewals.schedule(
                            () -> renew(renewals, holding, store, key, token, lease, period, retry), retry,
                            TimeUnit.MILLISECONDS));
                    retried = true;
                } catch (RejectedExecutionException shutDown) {
                    // the engine is shutting down: the schedule's next renewal is not coming either
                }
            }
            long next = retried ? retry : period;
            log.log(System.Logger.Level.WARNING, () -> "Renewing the lease of the claim of " + key.describe()
                    + " failed; tried again in " + next + " ms. Should the lease run out first, another request or"
                    + " the sweeper may take the claim over, and the result of its holder is then refused", e);
        }
    }

    /**
     * A lease {@link #hold} keeps: the schedule of its renewals, and the lock a renewal under way holds. A lock, not a
     * monitor: {@link #stop} and {@link #handBack} wait for it, and handBack writes to the database while holding it,
     * on the request's thread. A virtual thread that waits for a monitor, or does I/O inside one, keeps its carrier
     * thread until Java 24; a few such waits (as many as there are cores), each for a renewal that waits for a pool
     * connection, would stop every virtual thread of the application, among them those that hold the connections.
     */
    static final class Holding {

        private final CompletableFuture<ScheduledFuture<?>> schedule = new CompletableFuture<>();
        /**
         * The retries of failed renewals still to come or under way, beside the schedule's renewals (see
         * {@link #renew}): each failure of the schedule begins a chain of its own, and an earlier chain's next retry
         * may still be to come.
         */
        private final Set<ScheduledFuture<?>> retries = ConcurrentHashMap.newKeySet();
        private final ReentrantLock renewing = new ReentrantLock();

        private Holding() {
        }

        private void retrying(ScheduledFuture<?> retry) {
            retries.removeIf(Future::isDone);
            retries.add(retry);
        }

        /** Stops the renewals; one under way runs to its end (see {@link #stop} to wait for it). */
        void cancel() {
            schedule.join().cancel(false);
            retries.forEach(retry -> retry.cancel(false));
        }

        /**
         * Stops the renewals, and interrupts the one under way, if any: one still waiting for a pooled connection gives
         * up at once (HikariCP ends that wait on an interrupt), while one whose statement has been sent runs to its
         * end (the JDBC drivers' blocking reads on a platform thread, which the renewal threads are, take no notice of
         * an interrupt). The renewal threads' executor clears the interrupt before it runs anything else.
         */
        void cancelAndInterrupt() {
            schedule.join().cancel(true);
            retries.forEach(retry -> retry.cancel(true));
        }
    }

    /**
     * Stops renewing the lease {@code holding} keeps ({@link #hold}), and returns once the renewal under way, if any,
     * has ended: for a holder about to write its outcome. Its transaction then holds the claim's row until it commits,
     * and a renewal still on its way to the row would wait for that commit on one of the few renewal threads — as long
     * as the commit stalls (a pause, a partition), with the leases of other claims left unrenewed behind it.
     * <p>
     * A renewal that is still waiting for a pooled connection is interrupted rather than waited for: the holder keeps a
     * connection of the same pool (its transaction's) until its answer is written, and when the pool has none left —
     * every connection held by holders at work — the two would wait on each other until the pool gave up on the
     * renewal (HikariCP's connection timeout, 30 s by default).
     */
    static void stop(Holding holding) {
        holding.cancelAndInterrupt();
        holding.renewing.lock(); // a renewal that has started runs to its end inside this lock
        holding.renewing.unlock(); // nothing to do: only waiting
    }

    /**
     * Stops renewing the lease {@code holding} keeps ({@link #hold}) and ends it at once, so that a retry or a sweeper
     * can take the claim over now rather than after the lease: for a holder whose work an interrupt (the application
     * stopping) ended before it decided anything. Ends it after the renewal in progress, if any, which would otherwise
     * extend the lease again — also one running on another of the renewal threads. Waits without the thread's
     * interrupt, which it keeps; a failure is attached to {@code failure} (the lease then runs out as it would have).
     */
    static void handBack(Holding holding, IdempotencyStore store, ScopedKey key, String token,
                         Throwable failure) {
        holding.cancel();
        // on this thread: a renewal of this lease that has just started waits for the hand-back on a renewal thread,
        // which would not be free to hand back on when there is only one (the lock ignores the thread's interrupt)
        holding.renewing.lock();
        try {
            endLease(store, key, token, failure);
        } finally {
            holding.renewing.unlock();
        }
    }

    /**
     * {@code write} run without the thread's interrupt, which it keeps: for a decision already made (a resolver's
     * answer), which an interrupt that came after it (the application stopping) must not lose. A pool refuses an
     * interrupted thread a connection at once when none is free (HikariCP does), rather than wait the moment it takes
     * for one.
     */
    static boolean uninterrupted(BooleanSupplier write) {
        boolean interrupted = Thread.interrupted();
        try {
            return write.getAsBoolean();
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /**
     * Ends the lease of the claim {@code token} holds at once, as {@link #handBack(Holding, IdempotencyStore,
     * ScopedKey, String, Throwable)} does, for a claim whose lease nothing renews (the renewals have been shut down).
     * Waits without the thread's interrupt, which it keeps; a failure is attached to {@code failure} (the lease then
     * runs out as it would have).
     */
    static void endLease(IdempotencyStore store, ScopedKey key, String token, Throwable failure) {
        boolean interrupted = Thread.interrupted();
        try {
            store.renew(key, token, IdempotencyEngine.MIN_LEASE);
        } catch (Exception e) { // also a checked exception a store in Kotlin passes on undeclared
            failure.addSuppressed(e);
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }
}
