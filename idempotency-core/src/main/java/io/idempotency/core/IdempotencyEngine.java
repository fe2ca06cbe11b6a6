package io.idempotency.core;

import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * The idempotency algorithm, in one place. A request with a key goes through these steps:
 *
 * <ol>
 *   <li><b>Coalesce</b> (in this instance): if another request of this application instance is already working on
 *       the same (caller, scope, key), a request with a different fingerprint is answered {@link Start.Mismatch} at
 *       once, and one with the same fingerprint waits — holding no database connection — for that request's outcome
 *       (bounded by {@code maxWait}): its stored answer ({@link Start.Replay}), or, if it rolled back, a fresh claim.
 *       So a storm of one key holds at most one connection per key per instance. This is only an economy: the
 *       database still arbitrates every claim, across instances too.</li>
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
 *       threw, or answered 5xx/408/409/425/429) the transaction rolls back, which also removes the claim, so a
 *       retry runs cleanly. The caller must not send any byte of the answer before {@code finish} returned.</li>
 * </ol>
 *
 * <p>A crash at any point before the commit leaves nothing behind (the database rolls the transaction back); a
 * crash after it leaves the SUCCEEDED record, so the retry is a replay. Thread-safe; one {@link Execution} belongs
 * to the thread that started it.
 */
public final class IdempotencyEngine {

    private final IdempotencyStore store;
    private final Transactions transactions;
    private final StoragePolicy defaultPolicy;
    private final Duration retention;
    private final Duration maxWait;
    private final ConcurrentHashMap<ScopedKey, Flight> flights = new ConcurrentHashMap<>();

    /**
     * @param store         where records live; must use the connection of {@code transactions}
     * @param transactions  opens the transaction shared by the claim and the handler
     * @param defaultPolicy which answers are stored when the endpoint does not say
     * @param retention     minimum time a record is kept (TTL); positive
     * @param maxWait       how long a duplicate waits for an in-flight request before "in progress"; positive
     */
    public IdempotencyEngine(IdempotencyStore store, Transactions transactions, StoragePolicy defaultPolicy,
                             Duration retention, Duration maxWait) {
        this.store = Objects.requireNonNull(store, "store");
        this.transactions = Objects.requireNonNull(transactions, "transactions");
        this.defaultPolicy = Objects.requireNonNull(defaultPolicy, "defaultPolicy");
        this.retention = positive(retention, "retention");
        this.maxWait = positive(maxWait, "maxWait");
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

    /** The result of {@link Execution#finish}. */
    public enum Outcome {
        /** The answer was stored and everything committed. */
        STORED,
        /** The answer is not storable: everything was rolled back and the key is free again. */
        ROLLED_BACK
    }

    /**
     * Claims {@code key} for a request with fingerprint {@code requestHash}. Must be called on a thread with no
     * open transaction.
     */
    public Start start(ScopedKey key, String requestHash) {
        long deadline = System.nanoTime() + maxWait.toNanos();
        while (true) {
            Flight mine = new Flight(requestHash);
            Flight current = flights.putIfAbsent(key, mine);
            if (current == null) {
                return lead(key, mine);
            }
            if (!current.requestHash.equals(requestHash)) {
                return new Mismatch();
            }
            Start outcome = current.await(deadline - System.nanoTime());
            if (outcome != null) {
                return outcome;
            }
            if (System.nanoTime() - deadline >= 0) {
                return new InProgress();
            }
            // the request we waited for rolled back: the key is free, claim it ourselves
        }
    }

    /** Claims in the database as this instance's only request working on {@code key}. */
    private Start lead(ScopedKey key, Flight flight) {
        Start start;
        try {
            start = claim(key, flight.requestHash);
        } catch (RuntimeException | Error e) {
            land(key, flight, null);
            throw e;
        }
        if (start instanceof Proceed) {
            return start; // the flight lands when the execution ends
        }
        land(key, flight, start);
        return start;
    }

    private Start claim(ScopedKey key, String requestHash) {
        Transactions.Transaction transaction = transactions.begin();
        ClaimResult claim;
        try {
            claim = store.claim(new ClaimRequest(key, requestHash, retention, maxWait));
        } catch (RuntimeException | Error e) {
            transaction.rollback();
            throw e;
        }
        if (claim instanceof ClaimResult.Claimed claimed) {
            return new Proceed(new Execution(transaction, key, claimed.fencingToken()));
        }
        transaction.rollback();
        if (claim instanceof ClaimResult.Existing existing) {
            IdempotencyRecord record = existing.record();
            if (!record.requestHash().equals(requestHash)) {
                return new Mismatch();
            }
            if (record.status() == RecordStatus.SUCCEEDED) {
                return new Replay(record.response());
            }
        }
        return new InProgress();
    }

    /** Ends this instance's flight on {@code key}; waiters get {@code outcome}, or claim again when it is null. */
    private void land(ScopedKey key, Flight flight, Start outcome) {
        flights.remove(key, flight);
        flight.outcome.complete(outcome);
    }

    /** A request of this instance working on a key, and what the requests waiting behind it will get. */
    private static final class Flight {
        final String requestHash;
        final CompletableFuture<Start> outcome = new CompletableFuture<>();

        Flight(String requestHash) {
            this.requestHash = requestHash;
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

    /** A claimed key whose handler is running in the claim's transaction. Not thread-safe. */
    public final class Execution {

        private final Transactions.Transaction transaction;
        private final ScopedKey key;
        private final String fencingToken;
        private final Flight flight;
        private boolean ended;

        private Execution(Transactions.Transaction transaction, ScopedKey key, String fencingToken) {
            this.transaction = transaction;
            this.key = key;
            this.fencingToken = fencingToken;
            this.flight = flights.get(key);
        }

        public ScopedKey key() {
            return key;
        }

        /** Finishes with the default storage policy. */
        public Outcome finish(StoredResponse response) {
            return finish(response, defaultPolicy);
        }

        /**
         * Stores {@code response} and commits, or rolls back if the policy does not store it.
         *
         * @throws CommitFailedException if the commit failed (the transaction has been rolled back: nothing of the
         *                               request remains, and its answer must not be sent)
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
                    transactionEnded = true;
                    transaction.rollback();
                    return Outcome.ROLLED_BACK;
                }
                if (!store.complete(key, fencingToken, response)) {
                    throw new IllegalStateException("the claim on " + key + " was lost before it could complete");
                }
                transactionEnded = true; // a failed commit rolls back by itself
                try {
                    transaction.commit();
                } catch (RuntimeException e) {
                    throw new CommitFailedException(key, e);
                }
                landed = new Replay(response);
                return Outcome.STORED;
            } finally {
                if (!transactionEnded) {
                    transaction.rollback();
                }
                landFlight(landed);
            }
        }

        /** The handler failed: roll back its writes and the claim. Safe to call after {@link #finish}. */
        public void abandon() {
            if (!ended) {
                ended = true;
                try {
                    transaction.rollback();
                } finally {
                    landFlight(null);
                }
            }
        }

        private void landFlight(Start outcome) {
            if (flight != null) {
                land(key, flight, outcome);
            }
        }
    }

    private static Duration positive(Duration duration, String name) {
        Objects.requireNonNull(duration, name);
        if (duration.isNegative() || duration.isZero()) {
            throw new IllegalArgumentException(name + " must be positive: " + duration);
        }
        return duration;
    }
}
