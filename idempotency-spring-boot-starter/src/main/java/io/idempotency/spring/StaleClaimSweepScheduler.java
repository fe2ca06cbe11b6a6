package io.idempotency.spring;

import io.idempotency.core.ScopedKey;
import io.idempotency.core.StaleClaimSweeper;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.time.Duration;

/**
 * Runs the {@link StaleClaimSweeper} every {@code idempotency.sweeper.interval} on a background thread of its own,
 * logs each claim it resolved and how, and counts it in {@code idempotency.sweeper.resolved} (tag {@code outcome} =
 * {@code completed} or {@code failed}) when Micrometer is present.
 */
class StaleClaimSweepScheduler extends PeriodicTask {

    private static final Logger log = LoggerFactory.getLogger(StaleClaimSweepScheduler.class);

    private final StaleClaimSweeper sweeper;
    private final IdempotencyMeters meters;

    StaleClaimSweepScheduler(StaleClaimSweeper sweeper, Duration interval, IdempotencyMeters meters) {
        super("idempotency-sweeper", interval);
        this.sweeper = sweeper;
        this.meters = meters;
    }

    @Override
    void runOnce() {
        sweepOnce();
    }

    /**
     * One sweep, as the schedule does it. Each claim is logged and counted as the sweep records it: a sweep that fails
     * half-way (the database went away) has still resolved the claims before.
     */
    StaleClaimSweeper.Sweep sweepOnce() {
        int[] resolved = new int[2]; // completed, marked failed
        boolean ended = false;
        try {
            StaleClaimSweeper.Sweep sweep = sweeper.sweep(new StaleClaimSweeper.Progress() {
                @Override
                public void resolved(ScopedKey key, boolean completed) {
                    resolved[completed ? 0 : 1]++;
                    log(key, completed);
                }

                @Override
                public void unresolved(StaleClaimSweeper.Unresolved unresolved) {
                    warn(unresolved);
                }

                @Override
                public void superseded(ScopedKey key, boolean completed) {
                    log.warn("The stale claim resolver decided to {} the claim of {}, but that was not recorded: the claim was"
                            + " taken over while the resolver was asked (the sweeper's lease on it had run out), and"
                            + " its new holder's outcome stands", completed ? "complete" : "mark FAILED",
                            key.describe());
                }
            });
            ended = true;
            if (sweep.resolved() > 0) {
                log.info("Resolved {} stale idempotency claims: {} completed, {} marked failed", sweep.resolved(),
                        sweep.completed(), sweep.failed());
            }
            return sweep;
        } finally {
            if (!ended && resolved[0] + resolved[1] > 0) {
                log.info("Resolved {} stale idempotency claims before the sweep failed: {} completed, {} marked"
                        + " failed", resolved[0] + resolved[1], resolved[0], resolved[1]);
            }
            meters.staleClaimsResolved(resolved[0], resolved[1]);
        }
    }

    /**
     * One line per resolved claim, at most a sweep's batch size of them: a claim marked FAILED is overwritten by the
     * retry that runs its request again, so the log is what tells which claims the sweeper gave up on. The claim's
     * identity only, as the table holds it: neither the answer stored nor the key derived for the third party.
     */
    private static void log(ScopedKey key, boolean completed) {
        log.info("Stale idempotency claim of {} {}", key.describe(), completed
                ? "completed with the resolver's answer, which is replayed to a retry"
                : "marked FAILED: a retry runs its request again");
    }

    private static void warn(StaleClaimSweeper.Unresolved unresolved) {
        // the claim's identity, as the table holds it, so that it can be looked up (and the third party asked); on
        // one line whatever it holds, with Java escapes for the characters that would end or rewrite it
        // a resolver failing as the sweep is stopped (the application shuts down) has its claim handed back, its
        // lease ended: the sweeper tells of it on the thread it was stopped on
        log.warn("The stale claim resolver failed for the claim of {}; {}", unresolved.key().describe(),
                Thread.currentThread().isInterrupted()
                        ? "the sweep was stopped, so the claim is handed back, for a retry or another sweeper to"
                        + " resolve at once"
                        : "the claim is looked at again once the sweeper's lease on it has run out",
                unresolved.error());
    }
}
