package io.idempotency.core;

import java.time.Duration;
import java.util.Objects;

/**
 * The idempotency algorithm, in one place. A request with a key goes through these steps:
 *
 * <ol>
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

    /**
     * @param store         where records live; must use the connection of {@code transactions}
     * @param transactions  opens the transaction shared by the claim and the handler
     * @param defaultPolicy which answers are stored when the endpoint does not say
     * @param retention     minimum time a record is kept (TTL)
     * @param maxWait       how long a duplicate waits for an in-flight request before "in progress"
     */
    public IdempotencyEngine(IdempotencyStore store, Transactions transactions, StoragePolicy defaultPolicy,
                             Duration retention, Duration maxWait) {
        this.store = Objects.requireNonNull(store, "store");
        this.transactions = Objects.requireNonNull(transactions, "transactions");
        this.defaultPolicy = Objects.requireNonNull(defaultPolicy, "defaultPolicy");
        this.retention = Objects.requireNonNull(retention, "retention");
        this.maxWait = Objects.requireNonNull(maxWait, "maxWait");
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
    public record Mismatch(IdempotencyRecord existing) implements Start {
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
                return new Mismatch(record);
            }
            if (record.status() == RecordStatus.SUCCEEDED) {
                return new Replay(record.response());
            }
        }
        return new InProgress();
    }

    /** A claimed key whose handler is running in the claim's transaction. Not thread-safe. */
    public final class Execution {

        private final Transactions.Transaction transaction;
        private final ScopedKey key;
        private final String fencingToken;
        private boolean ended;

        private Execution(Transactions.Transaction transaction, ScopedKey key, String fencingToken) {
            this.transaction = transaction;
            this.key = key;
            this.fencingToken = fencingToken;
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
            end();
            if (!policy.isStorable(response.status())) {
                transaction.rollback();
                return Outcome.ROLLED_BACK;
            }
            try {
                if (!store.complete(key, fencingToken, response)) {
                    throw new IllegalStateException("the claim on " + key + " was lost before it could complete");
                }
            } catch (RuntimeException | Error e) {
                transaction.rollback();
                throw e;
            }
            try {
                transaction.commit();
            } catch (RuntimeException e) {
                throw new CommitFailedException(key, e);
            }
            return Outcome.STORED;
        }

        /** The handler failed: roll back its writes and the claim. Safe to call after {@link #finish}. */
        public void abandon() {
            if (!ended) {
                ended = true;
                transaction.rollback();
            }
        }

        private void end() {
            if (ended) {
                throw new IllegalStateException("the execution for " + key + " has already ended");
            }
            ended = true;
        }
    }
}
