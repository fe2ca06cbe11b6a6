package io.idempotency.core;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;

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
            try {
                if (!store.renew(key, token, lease)) {
                    self.join().cancel(false);
                }
            } catch (RuntimeException | Error e) {
                // the next renewal tries again (an error too: thrown on, it would end the schedule for good, without
                // a word); if the lease runs out meanwhile, fencing protects the new holder. The holder may then lose
                // its claim: say so, as it happens, rather than only when its result is refused
                log.log(System.Logger.Level.WARNING, () -> "Renewing the lease of the claim of caller '"
                        + key.caller() + "' on '" + key.scope() + "' with key '" + key.key() + "' failed; tried"
                        + " again in " + period + " ms. Should the lease run out first, another request or the"
                        + " sweeper may take the claim over, and the result of its holder is then refused", e);
            }
        }, period, period, TimeUnit.MILLISECONDS);
        self.complete(renewal);
        return renewal;
    }
}
