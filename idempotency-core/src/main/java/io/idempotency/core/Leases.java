package io.idempotency.core;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;

/** Keeps a claim's lease while its holder works: a handler, or a resolver asked about a stale claim. */
final class Leases {

    private static final System.Logger log = System.getLogger(Leases.class.getName());

    private Leases() {
    }

    /**
     * Renews the lease of the claim {@code token} holds every third of the lease, on {@code renewals}, until the
     * returned future is cancelled or a renewal finds the claim taken over (its result will then be refused).
     *
     * @throws java.util.concurrent.RejectedExecutionException when {@code renewals} has been shut down
     */
    static ScheduledFuture<?> hold(ScheduledExecutorService renewals, IdempotencyStore store, ScopedKey key,
                                   String token, Duration lease) {
        long period = Math.max(1, lease.toMillis() / 3);
        CompletableFuture<ScheduledFuture<?>> self = new CompletableFuture<>();
        ScheduledFuture<?> renewal = renewals.scheduleWithFixedDelay(() -> {
            ScheduledFuture<?> holding = self.join();
            try {
                synchronized (holding) { // see handBack and stop: a renewal is never under way beside them
                    if (!holding.isCancelled() && !store.renew(key, token, lease)) {
                        holding.cancel(false);
                    }
                }
            } catch (Throwable e) {
                // the next renewal tries again (an error too, and a checked exception a store in Kotlin passes on
                // undeclared: thrown on, either would end the schedule for good, without a word); if the lease runs
                // out meanwhile, fencing protects the new holder. The holder may then lose its claim: say so, as it
                // happens, rather than only when its result is refused
                log.log(System.Logger.Level.WARNING, () -> "Renewing the lease of the claim of " + key.describe()
                        + " failed; tried again in " + period + " ms. Should the lease run out first, another request or the"
                        + " sweeper may take the claim over, and the result of its holder is then refused", e);
            }
        }, period, period, TimeUnit.MILLISECONDS);
        self.complete(renewal);
        return renewal;
    }

    /**
     * Stops renewing the lease {@code holding} keeps ({@link #hold}), and returns once the renewal under way, if any,
     * has ended: for a holder about to write its outcome. Its transaction then holds the claim's row until it commits,
     * and a renewal still on its way to the row would wait for that commit on one of the few renewal threads — as long
     * as the commit stalls (a pause, a partition), with the leases of other claims left unrenewed behind it.
     */
    static void stop(ScheduledFuture<?> holding) {
        holding.cancel(false);
        synchronized (holding) { // a renewal that has started runs to its end inside this lock
            // nothing to do: only waiting
        }
    }

    /**
     * Stops renewing the lease {@code holding} keeps ({@link #hold}) and ends it at once, so that a retry or a sweeper
     * can take the claim over now rather than after the lease: for a holder whose work an interrupt (the application
     * stopping) ended before it decided anything. Ends it after the renewal in progress, if any, which would otherwise
     * extend the lease again — also one running on another of the renewal threads. Waits without the thread's
     * interrupt, which it keeps; a failure is attached to {@code failure} (the lease then runs out as it would have).
     */
    static void handBack(ScheduledFuture<?> holding, IdempotencyStore store, ScopedKey key, String token,
                         Throwable failure) {
        holding.cancel(false);
        // on this thread: a renewal of this lease that has just started waits for the hand-back on a renewal thread,
        // which would not be free to hand back on when there is only one
        synchronized (holding) {
            endLease(store, key, token, failure);
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
     * Ends the lease of the claim {@code token} holds at once, as {@link #handBack(ScheduledFuture, IdempotencyStore,
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
