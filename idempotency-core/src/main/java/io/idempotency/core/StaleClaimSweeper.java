package io.idempotency.core;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;

/**
 * Finds claims committed before their work whose lease ran out while no retry came to resolve them, and resolves
 * them: a stale claim is never left hanging. Each stale claim is first taken over (a new fencing token and lease,
 * compare-and-set on the old token), so that of several sweepers — on several instances — and retries, exactly one
 * consults the resolver and records its decision. A "complete" decision stores the answer as SUCCEEDED; "fail" and
 * "rerun" mark the claim FAILED, so that its request, sent again, runs again. Thread-safe.
 */
public final class StaleClaimSweeper {

    /**
     * What one sweep did.
     *
     * @param unresolved the claims the resolver could not decide, each with what it threw; such a claim stays taken
     *                   over by the sweeper until its lease runs out, and is then resolved again (at once when the
     *                   sweep was interrupted: its lease is ended)
     */
    public record Sweep(int found, int completed, int failed, List<Unresolved> unresolved) {

        public Sweep {
            unresolved = List.copyOf(unresolved);
        }

        /** Claims this sweep resolved (found but taken by someone else are not counted). */
        public int resolved() {
            return completed + failed;
        }
    }

    /**
     * A claim the resolver could not decide, and what it threw: an exception (also a checked one a resolver in Kotlin
     * throws undeclared), or an error such as an assertion's. Or what failed before the resolver could be asked (the
     * downstream key to tell it of could not be derived).
     */
    public record Unresolved(ScopedKey key, Throwable error) {
    }

    /**
     * What a sweep does, told claim by claim as it happens: a sweep that fails later (the database went away) has
     * still resolved the claims it told of.
     */
    public interface Progress {

        /** {@code key}'s claim was resolved: its answer stored ({@code completed}), or marked FAILED. */
        default void resolved(ScopedKey key, boolean completed) {
        }

        /** The resolver could not decide a claim. */
        default void unresolved(Unresolved unresolved) {
        }

        /**
         * The resolver decided {@code key}'s claim ({@code completed} with its answer, or to mark it FAILED), but the
         * decision was not recorded: the sweeper's lease on the claim ran out while the resolver was asked, and a
         * retry or another sweeper took the claim over, whose outcome stands (the claim's fencing token keeps this
         * decision out).
         */
        default void superseded(ScopedKey key, boolean completed) {
        }
    }

    private final IdempotencyStore store;
    private final StaleClaimResolver resolver;
    private final DownstreamKeys downstreamKeys;
    private final Duration lease;
    private final int batchSize;
    private final long maxStoredBodySize;
    private final StoragePolicy policy;

    /**
     * A sweeper that stores answers of the resolver up to
     * {@link IdempotencyEngine#DEFAULT_MAX_STORED_BODY_SIZE}, with a status {@link StoragePolicy#DEFAULT} stores.
     *
     * @param lease     the lease a stale claim is taken over with, renewed while the resolver answers; at least
     *                  {@link IdempotencyEngine#MIN_LEASE}
     * @param batchSize most stale claims looked at per sweep; at least 1
     */
    public StaleClaimSweeper(IdempotencyStore store, StaleClaimResolver resolver, DownstreamKeys downstreamKeys,
                             Duration lease, int batchSize) {
        this(store, resolver, downstreamKeys, lease, batchSize, IdempotencyEngine.DEFAULT_MAX_STORED_BODY_SIZE);
    }

    /**
     * @param lease             the lease a stale claim is taken over with, renewed while the resolver answers; at
     *                          least {@link IdempotencyEngine#MIN_LEASE}
     * @param batchSize         most stale claims looked at per sweep; at least 1
     * @param maxStoredBodySize the largest answer body, in bytes, stored for replay; a resolver's larger answer is
     *                          not stored, and the claim is reported {@link Unresolved} with a
     *                          {@link StoredBodyTooLargeException}
     */
    public StaleClaimSweeper(IdempotencyStore store, StaleClaimResolver resolver, DownstreamKeys downstreamKeys,
                             Duration lease, int batchSize, long maxStoredBodySize) {
        this(store, resolver, downstreamKeys, lease, batchSize, maxStoredBodySize, StoragePolicy.DEFAULT);
    }

