package io.idempotency.core;

import java.time.Duration;
import java.util.Locale;
import java.util.Objects;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The idempotency algorithm, in one place. A request with a key goes through these steps:
 *
 * <ol>
 *   <li><b>Coalesce</b> (in this instance): if another request of this application instance is already working on
 *       the same (caller, scope, key), a request with a different fingerprint is answered {@link Start.Mismatch} as
 *       soon as the key is known to be held for that request by something committed — its answer, or its own or an
 *       earlier attempt's intent-first claim; a one-transaction claim may still roll back (should it get none of
 *       these, the request looks again; should that not be known before the
 *       wait runs out, {@link Start.InProgress}) — and one with the same fingerprint waits —
 *       holding no database connection — for that request's outcome (bounded by {@code maxWait}, counted from its
 *       own start): its stored answer ({@link Start.Replay}), or, if it rolled back or its own wait ran out first
 *       (it came earlier), a fresh claim within what is left of this request's wait.
 *       So a storm of one key holds at most one connection per key per instance. This is only an economy: the
 *       database still arbitrates every claim, across instances too.</li>
 *   <li><b>Replay from memory</b>: a request whose answer the {@link ReplayCache} keeps gets it at once, before it
 *       coalesces; one the cache remembers completed, without keeping its answer, is answered — as its instance's
 *       only request working on the key — from one read of its record, outside any transaction, if the record is
 *       that request's completed one (a completed record never changes). Anything else goes on to the claim.</li>
 *   <li><b>Claim</b> ({@link #start}): open a transaction at READ COMMITTED and ask the store to claim the key
 *       atomically. The unique index arbitrates: of any number of concurrent requests — in one JVM or in many —
 *       exactly one inserts the PROCESSING record; the others wait (bounded) for that transaction to end.
 *       <ul>
 *         <li>Claimed → {@link Start.Proceed}: the caller runs the handler <em>inside this transaction</em>.</li>
 *         <li>A committed record with another request fingerprint → {@link Start.Mismatch} (checked first, so a
 *             reused key never replays somebody else's answer and never reports "in progress" for it).</li>
 *         <li>A committed SUCCEEDED record → {@link Start.Replay} of its stored answer.</li>
 *         <li>A committed PROCESSING record, or a wait that ran out → {@link Start.InProgress}.</li>
 *       </ul>
 *       In every case but Proceed the transaction is rolled back at once: nothing was written.</li>
 *   <li><b>Execute</b>: the handler runs and writes its business rows in the same transaction.</li>
 *   <li><b>Complete or release</b> ({@link Execution#finish}, {@link Execution#abandon}): if the handler returned
 *       an answer the {@link StoragePolicy} stores, the record becomes SUCCEEDED with that answer and the
 *       transaction commits — claim, business rows and answer together, or none of them. Otherwise (the handler
 *       threw, or gave an answer the policy does not store: by default 5xx, 401, 407, 408, 409, 425, 429, 304 or
 *       1xx) the transaction rolls back, which also removes the claim, so a retry runs cleanly. The caller must not
 *       send any byte of the answer before {@code finish} returned.</li>
 * </ol>
 *
 * <p>A crash at any point before the commit leaves nothing behind (the database rolls the transaction back); a
 * crash after it leaves the SUCCEEDED record, so the retry is a replay.
 *
 * <p><b>{@link IdempotencyMode#INTENT_FIRST}</b>, for work with side effects outside the database, changes steps 2–4:
 * the claim is committed at once with a lease ({@code locked_until}, database clock); the handler runs in a second
 * transaction while the lease is renewed; the answer is recorded with the handler's local writes under the claim's
 * fencing token ({@link LeaseLostException} if the claim was taken over meanwhile). An unknown outcome leaves the claim
 * PROCESSING; a duplicate polls it until {@code maxWait} runs out; a retry that finds the lease expired takes the claim
 * over and asks the {@link StaleClaimResolver} — rerun, fail, or complete with an answer. The
 * {@link StaleClaimSweeper} does the same for stale claims no retry touches.
 *
 * <p>Thread-safe; one {@link Execution} belongs to the thread that started it.
 */
public final class IdempotencyEngine {

    private static final System.Logger log = System.getLogger(IdempotencyEngine.class.getName());

    /** The shortest lease: claims are held to the millisecond. */
    public static final Duration MIN_LEASE = Duration.ofMillis(1);

    private final IdempotencyStore store;
    private final Transactions transactions;
    private final StoragePolicy defaultPolicy;
    private final Duration retention;
    private final Duration maxWait;
    /** The longest {@code maxWait}: PostgreSQL's {@code lock_timeout}, through which a claim waits, takes no more. */
    public static final Duration MAX_WAIT = Duration.ofDays(24);
    private final StaleClaimResolver resolver;
    private final DownstreamKeys downstreamKeys;
    private final ReplayCache replayCache;
    private final long maxStoredBodySize;
    private final int maxWaitingDuplicates;
    private final ConcurrentHashMap<ScopedKey, Flight> flights = new ConcurrentHashMap<>();
    // two threads: a renewal waiting for a pool connection does not hold up every other renewal
    private final ScheduledExecutorService renewals = executor(2, "idempotency-lease-renewal");
    /**
     * Tries again the releases and FAILED marks the database did not take at once. Not on {@link #renewals}: in a
     * pool shortage each attempt may wait for a connection as long as the pool lets it, and renewals queued behind
     * such attempts would let the leases of running work run out.
     */
    private final ScheduledExecutorService settlements = executor(1, "idempotency-claim-release");
    /** Releases and FAILED marks the database did not take at once, tried again on {@link #settlements}. */
    private final Set<Settlement> unsettled = ConcurrentHashMap.newKeySet();

    /**
     * An engine for {@link IdempotencyMode#ONE_TRANSACTION} and for {@link IdempotencyMode#INTENT_FIRST} with the
     * default resolver ({@link StaleClaimResolver#RERUN}) and a fixed downstream key secret.
     */
    public IdempotencyEngine(IdempotencyStore store, Transactions transactions, StoragePolicy defaultPolicy,
                             Duration retention, Duration maxWait) {
        this(store, transactions, defaultPolicy, retention, maxWait, StaleClaimResolver.RERUN,
                new DownstreamKeys(DEFAULT_DOWNSTREAM_SECRET));
    }

    /** The secret for downstream keys when the application sets none. */
    public static final String DEFAULT_DOWNSTREAM_SECRET = "idempotency-downstream-key";

    /**
     * @param store          where records live; must use the connection of {@code transactions}
     * @param transactions   opens the transaction shared by the claim and the handler
     * @param defaultPolicy  which answers are stored when the endpoint does not say
     * @param retention      minimum time a record is kept (TTL); positive
     * @param maxWait        how long a duplicate waits for an in-flight request before "in progress"; positive, at
     *                       most {@link #MAX_WAIT}
     * @param resolver       decides about claims whose lease ran out
     * @param downstreamKeys derives the keys handlers send to third parties
     */
    public IdempotencyEngine(IdempotencyStore store, Transactions transactions, StoragePolicy defaultPolicy,
                             Duration retention, Duration maxWait, StaleClaimResolver resolver,
                             DownstreamKeys downstreamKeys) {
        this(store, transactions, defaultPolicy, retention, maxWait, resolver, downstreamKeys, ReplayCache.NONE);
    }

    /**
     * @param replayCache completed answers kept in memory, so that replays need no round trip
     *                    ({@link ReplayCache#NONE} keeps none)
     */
    public IdempotencyEngine(IdempotencyStore store, Transactions transactions, StoragePolicy defaultPolicy,
                             Duration retention, Duration maxWait, StaleClaimResolver resolver,
                             DownstreamKeys downstreamKeys, ReplayCache replayCache) {
        this(store, transactions, defaultPolicy, retention, maxWait, resolver, downstreamKeys, replayCache,
                DEFAULT_MAX_STORED_BODY_SIZE);
    }

    /** The cap on stored bodies when none is given: the Spring Boot starter's default. */
    public static final long DEFAULT_MAX_STORED_BODY_SIZE = 1024 * 1024;

    /**
     * @param maxStoredBodySize the largest body, in bytes, stored for replay from this engine's programmatic callers
     *                          ({@link IdempotencyTemplate}) and from the {@code resolver}; positive. A larger one is
     *                          refused with {@link StoredBodyTooLargeException} before anything is stored.
     */
    public IdempotencyEngine(IdempotencyStore store, Transactions transactions, StoragePolicy defaultPolicy,
                             Duration retention, Duration maxWait, StaleClaimResolver resolver,
                             DownstreamKeys downstreamKeys, ReplayCache replayCache, long maxStoredBodySize) {
        this(store, transactions, defaultPolicy, retention, maxWait, resolver, downstreamKeys, replayCache,
                maxStoredBodySize, DEFAULT_MAX_WAITING_DUPLICATES);
    }

    /** How many duplicates of one key may wait in one instance when none is given: the Spring Boot starter's default. */
    public static final int DEFAULT_MAX_WAITING_DUPLICATES = 100;

    /**
     * @param maxWaitingDuplicates how many requests may wait at once in this instance for the one that holds a key
     *                             (each holding its thread): its duplicates, and requests with another fingerprint
     *                             that wait to learn whether its claim commits; positive. One more is answered
     *                             {@link InProgress} at once, as if its wait had run out: a storm of one key cannot
     *                             take every thread.
     */
    public IdempotencyEngine(IdempotencyStore store, Transactions transactions, StoragePolicy defaultPolicy,
                             Duration retention, Duration maxWait, StaleClaimResolver resolver,
                             DownstreamKeys downstreamKeys, ReplayCache replayCache, long maxStoredBodySize,
                             int maxWaitingDuplicates) {
        if (maxWaitingDuplicates <= 0) {
            throw new IllegalArgumentException("maxWaitingDuplicates must be positive: " + maxWaitingDuplicates);
        }
        this.maxWaitingDuplicates = maxWaitingDuplicates;
        if (maxStoredBodySize <= 0) {
            throw new IllegalArgumentException("maxStoredBodySize must be positive: " + maxStoredBodySize);
        }
        this.maxStoredBodySize = maxStoredBodySize;
        this.replayCache = Objects.requireNonNull(replayCache, "replayCache");
        this.store = Objects.requireNonNull(store, "store");
        this.transactions = Objects.requireNonNull(transactions, "transactions");
        this.defaultPolicy = Objects.requireNonNull(defaultPolicy, "defaultPolicy");
        this.retention = positive(retention, "retention");
        this.maxWait = positive(maxWait, "maxWait");
        if (maxWait.compareTo(MAX_WAIT) > 0) {
            // a claim waits for a key held elsewhere through the database's lock wait: PostgreSQL's lock_timeout
            // refuses more than about 24.8 days, and every claim would fail
            throw new IllegalArgumentException("maxWait must be at most " + MAX_WAIT.toDays() + " days (a claim waits"
                    + " through the database's lock wait, which PostgreSQL bounds at about 24.8 days): " + maxWait);
        }
        this.resolver = Objects.requireNonNull(resolver, "resolver");
        this.downstreamKeys = Objects.requireNonNull(downstreamKeys, "downstreamKeys");
    }

    /** The largest body, in bytes, stored for replay (see {@link StoredBodyTooLargeException}). */
    public long maxStoredBodySize() {
        return maxStoredBodySize;
    }

    /** The key a handler of {@code key}'s request sends to third parties. */
    public String downstreamKey(ScopedKey key) {
        return downstreamKeys.derive(key);
    }

    /**
     * Stops lease renewals; executions still running lose their renewal. Intent-first work started afterwards is
     * refused with {@link IllegalStateException}, and the claim it took is not kept from the others. A release or a
     * FAILED mark still being tried again (the database did not take it) is tried once more, on this thread; should
     * the database still not take it, neither it nor the others left are, and those claims stay PROCESSING until their
     * lease runs out, to be resolved as stale ones.
     */
    public void shutdown() {
        renewals.shutdownNow();
        settlements.shutdownNow();
        for (Settlement settlement : unsettled) {
            if (!settlement.lastAttempt()) {
                break;
            }
        }
        unsettled.clear();
    }

    /** What to do with a request, decided by the claim. */
    public sealed interface Start {
    }

    /** The key is ours: run the handler, then {@link Execution#finish} or {@link Execution#abandon}. */
    public record Proceed(Execution execution) implements Start {
    }

    /** The request was answered before: send this answer again. */
    public record Replay(StoredResponse response) implements Start {
    }

    /** The key was used for a different request (another fingerprint). Nothing was written. */
    public record Mismatch() implements Start {
    }

    /** Another request with the key is still running. Nothing was written; the client should retry later. */
    public record InProgress() implements Start {
    }

    /** What the record read back after a failed commit says of it ({@code Execution#completedAllTheSame}). */
    private enum ReadBack {
        /** Committed with this execution's answer: what failed came after the commit. */
        COMPLETED,
        /** Not committed with this execution's answer. */
        NOT_COMPLETED,
        /** The read failed: the commit may or may not have happened. */
        UNREAD
    }

    /** The result of {@link Execution#finish}. */
    public enum Outcome {
        /** The answer was stored and everything committed. */
        STORED,
        /** The answer is not storable: everything was rolled back and the key is free again. */
        ROLLED_BACK,
        /**
         * {@link IdempotencyMode#INTENT_FIRST} only: the answer is not storable, so the outcome of the side effect is
         * unknown. The handler's local writes were rolled back; the claim stays PROCESSING until its lease runs out
         * and the {@link StaleClaimResolver} decides.
         */
        UNRESOLVED
    }

    /**
     * Claims {@code key} for a request with fingerprint {@code requestHash}. Must be called on a thread with no
     * open transaction.
     */
    public Start start(ScopedKey key, String requestHash) {
        return start(key, requestHash, IdempotencyMode.ONE_TRANSACTION, null);
    }

    /**
     * Claims {@code key} in the given mode. Must be called on a thread with no open transaction.
     *
     * @param requestHash the request's fingerprint: a hex SHA-256, as {@link RequestFingerprint} makes (anything else
     *                    is refused); upper-case digits are the same fingerprint as lower-case ones
     * @param lease the lease of an {@link IdempotencyMode#INTENT_FIRST} claim (at least {@link #MIN_LEASE}); ignored
     *              otherwise
     */
    public Start start(ScopedKey key, String requestHash, IdempotencyMode mode, Duration lease) {
        requestHash = checkRequestHash(requestHash);
        Flight running = flights.get(key);
        if (running != null && running.owner == Thread.currentThread()) {
            // called again from inside its own execution: it would wait for itself, then answer "in progress" (or
            // "key reused"), which sends a message back to its broker for ever instead of naming the mistake
            throw new IllegalStateException("an idempotent execution with " + key + " is already running on this"
                    + " thread: call IdempotencyTemplate.execute outside any transaction, not from the work of"
                    + " another execution");
        }
        transactions.checkNoneOpen(); // also before an answer kept in memory: refused alike, kept or not
        if (mode == IdempotencyMode.INTENT_FIRST) {
            lease(lease);
        }
        Replay known = replayCache.answer(key, requestHash); // never a refusal: only the database can tell
        if (known != null) {
            return known;
        }
        long deadline = System.nanoTime() + maxWait.toNanos();
        while (true) {
            Flight mine = new Flight(requestHash);
            Flight current = flights.putIfAbsent(key, mine);
            if (current == null) {
                return lead(key, mine, mode, lease, deadline);
            }
            if (!current.requestHash.equals(requestHash)) {
                // another request is the one to compare with once the key is known to be held for it by something
                // committed; until then it may itself be a reuse of a key completed, or held on another instance, for
                // this very request, or (in one transaction) roll back. If it does not keep the key, look again; if
                // that is not known in time, nothing is known about the key's own request: "come back later", never a
                // refusal this request may not deserve
                Boolean held = current.awaitHeld(0); // known already behind an intent: no wait, and no place taken
                if (held == null) {
                    if (!current.enter(maxWaitingDuplicates)) {
                        return new InProgress(); // as many wait already as may (below)
                    }
                    try {
                        held = current.awaitHeld(deadline - System.nanoTime());
                    } finally {
                        current.leave();
                    }
                }
                if (held == null) {
                    return new InProgress();
                }
                if (!held) {
                    continue;
                }
                return new Mismatch();
            }
            Start outcome;
            if (current.outcome.isDone()) {
                outcome = current.await(0); // it has just ended: no wait, and no place taken
            } else if (!current.enter(maxWaitingDuplicates)) {
                // as many wait for this key already as may: come back later, as when the wait runs out, rather than
                // hold one more thread (a client resending one request without pause would take them all)
                return new InProgress();
            } else {
                try {
                    outcome = current.await(deadline - System.nanoTime());
                } finally {
                    current.leave();
                }
            }
            if (outcome instanceof InProgress && System.nanoTime() - deadline < 0
                    && !Thread.currentThread().isInterrupted()) {
                // the request waited for gave up waiting (it came earlier, so its wait ran out first), not this one:
                // this request waits on for the key itself, for the rest of its own wait, as it would on another
                // instance, rather than be told "in progress" after a fraction of it
                continue;
            }
            if (outcome != null) {
                return outcome;
            }
            if (System.nanoTime() - deadline >= 0) {
                return new InProgress();
            }
            // the request we waited for rolled back: the key is free, claim it ourselves
        }
    }

    /**
     * The fingerprint in lower case, as it is compared and stored: the same digest in either case is one request.
     * Refuses one that is not a hex SHA-256 (as {@link RequestFingerprint} makes): it is compared in memory and with
     * the record read back, and a text the database does not keep as given (PostgreSQL pads a shorter one, MariaDB
     * keeps ASCII only) would be replayed from memory by the instance that stored it, and refused as another
     * request's by every other instance, and by that one too once the answer has left its memory.
     */
    private static String checkRequestHash(String requestHash) {
        Objects.requireNonNull(requestHash, "requestHash");
        boolean hex = requestHash.length() == 64;
        for (int i = 0; hex && i < requestHash.length(); i++) {
            char c = requestHash.charAt(i);
            hex = c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F';
        }
        if (!hex) {
            throw new IllegalArgumentException("requestHash must be a hex SHA-256 (64 hexadecimal digits), as"
                    + " RequestFingerprint makes: " + ScopedKey.printable(requestHash.length() > 80
                    ? requestHash.substring(0, 80) + "..." : requestHash));
        }
        return requestHash.toLowerCase(Locale.ROOT);
    }

    /** Claims in the database as this instance's only request working on {@code key}. */
    private Start lead(ScopedKey key, Flight flight, IdempotencyMode mode, Duration lease, long deadline) {
        Start start;
        try {
            start = replayOfCompleted(key, flight.requestHash);
            if (start == null) {
                start = mode == IdempotencyMode.INTENT_FIRST
                        ? claimIntent(key, flight, lease, deadline)
                        : claim(key, flight.requestHash, deadline);
            }
        } catch (Throwable e) { // also a checked exception a store without them (Kotlin) passes on undeclared
            land(key, flight, null);
            throw e;
        }
        if (start instanceof Proceed) {
            // the key is this request's now: an answer kept for another one came from a record that is gone, and
            // replayed from here it would contradict the claim the database holds (before the flight shows the claim,
            // so that the requests that see it are judged by it)
            replayCache.holds(key, flight.requestHash);
            if (mode == IdempotencyMode.INTENT_FIRST) {
                // committed: a request with another body is a mismatch now, as the database tells any other instance.
                // A one-transaction claim is not committed yet: should it roll back, the key is free, so such a request
                // waits for its end, as it would in the database on another instance (see Execution.landFlight)
                flight.held.complete(true);
            }
            return start; // the flight lands when the execution ends
        }
        land(key, flight, start);
        return start;
    }

    /**
     * The replay of a request this instance may have seen completed, from one read of its record outside any
     * transaction — a claim of a completed key writes nothing, but costs a transaction and its rollback. Null when
     * the request is not remembered, or its record is not (or no longer) that request's completed one: then the claim
     * decides, as for any request. A completed record never changes, so reading it answers as a claim would.
     */
    private Replay replayOfCompleted(ScopedKey key, String requestHash) {
        // not in a transaction the claim refuses, nor on a second connection while the thread holds one the claim uses
        if (!replayCache.mayHaveCompleted(key, requestHash) || !transactions.mayReadApart()) {
            return null;
        }
        IdempotencyRecord record = store.find(key).orElse(null);
        if (record == null || record.status() != RecordStatus.SUCCEEDED
                || !record.requestHash().equals(requestHash)) {
            return null;
        }
        replayCache.put(key, requestHash, record.response());
        return new Replay(record.response());
    }

    private Start claim(ScopedKey key, String requestHash, long deadline) {
        if (remaining(deadline) == null) {
            return new InProgress();
        }
        Transactions.Transaction transaction = transactions.begin();
        ClaimResult claim;
        try {
            claim = store.claim(new ClaimRequest(key, requestHash, retention, waitLeft(deadline)));
        } catch (Throwable e) {
            rollBackAfter(transaction, e);
            throw e;
        }
        if (claim instanceof ClaimResult.Claimed claimed) {
            return new Proceed(new Execution(IdempotencyMode.ONE_TRANSACTION, transaction, key, requestHash,
                    claimed.fencingToken(), null, false, null));
        }
        transaction.rollback();
        if (claim instanceof ClaimResult.Existing existing) {
            Start answer = answerOf(key, requestHash, existing.record());
            if (answer != null) {
                return answer;
            }
        }
        return new InProgress();
    }

    /**
     * What the record the claim found answers {@code requestHash}: a mismatch when it is another request's, the replay
     * of its answer when it is this request's and completed; null while this request's claim holds it.
     */
    private Start answerOf(ScopedKey key, String requestHash, IdempotencyRecord record) {
        replayCache.holds(key, record.requestHash());
        if (!record.requestHash().equals(requestHash)) {
            return new Mismatch();
        }
        if (record.status() == RecordStatus.SUCCEEDED) {
            replayCache.put(key, requestHash, record.response());
            return new Replay(record.response());
        }
        return null;
    }

    /**
     * The intent-first claim of {@code flight}'s request: committed at once, with a lease. A live claim of another
     * attempt is waited for by polling (the engine holds no connection between polls; a unit of work the request
     * keeps open, such as JPA's open-in-view EntityManager, may); an expired one is taken over and resolved.
     */
    private Start claimIntent(ScopedKey key, Flight flight, Duration lease, long deadline) {
        String requestHash = flight.requestHash;
        long pauseMillis = FIRST_POLL_PAUSE_MILLIS;
        while (true) {
            if (remaining(deadline) == null) {
                return new InProgress();
            }
            // beside a unit of work the request keeps open (JPA's open-in-view EntityManager), which the claim, committed
            // or rolled back, must neither write nor clear: the work runs in it next
            Transactions.Transaction transaction = transactions.beginClaim();
            ClaimResult claim;
            long claiming = System.nanoTime();
            try {
                claim = store.claim(new ClaimRequest(key, requestHash, retention, waitLeft(deadline), lease));
                if (claim instanceof ClaimResult.Claimed claimed) {
                    try {
                        transaction.commit(); // the intent is durable before any side effect
                    } catch (Throwable e) {
                        // a commit whose connection was lost or timed out may land in the database afterwards
                        abandonUnstarted(key, claimed.fencingToken(), claimed.failedBefore(), lease, e,
                                CommitFailedException.mayHaveCommitted(e));
                        throw e;
                    }
                }
            } catch (Throwable e) {
                rollBackAfter(transaction, e);
                throw e;
            }
            if (claim instanceof ClaimResult.Claimed claimed) {
                // the claim may have waited for another transaction's uncommitted claim of the key, within its
                // statement, whose start the lease counts from (PostgreSQL): renewed a third of the lease after the
                // claim began, not after it ended, lest the wait use up the lease before its first renewal
                long claimedMillis = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - claiming);
                long writtenMillisAgo = claimedMillis;
                if (claimedMillis >= Leases.period(lease)) {
                    // that third has passed: the lease may have run out before the commit returned (a wait as long as
                    // the lease, a commit held up on the server), and a duplicate or a sweeper taken the claim over
                    // and begun running the work. An immediate renewal in the background would race with the work,
                    // so the work starts only once a fenced renewal has shown that the claim is still this request's
                    long renewing = System.nanoTime();
                    if (!renewBeforeTheWork(key, claimed.fencingToken(), claimed.failedBefore(), lease)) {
                        log.log(System.Logger.Level.WARNING, () -> "The intent-first claim of " + key.describe()
                                + " took " + claimedMillis + " ms to claim and commit, and its lease of "
                                + lease.toMillis() + " ms ran out meanwhile: it was taken over (by a retry or the"
                                + " sweeper, which resolves it as a stale claim) before its work started, and the work"
                                + " does not start here. Keep the lease well above the in-flight wait and the time a"
                                + " commit may take");
                        return new InProgress();
                    }
                    writtenMillisAgo = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - renewing);
                }
                return proceedIntent(key, requestHash, claimed.fencingToken(), lease, claimed.failedBefore(),
                        writtenMillisAgo);
            }
            transaction.rollback();
            if (!(claim instanceof ClaimResult.Existing existing)) {
                return new InProgress();
            }
            IdempotencyRecord record = existing.record();
            Start answer = answerOf(key, requestHash, record);
            if (answer != null) {
                return answer;
            }
            // the key is held by a committed claim of this very request (an earlier attempt's, or a stale one this
            // request is about to take over and keeps whatever the resolver decides): a request with another body that
            // waits here is a mismatch now, as the database would tell it, not after this request's wait or resolver
            flight.held.complete(true);
            if (record.status() == RecordStatus.PROCESSING && record.leaseExpired()) {
                Start resolved = resolveStale(record, lease);
                if (resolved == FREED) {
                    // this request's resolver has just marked the claim FAILED, however long it took to decide: claim
                    // the key now, rather than answer "in progress" for a key nobody holds
                    deadline = System.nanoTime() + maxWait.toNanos();
                    pauseMillis = FIRST_POLL_PAUSE_MILLIS;
                    continue;
                }
                if (resolved != null) {
                    return resolved;
                }
                // not taken over: another request or a sweeper has it, or its holder is recording its result right
                // now (the takeover does not wait for that): look again after a pause, as at a live lease
            }
            long remaining = deadline - System.nanoTime();
            if (remaining <= 0) {
                return new InProgress();
            }
            long remainingMillis = TimeUnit.NANOSECONDS.toMillis(remaining);
            // the last pause ends just before the wait does, for a last look: a claim finished then is answered
            if (!pause(remainingMillis <= 2 ? remainingMillis + 1 : Math.min(pauseMillis, remainingMillis - 2))) {
                // the thread is being stopped: come back later, as a request waiting in this instance is told
                return new InProgress();
            }
            // each look is a transaction and a claim statement: soon after the first (most work ends quickly), then
            // further apart, so that a duplicate waiting for a claim held for long costs a look every 200 ms at most
            pauseMillis = Math.min(pauseMillis * 2, MAX_POLL_PAUSE_MILLIS);
        }
    }

    /** The first pause of a duplicate that polls a committed intent-first claim; it doubles up to the next. */
    static final long FIRST_POLL_PAUSE_MILLIS = 10;

    /** The longest pause between two looks of a duplicate at a committed intent-first claim. */
    static final long MAX_POLL_PAUSE_MILLIS = 200;

    /** What {@link #resolveStale} answers when it marked the claim FAILED: claim the key again. Never returned. */
    private static final Start FREED = new InProgress();

    /**
     * Takes a stale claim over and asks the resolver about it; {@link #FREED} when it marked the claim FAILED, null
     * when somebody else has it or its holder is finishing it, or took it over while the resolver was asked (claim
     * again, within the wait).
     */
    private Start resolveStale(IdempotencyRecord stale, Duration lease) {
        ScopedKey key = stale.key();
        // made first: deriving its downstream key may fail (the warning about the default secret is logged then), and
        // failing once the lease is held, it would leave the claim taken over and renewed for ever, resolved by nobody
        StaleClaimResolver.StaleClaim claim = new StaleClaimResolver.StaleClaim(key, downstreamKey(key),
                stale.requestHash(), stale.createdAt(), stale.lockedUntil(), true);
        String token = store.takeOver(key, stale.fencingToken(), lease).orElse(null);
        if (token == null) {
            return null;
        }
        // the resolver may ask a third party for longer than the lease: hold the claim meanwhile, as a handler would,
        // or another request could take it over too, ask the resolver again and run beside this one
        Leases.Holding holding = holdLease(key, token, lease);
        // apart from a unit of work the request keeps open for its handler (JPA's open-in-view EntityManager), which
        // the resolver's own transactions would otherwise write or clear
        StaleClaimResolver apart = asked -> transactions.apart(() -> resolver.resolve(asked));
        StaleClaimResolver.Resolution resolution = resolveHolding(apart, claim, holding, store, token,
                defaultPolicy, maxStoredBodySize);
        if (resolution instanceof StaleClaimResolver.Complete complete) {
            // recorded also when the request was interrupted after the resolver had decided (the application stops):
            // lost, the decision would be asked for again only once this request's lease had run out
            if (!Leases.uninterrupted(() -> store.complete(key, token, complete.response()))) {
                logSuperseded(key, "complete");
                return null;
            }
            logResolved(key, "completed with the resolver's answer, which the retry is answered with");
            replayCache.put(key, stale.requestHash(), complete.response());
            return new Replay(complete.response());
        }
        if (resolution instanceof StaleClaimResolver.Fail) {
            // recorded also when the request was interrupted after the resolver had decided, as "complete" is; a mark
            // the database does not take is tried again in the background, as the resolver has decided
            if (!Leases.uninterrupted(() -> settle(key, token, false, lease))) {
                logSuperseded(key, "mark FAILED");
                return null;
            }
            logResolved(key, "marked FAILED, and the retry runs its request again");
            return FREED;
        }
        // "rerun" writes nothing that the fencing token could keep out, as it keeps out a "complete" or a FAILED mark:
        // this retry's lease may have run out while the resolver was asked (the process stalled, renewals and all),
        // and another retry or a sweeper taken the claim over, which may be running the work right now. So the work
        // runs only once a fenced renewal has shown that the claim is still this retry's, with its lease afresh
        long renewing = System.nanoTime();
        if (!renewBeforeTheWork(key, token, true, lease)) {
            logSuperseded(key, "rerun");
            return null;
        }
        logResolved(key, "taken over to run its request again, as the resolver answered");
        // the lease counts from that renewal's statement, whose commit may have been held up on the server: the first
        // renewal in the background comes a third of the lease after the statement, not after the commit
        return proceedIntent(key, stale.requestHash(), token, lease, true,
                TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - renewing));
    }

    /**
     * One line per stale claim a retry resolved, as the sweeper logs its own: the run that follows overwrites a claim
     * marked FAILED or taken over, so the log is what tells which claims were given up on. The claim's identity only:
     * neither the answer stored nor the key derived for the third party.
     */
    private static void logResolved(ScopedKey key, String how) {
        log.log(System.Logger.Level.INFO, () -> "Stale idempotency claim of " + key.describe()
                + " resolved by a retry: " + how);
    }

    /**
     * A decision the resolver made for a retry that the claim's fencing token kept out of the record (a "rerun": that
     * kept from running the work): the retry's lease ran out while the resolver was asked, and another retry or a
     * sweeper took the claim over, whose outcome stands. Told, since what the third party said is then not what was
     * recorded.
     */
    private static void logSuperseded(ScopedKey key, String decision) {
        log.log(System.Logger.Level.WARNING, () -> "The stale claim resolver decided to " + decision + " the claim of "
                + key.describe() + " for a retry, but that was not recorded: the claim was taken over while the"
                + " resolver was asked (the retry's lease on it had run out), and its new holder's outcome stands");
    }

    /**
     * Asks {@code resolver} about {@code claim}, held by {@code token} under the lease {@code holding} renews, and
     * stops the renewal once it has answered or failed. A resolver that fails while its thread is interrupted (asked to
     * stop: a request the shutdown did not wait for, or a sweep), which is likely why it failed, hands the claim back
     * with its lease ended, so that a retry or another sweeper resolves it now rather than after the lease; its failure
     * is thrown on either way — also a checked exception a resolver in Kotlin passes on undeclared, among them an
     * {@code InterruptedException}, whose cleared interrupt is set again.
     */
    static StaleClaimResolver.Resolution resolveHolding(StaleClaimResolver resolver, StaleClaimResolver.StaleClaim claim,
                                                        Leases.Holding holding, IdempotencyStore store, String token,
                                                        StoragePolicy policy, long maxStoredBodySize) {
        try {
            return decided(resolver.resolve(claim), claim.key(), policy, maxStoredBodySize);
        } catch (Throwable e) {
            if (e instanceof InterruptedException) {
                // let through undeclared (a resolver in Kotlin), it has cleared the interrupt it reports: keep it, so
                // that the claim is handed back and the caller still learns it was asked to stop
                Thread.currentThread().interrupt();
            }
            if (Thread.currentThread().isInterrupted()) {
                Leases.handBack(holding, store, claim.key(), token, e);
            }
            throw e;
        } finally {
            // the decision is written next, in a transaction that holds the claim's row until it commits: a renewal
            // under way ends first, rather than wait for that commit on a renewal thread
            Leases.stop(holding);
        }
    }

    /**
     * The resolver's decision about the stale claim on {@code key}. A null answer decides nothing — it is neither
     * "rerun" nor "fail", both of which would let the work run again without anyone having found out what happened —
     * so it fails like a resolver that throws: the claim stays PROCESSING for a later resolution. So does an answer
     * larger than the cap on stored bodies: stored, it would keep what no handler's answer may keep; cut short, it
     * would replay a different answer; and it is not "the work did not happen" either. And so does an answer with a
     * status {@code policy} does not store (by default 5xx, 401, 407, 408, 409, 425, 429, 304, 1xx): a handler's
     * such answer leaves the outcome unknown, and stored as SUCCEEDED it would be replayed for as long as the record
     * is kept.
     */
    static StaleClaimResolver.Resolution decided(StaleClaimResolver.Resolution resolution, ScopedKey key,
                                                 StoragePolicy policy, long maxStoredBodySize) {
        if (resolution == null) {
            throw new StaleClaimUndecidedException("the stale claim resolver answered null for " + key + ", which"
                    + " decides nothing: the claim stays PROCESSING and is resolved again once its lease has run out");
        }
        if (resolution instanceof StaleClaimResolver.Complete complete
                && !policy.isStorable(complete.response().status())) {
            throw new StaleClaimUndecidedException("the stale claim resolver answered complete with status "
                    + complete.response().status() + " for " + key + ", which the storage policy does not store: it"
                    + " says nothing final of the work. The claim stays PROCESSING and is resolved again once its lease"
                    + " has run out; answer complete with a storable status, or fail or rerun");
        }
        if (resolution instanceof StaleClaimResolver.Complete complete
                && complete.response().bodyLength() > maxStoredBodySize) {
            throw new StoredBodyTooLargeException(key, "the stale claim resolver's answer",
                    complete.response().bodyLength(), maxStoredBodySize);
        }
        return resolution;
    }

    /**
     * Renews the lease of the intent-first claim {@code token} holds, before its work starts, on the request's thread,
     * in a transaction opened as a claim's is: beside a unit of work the request keeps open (JPA's open-in-view
     * EntityManager), on its connection, rather than on a second connection of a pool the other requests may hold
     * whole. Should the renewal fail, the work does not start either: the claim is released, or marked FAILED when
     * {@code heldBefore} (as {@link #abandonUnstarted} says), and the failure thrown on.
     *
     * @return false when the claim is no longer this token's: it was taken over (its lease had run out) by a retry or a
     *         sweeper, which resolves it as a stale claim
     */
    private boolean renewBeforeTheWork(ScopedKey key, String token, boolean heldBefore, Duration lease) {
        try {
            Transactions.Transaction transaction = transactions.beginClaim();
            boolean held;
            try {
                held = store.renew(key, token, lease);
            } catch (Throwable e) {
                rollBackAfter(transaction, e);
                throw e;
            }
            transaction.commit();
            return held;
        } catch (Throwable e) { // also a checked exception a store in Kotlin passes on undeclared
            // as when the work's transaction cannot begin
            abandonUnstarted(key, token, heldBefore, lease, e, false);
            throw e;
        }
    }

    /**
     * Starts the work of the intent-first claim held by {@code token}. Should it not start (no connection for the
     * handler's transaction, renewals shut down), the handler never ran, so the claim is released: the next request
     * runs at once instead of being told "in progress" until the lease has run out (or, should the release find no
     * connection either, once the database takes it: see {@link #settle}). A claim {@code heldBefore} — a
     * stale one taken over for a rerun, or a FAILED one its request took over — is marked FAILED instead: an earlier
     * attempt under it may have reached a third party under the key's downstream key, so only the same request may
     * run under the key again.
     * <p>
     * The lease is renewed from here on, not from when the work's transaction has begun: opening it waits for a pooled
     * connection as long as the pool lets it, and a lease first renewed only a third of it after that wait could run
     * out meanwhile — another request or a sweeper would then take the claim over and run the work beside this one.
     */
    private Proceed proceedIntent(ScopedKey key, String requestHash, String token, Duration lease,
                                  boolean heldBefore, long leaseWrittenMillisAgo) {
        Leases.Holding renewal;
        Transactions.Transaction transaction;
        try {
            renewal = holdLease(key, token, lease, leaseWrittenMillisAgo);
        } catch (Throwable e) {
            abandonUnstarted(key, token, heldBefore, lease, e, false);
            throw e;
        }
        try {
            transaction = transactions.begin();
        } catch (Throwable e) {
            renewal.cancel(); // the release or FAILED mark is fenced by status: a renewal under way cannot undo it
            abandonUnstarted(key, token, heldBefore, lease, e, false);
            throw e;
        }
        return new Proceed(new Execution(IdempotencyMode.INTENT_FIRST, transaction, key, requestHash, token, lease,
                heldBefore, renewal));
    }

    /**
     * Rolls back the transaction of an execution that is not to be kept. A rollback that fails — its connection was
     * lost, which is often why the request ends so — leaves nothing committed either: the database ends the
     * transaction with its session, and the pool does not reuse the connection. So the failure is logged, not thrown:
     * thrown, it would replace the answer the handler gave (a 503 for the lost database, say) with an error page, for
     * a request whose effects are gone either way.
     */
    private static void rollBackLost(Transactions.Transaction transaction, ScopedKey key) {
        try {
            transaction.rollback();
        } catch (RuntimeException e) {
            log.log(System.Logger.Level.WARNING, () -> "The rollback of the execution for " + key + " failed; nothing"
                    + " of it was committed (its connection is gone, and its transaction with it)", e);
        }
    }

    /**
     * Rolls {@code transaction} back after {@code failure}, which stays the exception to throw: a rollback on a lost
     * connection fails too, and would otherwise hide why the claim failed.
     */
    private static void rollBackAfter(Transactions.Transaction transaction, Throwable failure) {
        try {
            transaction.rollback();
        } catch (Throwable e) {
            failure.addSuppressed(e);
        }
    }

    /**
     * The work of the intent-first claim held by {@code token} will not start: releases the claim, so that the next
     * request runs at once — any request, as nothing was sent anywhere under the key. Also when the commit of the claim
     * failed, whose outcome is unknown when the connection was lost while it ran: had it been committed, nothing ran
     * under it (if it was not, there is nothing to release). A claim {@code heldBefore} by an earlier attempt, which
     * may have sent something under the key, is marked FAILED instead: its request, sent again, runs at once, and
     * another request under the key is a mismatch. When the claim's commit may still land ({@code mayStillCommit}: the
     * connection was lost or timed out while the commit ran, and the database may commit after the application has
     * given up on it, a commit held up on the server outlasting the driver's {@code socketTimeout}), a release or mark
     * that finds no claim of the token is tried again too, until the claim's lease has run out: the claim may yet
     * appear, and would otherwise hold the key for its whole lease.
     */
    private void abandonUnstarted(ScopedKey key, String token, boolean heldBefore, Duration lease, Throwable cause,
                                  boolean mayStillCommit) {
        try {
            settle(key, token, !heldBefore, lease, mayStillCommit);
        } catch (Exception failed) { // also a checked exception a store in Kotlin passes on undeclared
            cause.addSuppressed(failed); // tried again in the background until the database takes it
        }
    }

    /**
     * Releases the intent-first claim {@code token} holds ({@code release}), or marks it FAILED, for work that did not
     * run or failed definitely. Should the database not take it (no connection to be had, the connection lost: often
     * what ended the work), it is tried again in the background, until the database takes it, the token no longer
     * holds the claim, or the claim's {@code lease} has run out (a retry or a sweeper may then take the claim over and
     * resolve it as a stale one; the token, which the takeover replaces, keeps a late attempt from touching it). The
     * claim is not renewed meanwhile. Without this, one failed attempt — the database briefly unreachable — would have
     * every retry told "in progress" until the lease ran out, for work that provably did nothing.
     *
     * @return whether the token still held the claim, which the first attempt released or marked
     * @throws RuntimeException the first attempt's failure, once the attempts that follow are scheduled
     */
    private boolean settle(ScopedKey key, String token, boolean release, Duration lease) {
        return settle(key, token, release, lease, false);
    }

    /**
     * {@link #settle(ScopedKey, String, boolean, Duration)}, for a claim whose commit may still land when
     * {@code mayStillCommit}: a first attempt that finds no claim of the token is then tried again in the background
     * as a failed one is, until the claim appears and is settled or its lease has run out.
     */
    private boolean settle(ScopedKey key, String token, boolean release, Duration lease, boolean mayStillCommit) {
        Settlement settlement = new Settlement(key, token, release, lease, mayStillCommit);
        try {
            boolean settled = settlement.attempt();
            if (!settled && mayStillCommit) {
                settlement.retryLater();
            }
            return settled;
        } catch (Throwable e) { // also a checked exception a store in Kotlin passes on undeclared
            settlement.retryLater();
            throw e;
        }
    }

    /**
     * A release or FAILED mark of an intent-first claim that the database did not take, tried again with a growing
     * pause (from {@link #FIRST_RETRY} to {@link #LAST_RETRY}) until the claim's lease has run out; see
     * {@link #settle}.
     */
    private final class Settlement implements Runnable {
        /** The longest time to try, which keeps the deadline comparable to {@link System#nanoTime()}: 146 years. */
        private static final Duration LONGEST_SETTLEMENT = Duration.ofNanos(Long.MAX_VALUE / 2);

        private final ScopedKey key;
        private final String token;
        private final boolean release;
        /** Whether the claim's commit may still land: finding no claim of the token does not end the attempts. */
        private final boolean mayStillCommit;
        private final long deadline;
        private long pause = FIRST_RETRY.toMillis();

        Settlement(ScopedKey key, String token, boolean release, Duration lease, boolean mayStillCommit) {
            this.key = key;
            this.token = token;
            this.release = release;
            this.mayStillCommit = mayStillCommit;
            // the lease ends by then at the latest: nothing renews it any more. One of centuries counts more
            // nanoseconds than a long holds (the release or FAILED mark would fail before it was even tried, and the
            // claim stay PROCESSING under that lease): the attempts then go on for as long as the process lives
            this.deadline = System.nanoTime() + (lease.compareTo(LONGEST_SETTLEMENT) > 0
                    ? LONGEST_SETTLEMENT : lease).toNanos();
        }

        /** One attempt; false from the store (the token no longer holds the claim) also ends the attempts. */
        boolean attempt() {
            return release ? store.release(key, token) : store.fail(key, token);
        }

        void retryLater() {
            unsettled.add(this);
            schedule();
        }

        private void schedule() {
            try {
                settlements.schedule(this, pause, TimeUnit.MILLISECONDS);
            } catch (RejectedExecutionException e) {
                // shut down: shutdown() tries it once more, unless it has already done so
            }
        }

        @Override
        public void run() {
            if (!unsettled.contains(this)) {
                return; // shutdown() took it
            }
            try {
                if (attempt() || !mayStillCommit || System.nanoTime() - deadline >= 0) {
                    unsettled.remove(this);
                    return;
                }
                // no claim of the token yet: its commit may still land
            } catch (Throwable e) { // thrown on, even a store's undeclared checked exception would end the attempts
                if (System.nanoTime() - deadline >= 0) {
                    unsettled.remove(this);
                    log.log(System.Logger.Level.WARNING, () -> what() + " failed until the claim's lease ran out; it"
                            + " is resolved as a stale claim once a retry or the sweeper takes it over", e);
                    return;
                }
            }
            pause = Math.min(pause * 2, LAST_RETRY.toMillis());
            schedule();
        }

        /** The attempt made as the engine shuts down; false if it failed too. */
        boolean lastAttempt() {
            if (!unsettled.remove(this)) {
                return true;
            }
            try {
                attempt();
                return true;
            } catch (Exception e) { // also a checked exception a store in Kotlin passes on undeclared
                log.log(System.Logger.Level.WARNING, () -> what() + " failed again as the engine shut down; it and"
                        + " any other left stay PROCESSING until their lease runs out, and are then resolved as stale"
                        + " claims", e);
                return false;
            }
        }

        private String what() {
            return (release ? "Releasing" : "Marking FAILED") + " the intent-first claim of " + key.describe()
                    + ", whose work did not run or failed definitely,";
        }
    }

    /** The pause before the first attempt again of a release or FAILED mark the database did not take. */
    static final Duration FIRST_RETRY = Duration.ofMillis(100);
    /** The longest pause between attempts of a release or FAILED mark the database did not take. */
    static final Duration LAST_RETRY = Duration.ofSeconds(5);

    /**
     * Renews the lease of the claim {@code token} holds while its holder works; see {@link Leases#hold}. After
     * {@link #shutdown} nothing would renew it: the claim is handed back (its lease ended at once, so that a retry or
     * a sweeper takes it over now rather than after the lease) and the work refused.
     *
     * @throws EngineShutDownException when the engine has been shut down
     */
    private Leases.Holding holdLease(ScopedKey key, String token, Duration lease) {
        return holdLease(key, token, lease, 0);
    }

    /** As {@link #holdLease(ScopedKey, String, Duration)}, for a lease written up to {@code writtenMillisAgo} ago. */
    private Leases.Holding holdLease(ScopedKey key, String token, Duration lease, long writtenMillisAgo) {
        try {
            return Leases.hold(renewals, store, key, token, lease, writtenMillisAgo);
        } catch (RejectedExecutionException e) {
            IllegalStateException refused = new EngineShutDownException(key, e);
            Leases.endLease(store, key, token, refused); // nothing renews it any more
            throw refused;
        }
    }

    /**
     * How long a claim made now may wait for another transaction's claim of its key: what is left until
     * {@code deadline}, once its transaction has begun (the pool may have made it wait for a connection, which counts
     * against the request's wait as any other), and at least a millisecond: a key nobody holds is claimed all the same.
     */
    private static Duration waitLeft(long deadline) {
        Duration left = remaining(deadline);
        return left == null ? Duration.ofMillis(1) : left;
    }

    /** The time left until {@code deadline} (at least a millisecond), or null if it has passed. */
    private static Duration remaining(long deadline) {
        long left = deadline - System.nanoTime();
        return left <= 0 ? null : Duration.ofNanos(Math.max(left, TimeUnit.MILLISECONDS.toNanos(1)));
    }

    /** Waits {@code millis}; false if the thread was interrupted, whose interrupt is kept for its caller. */
    private static boolean pause(long millis) {
        try {
            Thread.sleep(millis);
            return true;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    /** Ends this instance's flight on {@code key}; waiters get {@code outcome}, or claim again when it is null. */
    private void land(ScopedKey key, Flight flight, Start outcome) {
        flights.remove(key, flight);
        flight.held.complete(false); // no-op if the key was known to be held for it
        flight.outcome.complete(outcome);
    }

    /** How an execution ended without an answer: what became of its work, and so of an intent-first claim. */
    private enum Abandon {
        /** The work may have happened: the claim stays PROCESSING for the resolver (intent-first). */
        UNKNOWN,
        /** The work failed definitely: FAILED, for the same request to run again. */
        FAILED,
        /** The work never started: released, for any request. */
        UNRUN
    }

    /** A request of this instance working on a key, and what the requests waiting behind it will get. */
    private static final class Flight {
        final String requestHash;
        /** The thread that works on the key (an execution belongs to the thread that started it). */
        final Thread owner = Thread.currentThread();
        final CompletableFuture<Start> outcome = new CompletableFuture<>();
        /**
         * True once the key is known to be held for this flight's fingerprint by something committed: the request's
         * intent-first claim, its answer (once it has committed), or a committed claim of the same request (an
         * earlier attempt's), which the request waits for; false if it landed without any.
         */
        final CompletableFuture<Boolean> held = new CompletableFuture<>();
        /** The requests waiting for this one now. */
        private final AtomicInteger waiting = new AtomicInteger();

        Flight(String requestHash) {
            this.requestHash = requestHash;
        }

        /** Counts one more request waiting for this one; false, counting none, if {@code most} wait already. */
        boolean enter(int most) {
            if (waiting.incrementAndGet() > most) {
                waiting.decrementAndGet();
                return false;
            }
            return true;
        }

        /** Counts one request fewer waiting for this one. */
        void leave() {
            waiting.decrementAndGet();
        }

        /** Whether the key is held for the request's fingerprint ({@link #held}), or null if not known in time. */
        Boolean awaitHeld(long nanos) {
            try {
                return held.get(Math.max(0, nanos), TimeUnit.NANOSECONDS);
            } catch (TimeoutException e) {
                return null;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return null;
            } catch (ExecutionException e) {
                return false;
            }
        }

        /** The outcome, null if the key was released, or InProgress if it did not come in time. */
        Start await(long nanos) {
            try {
                return outcome.get(Math.max(0, nanos), TimeUnit.NANOSECONDS);
            } catch (TimeoutException e) {
                return new InProgress();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return new InProgress();
            } catch (ExecutionException e) {
                return null;
            }
        }
    }

    /**
     * A claimed key whose handler is running. In {@link IdempotencyMode#ONE_TRANSACTION} the handler runs in the
     * claim's transaction; in {@link IdempotencyMode#INTENT_FIRST} the claim is already committed, the handler runs
     * in a second transaction (its local writes commit with the result), and the lease is renewed every third of
     * its length until the execution ends. Not thread-safe.
     */
    public final class Execution {

        private final IdempotencyMode mode;
        private final Transactions.Transaction transaction;
        private final ScopedKey key;
        private final String fencingToken;
        private final String requestHash;
        private final Flight flight;
        private final Leases.Holding renewal;
        /** Whether an earlier attempt held the claim (see {@link #proceedIntent}): it is never released. */
        private final boolean heldBefore;
        private final Duration lease;
        private boolean ended;

        /** @param renewal what renews the lease of an {@link IdempotencyMode#INTENT_FIRST} claim; null otherwise */
        private Execution(IdempotencyMode mode, Transactions.Transaction transaction, ScopedKey key,
                          String requestHash, String fencingToken, Duration lease, boolean heldBefore,
                          Leases.Holding renewal) {
            this.heldBefore = heldBefore;
            this.lease = lease;
            this.requestHash = requestHash;
            this.mode = mode;
            this.transaction = transaction;
            this.key = key;
            this.fencingToken = fencingToken;
            this.flight = flights.get(key);
            this.renewal = renewal;
        }

        public ScopedKey key() {
            return key;
        }

        public IdempotencyMode mode() {
            return mode;
        }

        /** The context to expose to the handler. */
        public IdempotencyContext context() {
            return new IdempotencyContext(key, () -> downstreamKey(key), mode);
        }

        /**
         * The handler has returned: writes what its ORM still holds back ({@link Transactions.Transaction#flush()}),
         * so that a failing write fails the handler, where its caller can still handle it, and not the commit.
         */
        public void flush() {
            if (ended) {
                throw new IllegalStateException("the execution for " + key + " has already ended");
            }
            transaction.flush();
        }

        /**
         * Whether the transaction the handler ran in can only roll back now
         * ({@link Transactions.Transaction#isRollbackOnly()}): a write in it failed, and the handler caught the
         * failure. False once the execution has ended.
         */
        public boolean isRollbackOnly() {
            return !ended && transaction.isRollbackOnly();
        }

        /** Finishes with the default storage policy. */
        public Outcome finish(StoredResponse response) {
            return finish(response, defaultPolicy);
        }

        /**
         * Stores {@code response} and commits, or rolls back if the policy does not store it.
         *
         * @throws CommitFailedException if the commit failed (the transaction has been rolled back: nothing of the
         *                               request remains, and its answer must not be sent). A failure reported by the
         *                               commit after the database had committed (an ORM's after-completion callback)
         *                               is not one: the record, read back, holds the answer, which is
         *                               {@link Outcome#STORED}. Thrown too, in {@link IdempotencyMode#ONE_TRANSACTION},
         *                               when the transaction no longer holds its claim as the answer is written:
         *                               the database rolled it back under the handler (InnoDB's deadlock victim)
         * @throws LeaseLostException    ({@link IdempotencyMode#INTENT_FIRST}) if the claim was taken over meanwhile;
         *                               the handler's local writes were rolled back
         */
        public Outcome finish(StoredResponse response, StoragePolicy policy) {
            if (ended) {
                throw new IllegalStateException("the execution for " + key + " has already ended");
            }
            ended = true;
            Start landed = null;
            boolean transactionEnded = false;
            try {
                if (!policy.isStorable(response.status())) {
                    stopRenewal();
                    transactionEnded = true;
                    rollBackLost(transaction, key);
                    return mode == IdempotencyMode.INTENT_FIRST ? Outcome.UNRESOLVED : Outcome.ROLLED_BACK;
                }
                // the answer is stored last before the commit, after the callbacks that run then: one of them that
                // swallowed a failed statement leaves the transaction aborted, whose commit would roll back without
                // an error, and the answer's write fails on it instead
                Throwable[] refused = new Throwable[1];
                boolean[] lost = new boolean[1];
                transactionEnded = true; // a failed commit rolls back by itself
                try {
                    // under the handler's context: the callbacks before the commit are the handler's too (the
                    // outbox row its event's BEFORE_COMMIT listener writes with the downstream key, the entity
                    // listeners of the flush at the commit)
                    context().runWith(() -> {
                        transaction.commit(() -> {
                            // renewed until now: the callbacks before it may take their time (a slow
                            // BEFORE_COMMIT listener), and the claim, whose row this transaction does not hold yet,
                            // stays its holder's
                            stopRenewalAndAwaitIt();
                            boolean completed;
                            try {
                                completed = store.complete(key, fencingToken, response);
                            } catch (Throwable e) { // an error too: the transaction must still be rolled back
                                refused[0] = e;
                                throw e;
                            }
                            if (!completed) {
                                lost[0] = true;
                                throw new IllegalStateException(mode == IdempotencyMode.INTENT_FIRST
                                        ? "the claim on " + key + " was lost before it could complete"
                                        : "the transaction no longer holds its claim on " + key + ": it was rolled"
                                        + " back under the execution (InnoDB rolls a deadlock's victim back whole,"
                                        + " and the connection goes on in a new transaction)");
                            }
                        });
                        return null;
                    });
                } catch (RuntimeException e) {
                    if (refused[0] != null) {
                        // the transaction cannot commit now (its connection was lost, a timeout cancelled the
                        // statement, the handler or a callback before the commit left it aborted): a failed commit,
                        // whose rollback may fail too
                        CommitFailedException failed = new CommitFailedException(key, refused[0]);
                        rollBackAfter(transaction, failed);
                        throw failed;
                    }
                    if (lost[0]) {
                        rollBackAfter(transaction, e);
                        if (mode == IdempotencyMode.INTENT_FIRST) {
                            throw new LeaseLostException(key);
                        }
                        // the claim was made in this very transaction, which nobody else sees: gone, it was rolled
                        // back with everything before it, and what the handler wrote after that (in the transaction
                        // the connection went on in) has just been rolled back. A commit that failed, of which
                        // nothing was kept: the retry runs
                        throw new CommitFailedException(key, e);
                    }
                    // unless it was refused or never asked for, the commit may have happened: a retry finds the
                    // answer or nothing
                    if (CommitFailedException.mayHaveCommitted(e)) {
                        throw new CommitFailedException(key, e, true);
                    }
                    ReadBack readBack = completedAllTheSame(e);
                    if (readBack != ReadBack.COMPLETED) {
                        // a read that failed tells nothing: the commit may have happened (the failure may have come
                        // after it), and "nothing was kept" would be told a client whose payment was made
                        throw new CommitFailedException(key, e, readBack == ReadBack.UNREAD);
                    }
                    // the database committed; what failed came after it, in the transaction manager's own completion
                    // (a JPA provider's after-completion callback: Hibernate's post-commit listeners), which reports
                    // a failed commit all the same — also when the callback's own statement failed, whose database
                    // error is not the commit's. The request's effects and its answer are kept, so the answer
                    // stands: reporting a failed commit would tell the client that nothing was kept
                    log.log(System.Logger.Level.ERROR, () -> "A failure followed the commit of the execution for "
                            + key + " in the database; its effects and answer are kept", e);
                } catch (Throwable e) {
                    if (refused[0] == null && !lost[0] && e instanceof Error && !(e instanceof VirtualMachineError)
                            && completedAllTheSame(e) == ReadBack.COMPLETED) {
                        // an error of a JPA provider's after-completion callback (a Hibernate post-commit listener
                        // whose class fails to load), which the provider passes on as it is, after the database
                        // committed: the effects and the answer are kept, as after an exception there (above)
                        log.log(System.Logger.Level.ERROR, () -> "An error followed the commit of the execution for "
                                + key + " in the database; its effects and answer are kept", e);
                    } else {
                        // an error writing the answer (no memory for a large body), or a checked exception that code
                        // in Kotlin (the store, a callback before the commit) passes on undeclared. Thrown on as it
                        // is, as from the claim
                        if (refused[0] != null) {
                            // not committed: the transaction, left open, would stay bound to the thread with its
                            // connection
                            rollBackAfter(transaction, e);
                        }
                        if (!(e instanceof Error)) {
                            recordAnswerIfCommittedWithout(response, e);
                        }
                        throw e;
                    }
                }
                landed = new Replay(response);
                replayCache.put(key, requestHash, response);
                return Outcome.STORED;
            } finally {
                stopRenewal(); // also when the commit failed before the answer was written
                try {
                    if (!transactionEnded) {
                        transaction.rollback(); // throws too when the connection is gone
                    }
                } finally {
                    landFlight(landed); // whatever happened, the requests waiting here must not wait for ever
                }
            }
        }

        /**
         * After a checked exception thrown undeclared at the commit (by code in Kotlin: a callback before the commit,
         * or the store), on which Spring's transaction managers do not roll back: they end the transaction all the same,
         * and restoring the connection's auto-commit commits it — the claim and the work's writes, without the answer.
         * In this mode such a claim has no lease, so no resolver ever decides it and only cleanup removes it, once
         * expired: until then every retry would be told "in progress", for work that was done. Its answer is recorded instead, so that a retry
         * replays it. An intent-first claim left PROCESSING is the resolver's, as after any unknown outcome. A read or
         * write that fails is attached to {@code failure}.
         */
        private void recordAnswerIfCommittedWithout(StoredResponse response, Throwable failure) {
            if (mode != IdempotencyMode.ONE_TRANSACTION || fencingToken == null) {
                return;
            }
            try {
                boolean committedWithoutAnswer = store.find(key).filter(record -> record.status()
                        == RecordStatus.PROCESSING && fencingToken.equals(record.fencingToken())).isPresent();
                if (committedWithoutAnswer && store.complete(key, fencingToken, response)) {
                    log.log(System.Logger.Level.ERROR, () -> "The execution for " + key + " was committed without"
                            + " its answer when the commit failed; its effects are kept, and its answer recorded"
                            + " for the retries", failure);
                }
            } catch (Exception e) { // also a checked exception a store in Kotlin passes on undeclared
                failure.addSuppressed(e);
            }
        }

        /**
         * Whether the record of this execution's claim is committed with its answer, read back after a commit that
         * failed with no lost connection: either the database refused it (a deferred constraint), or the transaction
         * manager rolled back without asking the database to commit (a transaction marked rollback-only), and the
         * claim was rolled back with it (or, intent first, is still PROCESSING), or the database committed and
         * something after it failed (a post-commit callback, whose failure may name a database error of its own: a
         * statement it made that failed). Only this claim's
         * token tells the two apart: another attempt may have completed the key since. A read that fails tells nothing:
         * {@link ReadBack#UNREAD}, whose commit may or may not have happened.
         * <p>
         * Read on a connection of its own where the thread holds none ({@link Transactions#mayReadApart()}); otherwise
         * (open-in-view's EntityManager still holds the request's connection) in a transaction of its own, rolled back,
         * which runs on what the thread holds: a second connection, taken from a pool that the other requests may
         * hold whole, would be waited for until the pool gives up, and a commit that happened then taken as failed.
         */
        private ReadBack completedAllTheSame(Throwable failure) {
            if (fencingToken == null) {
                return ReadBack.NOT_COMPLETED;
            }
            try {
                Optional<IdempotencyRecord> record;
                if (transactions.mayReadApart()) {
                    record = store.find(key);
                } else {
                    Transactions.Transaction reading = transactions.begin();
                    try {
                        record = store.find(key);
                    } catch (RuntimeException | Error readFailed) {
                        rollBackAfter(reading, readFailed);
                        throw readFailed;
                    }
                    try {
                        reading.rollback();
                    } catch (RuntimeException rollbackFailed) { // what was read stands: the read wrote nothing
                        failure.addSuppressed(rollbackFailed);
                    }
                }
                return record.filter(found -> found.status() == RecordStatus.SUCCEEDED
                        && fencingToken.equals(found.fencingToken())).isPresent()
                        ? ReadBack.COMPLETED : ReadBack.NOT_COMPLETED;
            } catch (RuntimeException readFailed) {
                failure.addSuppressed(readFailed);
                return ReadBack.UNREAD;
            }
        }

        /**
         * The handler failed: roll back its writes. In {@link IdempotencyMode#ONE_TRANSACTION} this releases the key;
         * in {@link IdempotencyMode#INTENT_FIRST} the outcome is unknown and the claim stays for the resolver. Safe to
         * call after {@link #finish}.
         */
        public void abandon() {
            abandon(Abandon.UNKNOWN);
        }

        /**
         * The handler failed definitely ({@link DefiniteFailureException}): roll back its writes, and in
         * {@link IdempotencyMode#INTENT_FIRST} mark the claim FAILED so that the same request, sent again, runs at
         * once. The key stays with that request: the handler may have told a third party about it (under its
         * downstream key), so another request with the key is a mismatch, as for any other record. A mark the
         * database does not take is thrown, and tried again in the background until it does or the lease runs out.
         */
        public void abandonDefinitely() {
            abandon(Abandon.FAILED);
        }

        /**
         * The handler's body never ran (its arguments were refused before it): roll back, and in
         * {@link IdempotencyMode#INTENT_FIRST} release the committed claim, so that the next request with the key —
         * a corrected one too — runs at once, as if the key had never been claimed. A claim an earlier attempt held
         * (a stale one rerun, a FAILED one run again) is marked FAILED instead: that attempt may have reached a third
         * party under the key. A release or mark the database does not take is thrown, and tried again in the
         * background until it does or the lease runs out.
         */
        public void abandonUnrun() {
            abandon(Abandon.UNRUN);
        }

        private void abandon(Abandon how) {
            if (!ended) {
                ended = true;
                stopRenewal();
                try {
                    try {
                        transaction.rollback(); // throws too when the connection is gone
                    } finally {
                        // the work did not happen, whatever became of its transaction: its request sent again
                        // (FAILED), or any request (released), runs at once
                        // (a release or FAILED mark the database does not take is tried again in the background)
                        if (mode == IdempotencyMode.INTENT_FIRST && how == Abandon.UNRUN && !heldBefore) {
                            settle(key, fencingToken, true, lease);
                        } else if (mode == IdempotencyMode.INTENT_FIRST && how != Abandon.UNKNOWN) {
                            // an earlier attempt under the claim may have sent something under the key: it stays
                            // with its request
                            settle(key, fencingToken, false, lease);
                        }
                    }
                } finally {
                    landFlight(null);
                }
            }
        }

        private void stopRenewal() {
            if (renewal != null) {
                renewal.cancel();
            }
        }

        /**
         * {@link #stopRenewal()}, returning once a renewal under way has ended: for the moment before the answer is
         * written, after which a renewal would wait for this transaction's commit (see {@link Leases#stop}).
         */
        private void stopRenewalAndAwaitIt() {
            if (renewal != null) {
                Leases.stop(renewal);
            }
        }

        private void landFlight(Start outcome) {
            if (flight != null) {
                if (outcome instanceof Replay) {
                    // the answer has just committed: the key is held for this request, and a request with another
                    // body that waited for the commit is a mismatch. (A replay of a record read, which may be gone by
                    // now, as an expired one is removed, tells no such thing: the database judges that request.)
                    flight.held.complete(true);
                }
                land(key, flight, outcome);
            }
        }
    }

    /**
     * Daemon threads named {@code name} for the lease renewals and the releases tried again. A task cancelled (a
     * renewal whose execution ended) leaves the queue at once: kept until its next run, a third of the lease later, it
     * would hold its key and token that long, for every request.
     */
    private static ScheduledExecutorService executor(int threads, String name) {
        ScheduledThreadPoolExecutor executor = new ScheduledThreadPoolExecutor(threads, runnable -> {
            // started on the thread of the request that first needs one: none of its inheritable thread-locals
            // (a security context, say) is copied, or the thread would keep it for the life of the process
            Thread thread = new Thread(null, runnable, name, 0, false);
            thread.setDaemon(true);
            return thread;
        });
        executor.setRemoveOnCancelPolicy(true);
        return executor;
    }

    /**
     * {@code lease}, if it is one a claim can be held with: at least {@link #MIN_LEASE}. Stored to the millisecond, a
     * shorter one would be over when claimed: any duplicate could take the key over while its holder works.
     */
    static Duration lease(Duration lease) {
        positive(lease, "lease");
        if (lease.compareTo(MIN_LEASE) < 0) {
            throw new IllegalArgumentException("lease must be at least " + MIN_LEASE.toMillis()
                    + " ms, the precision claims are held to: " + lease);
        }
        return lease;
    }

    private static Duration positive(Duration duration, String name) {
        Objects.requireNonNull(duration, name);
        if (duration.isNegative() || duration.isZero()) {
            throw new IllegalArgumentException(name + " must be positive: " + duration);
        }
        return duration;
    }
}