    /**
     * @param lease             the lease a stale claim is taken over with, renewed while the resolver answers; at
     *                          least {@link IdempotencyEngine#MIN_LEASE}
     * @param batchSize         most stale claims looked at per sweep; at least 1
     * @param maxStoredBodySize the largest answer body, in bytes, stored for replay; a resolver's larger answer is
     *                          not stored, and the claim is reported {@link Unresolved} with a
     *                          {@link StoredBodyTooLargeException}
     * @param policy            the statuses a resolver's answer may be stored with (the engine's default policy); an
     *                          answer with another status is not stored, and the claim is reported {@link Unresolved}
     *                          with a {@link StaleClaimUndecidedException}
     */
    public StaleClaimSweeper(IdempotencyStore store, StaleClaimResolver resolver, DownstreamKeys downstreamKeys,
                             Duration lease, int batchSize, long maxStoredBodySize, StoragePolicy policy) {
        if (maxStoredBodySize <= 0) {
            throw new IllegalArgumentException("maxStoredBodySize must be positive: " + maxStoredBodySize);
        }
        if (batchSize < 1) {
            // a sweep looking at no claim would never resolve one, and say nothing of it
            throw new IllegalArgumentException("batchSize must be at least 1: " + batchSize);
        }
        this.maxStoredBodySize = maxStoredBodySize;
        this.policy = Objects.requireNonNull(policy, "policy");
        this.store = Objects.requireNonNull(store, "store");
        this.resolver = Objects.requireNonNull(resolver, "resolver");
        this.downstreamKeys = Objects.requireNonNull(downstreamKeys, "downstreamKeys");
        this.lease = IdempotencyEngine.lease(lease);
        this.batchSize = batchSize;
    }

    /**
     * Resolves the stale claims found now; call with no transaction open. An interrupt of the calling thread stops
     * the sweep before the next claim: the claims not looked at yet are left as they were, and a claim whose resolver
     * failed while the thread was interrupted is handed back (its lease ended), for anyone to resolve at once.
     */
    public Sweep sweep() {
        return sweep(new Progress() {
        });
    }

    /**
     * As {@link #sweep()}, telling {@code progress} of each claim as soon as it is resolved (its resolution
     * committed) or its resolver has failed.
     */
    public Sweep sweep(Progress progress) {
        Objects.requireNonNull(progress, "progress");
        int found = 0;
        int completed = 0;
        int failed = 0;
        List<Unresolved> unresolved = new ArrayList<>();
        List<IdempotencyRecord> stales = store.findExpiredLeases(batchSize);
        if (stales.isEmpty()) {
            return new Sweep(0, 0, 0, unresolved);
        }
        // the resolver may ask a slow third party: the claim is held meanwhile, or another sweeper or a retry could
        // take it over too and ask again
        ScheduledExecutorService renewals = Executors.newSingleThreadScheduledExecutor(runnable -> {
            // a sweep may be run from any thread: nothing of its inheritable thread-locals is copied
            Thread thread = new Thread(null, runnable, "idempotency-sweeper-lease", 0, false);
            thread.setDaemon(true);
            return thread;
        });
        try {
            for (IdempotencyRecord stale : stales) {
                if (Thread.currentThread().isInterrupted()) {
                    // asked to stop (the application shuts down): a claim taken over now would only wait for this
                    // sweeper's lease to run out before anyone could resolve it; leave it to the next sweep
                    break;
                }
                found++;
                Optional<String> token = store.takeOver(stale.key(), stale.fencingToken(), lease);
                if (token.isEmpty()) {
                    continue; // another sweeper or a retry has it
                }
                StaleClaimResolver.Resolution resolution;
                try {
                    // made before the lease is held: deriving its downstream key may fail (the warning about the
                    // default secret is logged then), and the claim, held on, would be out of everyone's reach for
                    // as long as the resolvers of the claims after it take
                    StaleClaimResolver.StaleClaim claim = new StaleClaimResolver.StaleClaim(stale.key(),
                            downstreamKeys.derive(stale.key()), stale.requestHash(), stale.createdAt(),
                            stale.lockedUntil(), false);
                    Leases.Holding holding = Leases.hold(renewals, store, stale.key(), token.get(), lease);
                    resolution = IdempotencyEngine.resolveHolding(resolver, claim, holding, store, token.get(), policy,
                            maxStoredBodySize);
                } catch (Throwable e) {
                    // one claim the third party cannot answer for (or not storably) keeps no other claim waiting: an
                    // error too (the resolver's client failed to initialise, an assertion), and a checked exception a
                    // resolver in Kotlin passes on undeclared; thrown on, it would end the sweep and leave the other
                    // claims for a later one, with this one held meanwhile (handed back if the sweep was interrupted)
                    Unresolved failure = new Unresolved(stale.key(), e);
                    unresolved.add(failure);
                    progress.unresolved(failure);
                    continue;
                }
                // recorded also when the sweep was interrupted after the resolver had decided (the application
                // stops): lost, the decision would be asked for again only once this sweeper's lease had run out
                boolean complete = resolution instanceof StaleClaimResolver.Complete;
                if (!Leases.uninterrupted(() -> complete
                        ? store.complete(stale.key(), token.get(), ((StaleClaimResolver.Complete) resolution).response())
                        : store.fail(stale.key(), token.get()))) {
                    progress.superseded(stale.key(), complete);
                } else if (complete) {
                    completed++;
                    progress.resolved(stale.key(), true);
                } else {
                    failed++;
                    progress.resolved(stale.key(), false);
                }
            }
        } finally {
            renewals.shutdownNow();
        }
        return new Sweep(found, completed, failed, unresolved);
    }
}
