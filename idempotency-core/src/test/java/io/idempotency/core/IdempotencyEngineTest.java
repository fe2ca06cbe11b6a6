package io.idempotency.core;

import static java.nio.charset.StandardCharsets.UTF_8;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatExceptionOfType;
import static org.assertj.core.api.Assertions.assertThatIllegalStateException;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.idempotency.core.IdempotencyEngine.InProgress;
import io.idempotency.core.IdempotencyEngine.Mismatch;
import io.idempotency.core.IdempotencyEngine.Outcome;
import io.idempotency.core.IdempotencyEngine.Proceed;
import io.idempotency.core.IdempotencyEngine.Replay;
import io.idempotency.core.IdempotencyEngine.Start;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.function.Supplier;
import java.util.Collections;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** The engine's decisions, against a scripted store and a recording transaction manager. */
class IdempotencyEngineTest {

    private static final ScopedKey KEY = new ScopedKey("alice", "POST /payments", "k-1");
    private static final String HASH = "a".repeat(64);
    private static final String OTHER_HASH = "b".repeat(64);
    private static final Duration RETENTION = Duration.ofHours(24);
    private static final Duration MAX_WAIT = Duration.ofMillis(500);
    /**
     * The wait of the engine in the tests that a request is answered at once, not after the wait: long enough that a
     * test thread descheduled on a busy machine cannot be taken for it. Half of it bounds "at once".
     */
    private static final Duration LONG_WAIT = Duration.ofSeconds(5);
    private static final Duration AT_ONCE = LONG_WAIT.dividedBy(2);
    /** Waiting tasks each on a thread of their own: a one-worker common pool (two processors) runs them in turn. */
    private static final Executor THREAD_PER_TASK = task -> new Thread(task).start();
    private static final StoredResponse CREATED =
            new StoredResponse(201, List.of(new StoredResponse.Header("Location", "/payments/1")),
                    "{\"id\":1}".getBytes(UTF_8));

    private final FakeStore store = new FakeStore();
    private final FakeTransactions transactions = new FakeTransactions();
    private final IdempotencyEngine engine =
            new IdempotencyEngine(store, transactions, StoragePolicy.DEFAULT, RETENTION, MAX_WAIT);

    // ---- start ----

    @Test
    void claimedProceedsAndKeepsTheTransactionOpen() {
        store.claimAnswer = () -> new ClaimResult.Claimed("token-1");

        Start start = engine.start(KEY, HASH);

        assertThat(start).isInstanceOf(Proceed.class);
        assertThat(((Proceed) start).execution().key()).isEqualTo(KEY);
        assertThat(transactions.only().commits).isZero();
        assertThat(transactions.only().rollbacks).isZero();
    }

    @Test
    void claimIsAskedWithTheEngineSettings() {
        store.claimAnswer = () -> new ClaimResult.Claimed("token-1");

        engine.start(KEY, HASH);

        assertThat(store.claims).hasSize(1);
        ClaimRequest request = store.claims.get(0);
        assertThat(request.key()).isEqualTo(KEY);
        assertThat(request.requestHash()).isEqualTo(HASH);
        assertThat(request.retention()).isEqualTo(RETENTION);
        assertThat(request.lease()).isNull();
        assertThat(request.maxWait()).as("what is left of the engine's wait")
                .isLessThanOrEqualTo(MAX_WAIT).isGreaterThan(MAX_WAIT.dividedBy(2));
        // the claim runs inside the transaction that was opened for it
        assertThat(store.transactionOpenDuringClaim).isTrue();
    }

    /**
     * Only a hex SHA-256 is taken as a fingerprint, refused before memory and database: a text the database does not
     * keep as given would be replayed by the instance that stored it and refused as another request's by the others.
     */
    @Test
    void aFingerprintOf64CharactersThatAreNotAllHexDigitsIsRefusedBeforeTheStoreIsAsked() {
        store.claimAnswer = () -> new ClaimResult.Claimed("token-1");
        String digits = "0".repeat(63);
        // the characters on either side of each range of digits: '/' ':', '`' 'g', '@' 'G'
        for (String notHex : List.of("/", ":", "`", "g", "@", "G", "\u00e9", " ")) {
            assertThatThrownBy(() -> engine.start(KEY, digits + notHex)).as("ending in '%s'", notHex)
                    .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("hex SHA-256");
            assertThatThrownBy(() -> engine.start(KEY, notHex + digits)).as("starting with '%s'", notHex)
                    .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("hex SHA-256");
        }
        assertThatThrownBy(() -> engine.start(KEY, "0".repeat(100) + "\n"))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageEndingWith("0".repeat(80) + "...").hasMessageNotContaining("\n");
        assertThat(store.claims).as("claims made").isEmpty();
        assertThat(transactions.begun).as("transactions begun").isEmpty();

        for (String hex : List.of("0123456789abcdef", "0123456789ABCDEF", "9aF09aF09aF09aF0")) {
            assertThat(engine.start(new ScopedKey("alice", "POST /payments", hex), hex.repeat(4))).as(hex)
                    .isInstanceOf(Proceed.class);
        }
        assertThat(store.claims).extracting(ClaimRequest::requestHash).as("compared and stored in lower case")
                .containsExactly("0123456789abcdef".repeat(4), "0123456789abcdef".repeat(4),
                        "9af09af09af09af0".repeat(4));
    }

    @Test
    void succeededWithSameHashReplaysAndRollsBack() {
        store.claimAnswer = () -> existing(RecordStatus.SUCCEEDED, HASH, CREATED);

        Start start = engine.start(KEY, HASH);

        assertThat(start).isEqualTo(new Replay(CREATED));
        assertThat(transactions.only().rollbacks).isEqualTo(1);
        assertThat(transactions.only().commits).isZero();
    }

    @Test
    void succeededWithOtherHashIsMismatch() {
        ClaimResult.Existing existing = existing(RecordStatus.SUCCEEDED, OTHER_HASH, CREATED);
        store.claimAnswer = () -> existing;

        Start start = engine.start(KEY, HASH);

        assertThat(start).isEqualTo(new Mismatch());
        assertThat(transactions.only().rollbacks).isEqualTo(1);
        assertThat(transactions.only().commits).isZero();
    }

    @Test
    void processingWithOtherHashIsMismatchNotInProgress() {
        // mismatch is checked before "in progress": a reused key is reported as such at once
        ClaimResult.Existing existing = existing(RecordStatus.PROCESSING, OTHER_HASH, null);
        store.claimAnswer = () -> existing;

        Start start = engine.start(KEY, HASH);

        assertThat(start).isEqualTo(new Mismatch());
        assertThat(transactions.only().rollbacks).isEqualTo(1);
    }

    @Test
    void processingWithSameHashIsInProgress() {
        store.claimAnswer = () -> existing(RecordStatus.PROCESSING, HASH, null);

        Start start = engine.start(KEY, HASH);

        assertThat(start).isInstanceOf(InProgress.class);
        assertThat(transactions.only().rollbacks).isEqualTo(1);
        assertThat(transactions.only().commits).isZero();
    }

    /**
     * A duplicate of an intent-first request whose committed claim is held (live lease) looks at it again and again
     * until its wait runs out, each look a transaction: soon after the first, then further apart, never more than
     * the pauses allow (at 50 ms apart, a wait of 2 s made 40 looks).
     */
    @Test
    void aDuplicateOfAHeldIntentFirstClaimLooksAgainLessAndLessOften() {
        store.claimAnswer = () -> existing(RecordStatus.PROCESSING, HASH, null);
        Duration wait = Duration.ofSeconds(2);
        IdempotencyEngine waiting = new IdempotencyEngine(store, transactions, StoragePolicy.DEFAULT, RETENTION, wait);
        try {
            Start start = waiting.start(KEY, HASH, IdempotencyMode.INTENT_FIRST, Duration.ofMinutes(5));

            assertThat(start).isInstanceOf(InProgress.class);
            // pauses of 10, 20, 40, 80 and 160 ms, then 200 ms, and a last look just before the wait ends: about 15
            // looks in 2 s (fewer on a slow machine, never many more)
            long mostLooks = 1 + 5 + (wait.toMillis() - 310) / IdempotencyEngine.MAX_POLL_PAUSE_MILLIS + 2;
            assertThat(store.claims).as("looks at the held claim").hasSizeBetween(3, (int) mostLooks);
            assertThat(transactions.begun).as("one transaction a look, each rolled back")
                    .hasSize(store.claims.size()).allSatisfy(transaction -> {
                        assertThat(transaction.rollbacks).isEqualTo(1);
                        assertThat(transaction.commits).isZero();
                    });
        } finally {
            waiting.shutdown();
        }
    }

    @Test
    void busyIsInProgressAndRollsBack() {
        store.claimAnswer = ClaimResult.Busy::new;

        Start start = engine.start(KEY, HASH);

        assertThat(start).isInstanceOf(InProgress.class);
        assertThat(transactions.only().rollbacks).isEqualTo(1);
        assertThat(transactions.only().commits).isZero();
    }

    @Test
    void claimThrowingRollsBackAndPropagates() {
        RuntimeException failure = new RuntimeException("connection lost");
        store.claimAnswer = () -> {
            throw failure;
        };

        assertThatThrownBy(() -> engine.start(KEY, HASH)).isSameAs(failure);
        assertThat(transactions.only().rollbacks).isEqualTo(1);
        assertThat(transactions.only().commits).isZero();
    }

    @Test
    void aClaimWhoseRollbackFailsTooThrowsWhyTheClaimFailed() {
        RuntimeException failure = new RuntimeException("connection lost");
        store.claimAnswer = () -> {
            throw failure;
        };
        transactions.rollbackFailure = new RuntimeException("rollback failed: the connection is gone");

        assertThatThrownBy(() -> engine.start(KEY, HASH)).isSameAs(failure)
                .hasSuppressedException(transactions.rollbackFailure);
        assertThatThrownBy(() -> engine.start(KEY, HASH, IdempotencyMode.INTENT_FIRST, Duration.ofSeconds(30)))
                .isSameAs(failure);
        transactions.rollbackFailure = null;
    }

    @Test
    void aLeaseShorterThanTheMillisecondClaimsAreHeldToIsRefusedBeforeAnythingIsClaimed() {
        store.claimAnswer = () -> new ClaimResult.Claimed("token-1");

        // stored as 0 ms, the claim would be stale at once: a duplicate could take it over while this one runs
        assertThatThrownBy(() -> engine.start(KEY, HASH, IdempotencyMode.INTENT_FIRST, Duration.ofNanos(500_000)))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("at least 1 ms");
        assertThat(store.claims).isEmpty();
        IdempotencyEngine.Start shortest = engine.start(KEY, HASH, IdempotencyMode.INTENT_FIRST, Duration.ofMillis(1));
        assertThat(shortest).isInstanceOf(IdempotencyEngine.Proceed.class);
        ((IdempotencyEngine.Proceed) shortest).execution().abandon();
    }

    @Test
    void aSweeperWithALeaseShorterThanTheMillisecondClaimsAreHeldToIsRefused() {
        // stored as 0 ms, a claim the sweeper took over would be stale at once: a retry could take it over and ask
        // the resolver beside the sweeper
        assertThatThrownBy(() -> new StaleClaimSweeper(store, StaleClaimResolver.RERUN, new DownstreamKeys("secret"),
                Duration.ofNanos(500_000), 10)).isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("at least 1 ms");
        assertThatThrownBy(() -> new StaleClaimSweeper(store, StaleClaimResolver.RERUN, new DownstreamKeys("secret"),
                Duration.ZERO, 10)).isInstanceOf(IllegalArgumentException.class);
        assertThat(new StaleClaimSweeper(store, StaleClaimResolver.RERUN, new DownstreamKeys("secret"),
                IdempotencyEngine.MIN_LEASE, 10)).isNotNull();
    }

    @Test
    void aCapOnStoredBodiesOfNoByteIsRefusedByTheEngineAndTheSweeper() {
        // a cap of 0 would refuse every answer with a body, handler's and resolver's alike, only once the work is done
        for (long cap : new long[] {0, -1}) {
            assertThatThrownBy(() -> new IdempotencyEngine(store, transactions, StoragePolicy.DEFAULT, RETENTION,
                    MAX_WAIT, StaleClaimResolver.RERUN, new DownstreamKeys("secret"), ReplayCache.NONE, cap))
                    .as("engine, cap %d", cap).isInstanceOf(IllegalArgumentException.class)
                    .hasMessageContaining("maxStoredBodySize");
            assertThatThrownBy(() -> new StaleClaimSweeper(store, StaleClaimResolver.RERUN,
                    new DownstreamKeys("secret"), Duration.ofSeconds(30), 10, cap))
                    .as("sweeper, cap %d", cap).isInstanceOf(IllegalArgumentException.class)
                    .hasMessageContaining("maxStoredBodySize");
        }
        IdempotencyEngine smallest = new IdempotencyEngine(store, transactions, StoragePolicy.DEFAULT, RETENTION,
                MAX_WAIT, StaleClaimResolver.RERUN, new DownstreamKeys("secret"), ReplayCache.NONE, 1);
        assertThat(smallest.maxStoredBodySize()).isEqualTo(1);
        smallest.shutdown();
        assertThat(new StaleClaimSweeper(store, StaleClaimResolver.RERUN, new DownstreamKeys("secret"),
                Duration.ofSeconds(30), 10, 1)).isNotNull();
    }

    @Test
    void aSweeperThatWouldLookAtNoStaleClaimIsRefused() {
        // a batch of none would never resolve a stale claim, without a word; a negative one fails every sweep
        for (int batchSize : new int[] {0, -1}) {
            assertThatThrownBy(() -> new StaleClaimSweeper(store, StaleClaimResolver.RERUN,
                    new DownstreamKeys("secret"), Duration.ofSeconds(30), batchSize))
                    .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("batchSize");
        }
        assertThat(new StaleClaimSweeper(store, StaleClaimResolver.RERUN, new DownstreamKeys("secret"),
                Duration.ofSeconds(30), 1)).isNotNull();
    }

    @Test
    void claimThrowingAnErrorAlsoRollsBack() {
        StackOverflowError failure = new StackOverflowError();
        store.claimAnswer = () -> {
            throw failure;
        };

        assertThatThrownBy(() -> engine.start(KEY, HASH)).isSameAs(failure);
        assertThat(transactions.only().rollbacks).isEqualTo(1);
    }

    @Test
    void aStoreThrowingACheckedExceptionItDoesNotDeclareLeavesTheKeyFree() {
        // a store or transactions written in a language without checked exceptions (Kotlin) passes a JDBC driver's
        // SQLException on as it is
        IdempotencyEngine patient = patientEngine();
        java.sql.SQLException failure = new java.sql.SQLException("connection lost", "08006");
        store.claimAnswer = () -> sneakyThrow(failure);

        assertThatThrownBy(() -> patient.start(KEY, HASH)).isSameAs(failure);
        assertThat(transactions.only().rollbacks).as("no transaction stays open on the thread").isEqualTo(1);
        assertThatThrownBy(() -> patient.start(KEY, HASH, IdempotencyMode.INTENT_FIRST, Duration.ofSeconds(30)))
                .isSameAs(failure);
        assertThat(transactions.begun.get(1).rollbacks).isEqualTo(1);

        // the next request with the key asks the store at once, instead of waiting for a flight that never lands
        store.claimAnswer = () -> new ClaimResult.Claimed("token-1");
        long started = System.nanoTime();
        assertThat(patient.start(KEY, HASH)).isInstanceOf(Proceed.class);
        assertThat(Duration.ofNanos(System.nanoTime() - started)).isLessThan(AT_ONCE);
    }

    @SuppressWarnings("unchecked")
    private static <T, E extends Throwable> T sneakyThrow(Throwable failure) throws E {
        throw (E) failure;
    }

    // ---- finish / abandon ----

    @Test
    void finishWithStorableAnswerCompletesWithTheTokenAndCommits() {
        IdempotencyEngine.Execution execution = proceed("token-1");

        Outcome outcome = execution.finish(CREATED);

        assertThat(outcome).isEqualTo(Outcome.STORED);
        assertThat(store.completions).containsExactly(new Completion(KEY, "token-1", CREATED));
        assertThat(transactions.only().commits).isEqualTo(1);
        assertThat(transactions.only().rollbacks).isZero();
        // complete must be written before the commit, in the same transaction
        assertThat(store.transactionOpenDuringComplete).isTrue();
    }

    @Test
    void finishWithUnstorableAnswerRollsBackWithoutCompleting() {
        IdempotencyEngine.Execution execution = proceed("token-1");

        Outcome outcome = execution.finish(new StoredResponse(503, List.of(), null));

        assertThat(outcome).isEqualTo(Outcome.ROLLED_BACK);
        assertThat(store.completions).isEmpty();
        assertThat(transactions.only().rollbacks).isEqualTo(1);
        assertThat(transactions.only().commits).isZero();
    }

    @Test
    void finishUsesTheGivenPolicyInsteadOfTheDefault() {
        IdempotencyEngine.Execution execution = proceed("token-1");

        Outcome outcome = execution.finish(CREATED, status -> false);

        assertThat(outcome).isEqualTo(Outcome.ROLLED_BACK);
        assertThat(store.completions).isEmpty();
        assertThat(transactions.only().rollbacks).isEqualTo(1);
    }

    @Test
    void aCommitFailureWithoutADatabaseErrorIsReadBackAndAFailureIfTheAnswerIsNotThere() {
        IdempotencyEngine.Execution execution = proceed("token-1");
        RuntimeException cause = new RuntimeException("transaction marked rollback-only");
        transactions.commitFailure = cause;
        store.records = key -> Optional.empty();

        assertThatExceptionOfType(CommitFailedException.class)
                .isThrownBy(() -> execution.finish(CREATED))
                .satisfies(e -> {
                    assertThat(e.getCause()).isSameAs(cause);
                    assertThat(e.key()).isEqualTo(KEY);
                    assertThat(e.outcomeUnknown()).isFalse();
                });
    }

    /**
     * The commit failed without saying whether the database committed, and the record could not be read back (the
     * pool gave no connection for it, the database went away): the commit may have happened, and the client must not
     * be told that nothing was kept.
     */
    @Test
    void aCommitFailureWhoseRecordCannotBeReadBackHasAnUnknownOutcome() {
        IdempotencyEngine.Execution execution = proceed("token-1");
        RuntimeException cause = new RuntimeException("Unable to perform afterTransactionCompletion callback");
        transactions.commitFailure = cause;
        RuntimeException readFailed = new RuntimeException("Connection is not available, request timed out");
        store.records = key -> {
            throw readFailed;
        };

        assertThatExceptionOfType(CommitFailedException.class)
                .isThrownBy(() -> execution.finish(CREATED))
                .satisfies(e -> {
                    assertThat(e.getCause()).isSameAs(cause);
                    assertThat(e.outcomeUnknown()).as("whether the commit happened is unknown").isTrue();
                    assertThat(e.getCause().getSuppressed()).as("why it is unknown").contains(readFailed);
                });
    }

    /**
     * The transaction manager reports a failed commit after the database committed (an ORM's after-completion
     * callback failed): the record holds this claim's answer, so the answer stands.
     */
    @Test
    void aFailureAfterTheDatabaseCommittedKeepsTheAnswer() {
        IdempotencyEngine.Execution execution = proceed("token-1");
        transactions.commitFailure = new RuntimeException("Unable to perform afterTransactionCompletion callback");
        store.records = key -> Optional.of(new IdempotencyRecord(key, RecordStatus.SUCCEEDED, "hash", "token-1",
                CREATED, Instant.EPOCH, Instant.EPOCH, null, false));

        assertThat(execution.finish(CREATED)).isEqualTo(Outcome.STORED);
    }

    /**
     * An error after the database committed (a Hibernate post-commit listener whose class fails to load, which the
     * provider passes on as it is) keeps the answer the record holds, as an exception there does; an error the
     * record shows came before the commit, or one of the JVM itself, is thrown on as it is.
     */
    @Test
    void anErrorAfterTheDatabaseCommittedKeepsTheAnswer() {
        IdempotencyEngine.Execution execution = proceed("token-1");
        transactions.commitError = new NoClassDefFoundError("com/example/AuditListener");
        store.records = key -> Optional.of(new IdempotencyRecord(key, RecordStatus.SUCCEEDED, "hash", "token-1",
                CREATED, Instant.EPOCH, Instant.EPOCH, null, false));

        assertThat(execution.finish(CREATED)).isEqualTo(Outcome.STORED);
    }

    @Test
    void anErrorAtTheCommitWhoseAnswerIsNotInTheRecordIsThrownOn() {
        IdempotencyEngine.Execution execution = proceed("token-2");
        NoClassDefFoundError error = new NoClassDefFoundError("com/example/AuditListener");
        transactions.commitError = error;
        store.records = key -> Optional.of(new IdempotencyRecord(key, RecordStatus.SUCCEEDED, "hash", "token-1",
                CREATED, Instant.EPOCH, Instant.EPOCH, null, false));

        assertThatThrownBy(() -> execution.finish(CREATED)).as("the record holds another claim's answer")
                .isSameAs(error);
    }

    @Test
    void anErrorOfTheJvmAtTheCommitIsThrownOnWithoutARead() {
        IdempotencyEngine.Execution execution = proceed("token-1");
        OutOfMemoryError error = new OutOfMemoryError("Java heap space");
        transactions.commitError = error;
        store.records = key -> {
            throw new AssertionError("no read after an error of the JVM itself");
        };

        assertThatThrownBy(() -> execution.finish(CREATED)).isSameAs(error);
    }

    /**
     * Where the thread holds a connection (open-in-view), the record is read in a transaction of its own, rolled back
     * after: a rollback that fails then does not undo what the read found, and the answer that was committed stands.
     */
    @Test
    void aReadOnTheThreadsConnectionStandsWhenItsRollbackFails() {
        IdempotencyEngine.Execution execution = proceed("token-1");
        transactions.readsApart = false;
        transactions.commitFailure = new RuntimeException("Unable to perform afterTransactionCompletion callback");
        transactions.rollbackFailure = new RuntimeException("connection closed");
        store.records = key -> Optional.of(new IdempotencyRecord(key, RecordStatus.SUCCEEDED, "hash", "token-1",
                CREATED, Instant.EPOCH, Instant.EPOCH, null, false));

        assertThat(execution.finish(CREATED)).isEqualTo(Outcome.STORED);
        assertThat(transactions.begun).as("the request's, and the read's").hasSize(2);
        assertThat(transactions.begun.get(1).rollbacks).isEqualTo(1);
    }

    /** Another attempt's answer, committed since this one's commit failed, is not this one's. */
    @Test
    void anotherClaimsAnswerDoesNotMakeAFailedCommitAStoredOne() {
        IdempotencyEngine.Execution execution = proceed("token-1");
        transactions.commitFailure = new RuntimeException("transaction marked rollback-only");
        store.records = key -> Optional.of(new IdempotencyRecord(key, RecordStatus.SUCCEEDED, "hash", "token-2",
                CREATED, Instant.EPOCH, Instant.EPOCH, null, false));

        assertThatExceptionOfType(CommitFailedException.class).isThrownBy(() -> execution.finish(CREATED));
    }

    /** A database error is not always the commit's (a post-commit listener's own statement): read back, not kept. */
    @Test
    void aCommitTheDatabaseRefusedIsAFailedCommit() {
        IdempotencyEngine.Execution execution = proceed("token-1");
        transactions.commitFailure = new RuntimeException(new java.sql.SQLException("refused", "23514"));
        store.records = key -> Optional.empty();

        assertThatExceptionOfType(CommitFailedException.class).isThrownBy(() -> execution.finish(CREATED));
    }

    /**
     * The server ended the session during the commit (an administrator's {@code pg_terminate_backend} while it waited
     * for a synchronous standby, say): it may have committed locally, so the outcome is unknown, not "refused".
     */
    @Test
    void aSessionTheServerEndedDuringTheCommitLeavesTheOutcomeUnknown() {
        for (String state : new String[] {"57P01", "57P02", "08006"}) {
            IdempotencyEngine.Execution execution = proceed("token-1");
            transactions.commitFailure = new RuntimeException(new java.sql.SQLException("terminated", state));
            store.records = key -> Optional.empty();

            assertThatExceptionOfType(CommitFailedException.class).isThrownBy(() -> execution.finish(CREATED))
                    .satisfies(failed -> assertThat(failed.outcomeUnknown()).as(state).isTrue());
        }
    }

    @Test
    void lostClaimOnCompleteRollsBackAndThrows() {
        // the claim was this transaction's own: gone, the transaction was rolled back under the execution (InnoDB's
        // deadlock victim), and nothing of it is kept: a failed commit whose outcome is known, as the client is told
        IdempotencyEngine.Execution execution = proceed("token-1");
        store.completeAnswer = false;

        assertThatExceptionOfType(CommitFailedException.class).isThrownBy(() -> execution.finish(CREATED))
                .satisfies(failed -> assertThat(failed.outcomeUnknown()).isFalse())
                .withCauseInstanceOf(IllegalStateException.class);
        assertThat(transactions.only().rollbacks).isEqualTo(1);
        assertThat(transactions.only().commits).isZero();
    }

    @Test
    void completeThrowingRollsBackAndIsAFailedCommit() {
        IdempotencyEngine.Execution execution = proceed("token-1");
        RuntimeException failure = new RuntimeException("disk full");
        store.completeFailure = failure;

        assertThatThrownBy(() -> execution.finish(CREATED)).isInstanceOf(CommitFailedException.class)
                .hasCause(failure);
        assertThat(transactions.only().rollbacks).isEqualTo(1);
        assertThat(transactions.only().commits).isZero();
    }

    /**
     * An error writing the answer (no memory left for a large body) ends the transaction all the same: left open, it
     * would stay bound to the thread, its connection held, and every later request on the thread refused.
     */
    @Test
    void completeThrowingAnErrorAlsoRollsBack() {
        IdempotencyEngine.Execution execution = proceed("token-1");
        OutOfMemoryError failure = new OutOfMemoryError("Java heap space");
        store.completeFailure = failure;

        assertThatThrownBy(() -> execution.finish(CREATED)).isSameAs(failure);
        assertThat(transactions.only().rollbacks).as("no transaction stays open on the thread").isEqualTo(1);
        assertThat(transactions.only().commits).isZero();
    }

    @Test
    void abandonRollsBackOnce() {
        IdempotencyEngine.Execution execution = proceed("token-1");

        execution.abandon();
        execution.abandon();

        assertThat(transactions.only().rollbacks).isEqualTo(1);
        assertThat(transactions.only().commits).isZero();
        assertThat(store.completions).isEmpty();
    }

    @Test
    void flushWritesThroughTheOpenTransactionWithoutEndingIt() {
        IdempotencyEngine.Execution execution = proceed("token-1");

        execution.flush();

        assertThat(transactions.only().flushes).isEqualTo(1);
        assertThat(transactions.only().commits).isZero();
        assertThat(transactions.only().rollbacks).isZero();
        execution.finish(CREATED);
        assertThatThrownBy(execution::flush).isInstanceOf(IllegalStateException.class);
    }

    /** An ORM's write that fails at the flush is the work's failure: rolled back, nothing stored, thrown as is. */
    @Test
    void aTemplateWhoseFlushFailsRollsBackAndThrowsTheFlushFailure() {
        store.claimAnswer = () -> new ClaimResult.Claimed("token-1");
        RuntimeException duplicate = new IllegalStateException("duplicate key value violates unique constraint");
        transactions.flushFailure = duplicate;
        byte[] input = "{}".getBytes(UTF_8);

        assertThatThrownBy(() -> new IdempotencyTemplate(engine).execute(KEY, input, () -> input))
                .isSameAs(duplicate);

        assertThat(transactions.only().flushes).isEqualTo(1);
        assertThat(transactions.only().rollbacks).isEqualTo(1);
        assertThat(transactions.only().commits).isZero();
        assertThat(store.completions).isEmpty();
    }

    @Test
    void templateWithoutWorkIsRefusedBeforeAnythingIsClaimed() {
        store.claimAnswer = () -> new ClaimResult.Claimed("token-1");

        // an intent-first claim committed without work would hold the key for its lease
        assertThatThrownBy(() -> new IdempotencyTemplate(engine).execute(KEY, new byte[0],
                IdempotencyMode.INTENT_FIRST, Duration.ofSeconds(30), null))
                .isInstanceOf(NullPointerException.class).hasMessage("work");
        assertThat(store.claims).isEmpty();
    }

    /**
     * A key that is missing (a message without an id, read into a variable first) is refused by name before anything is
     * claimed, as a missing work or mode is, not by the JVM's description of the template's own call that failed on it
     * ({@code Cannot invoke "ScopedKey.scope()"}), which a JVM started without helpful exception messages leaves empty.
     */
    @Test
    void templateWithoutAKeyIsRefusedBeforeAnythingIsClaimed() {
        store.claimAnswer = () -> new ClaimResult.Claimed("token-1");

        for (IdempotencyMode mode : IdempotencyMode.values()) {
            assertThatThrownBy(() -> new IdempotencyTemplate(engine).execute(null, new byte[0], mode,
                    Duration.ofSeconds(30), () -> new byte[0]))
                    .isInstanceOf(NullPointerException.class).hasMessage("key");
        }
        assertThat(store.claims).isEmpty();
    }

    /**
     * A mode that is missing (a listener's setting left unset) is refused, not taken for the default mode: work meant to
     * run intent-first (a gateway call) would otherwise run in one transaction with its claim, which a crash after the
     * call rolls back, so that the redelivery calls the gateway again.
     */
    @Test
    void templateWithoutAModeIsRefusedBeforeAnythingIsClaimed() {
        store.claimAnswer = () -> new ClaimResult.Claimed("token-1");

        assertThatThrownBy(() -> new IdempotencyTemplate(engine).execute(KEY, new byte[0], null,
                Duration.ofSeconds(30), () -> new byte[0]))
                .isInstanceOf(NullPointerException.class).hasMessage("mode");
        assertThat(store.claims).isEmpty();
    }

    /**
     * The template's lease is for intent-first claims only and, as its javadoc says, ignored in the default mode: a
     * listener passing one setting for both modes (or none) has its one-transaction work run, with no lease on the claim.
     */
    @Test
    void aTemplateLeaseIsIgnoredOutsideIntentFirstMode() throws Exception {
        store.claimAnswer = () -> new ClaimResult.Claimed("token-1");
        IdempotencyTemplate template = new IdempotencyTemplate(engine);

        for (Duration lease : new Duration[] {null, Duration.ZERO, Duration.ofNanos(500_000)}) {
            IdempotencyTemplate.Result result = template.execute(KEY, new byte[0], IdempotencyMode.ONE_TRANSACTION,
                    lease, () -> "done".getBytes(UTF_8));
            assertThat(result.replayed()).isFalse();
        }

        assertThat(store.claims).hasSize(3).allSatisfy(claim -> assertThat(claim.lease()).isNull());
        assertThat(store.completions).hasSize(3);
    }

    @Test
    void keysThatNoTextColumnCanHoldAreRefused() {
        assertThatThrownBy(() -> new ScopedKey("", "s", "message-\ud800"))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("surrogate");
        assertThatThrownBy(() -> new ScopedKey("", "s", "message-\udc00x"))
                .isInstanceOf(IllegalArgumentException.class);
        assertThatThrownBy(() -> new ScopedKey("", "s", "message-\0")).isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("NUL");
        assertThat(new ScopedKey("", "s", "message-\ud83d\ude00").key()).endsWith("\ud83d\ude00");
        // a caller or scope sent as '?' would make two callers (or operations) one, and share their records
        assertThatThrownBy(() -> new ScopedKey("tenant-\ud800", "s", "k")).isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("caller");
        assertThatThrownBy(() -> new ScopedKey("", "POST /\0", "k")).isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("scope");
    }

    @Test
    void abandonAfterFinishDoesNothing() {
        IdempotencyEngine.Execution execution = proceed("token-1");
        execution.finish(CREATED);

        execution.abandon();

        assertThat(transactions.only().commits).isEqualTo(1);
        assertThat(transactions.only().rollbacks).isZero();
    }

    @Test
    void finishTwiceIsRejected() {
        IdempotencyEngine.Execution execution = proceed("token-1");
        execution.finish(CREATED);

        assertThatIllegalStateException().isThrownBy(() -> execution.finish(CREATED));
        assertThat(store.completions).hasSize(1);
        assertThat(transactions.only().commits).isEqualTo(1);
    }

    @Test
    void finishAfterAbandonIsRejected() {
        IdempotencyEngine.Execution execution = proceed("token-1");
        execution.abandon();

        assertThatIllegalStateException().isThrownBy(() -> execution.finish(CREATED));
        assertThat(store.completions).isEmpty();
        assertThat(transactions.only().commits).isZero();
    }

    @Test
    void aPolicyThatThrowsStillEndsTheTransaction() {
        IdempotencyEngine.Execution execution = proceed("token-1");

        assertThatThrownBy(() -> execution.finish(CREATED, status -> {
            throw new IllegalStateException("broken policy");
        })).hasMessage("broken policy");
        execution.abandon();

        assertThat(transactions.only().rollbacks).isEqualTo(1);
        assertThat(transactions.hasOpen()).isFalse();
    }

    @Test
    void aRecordOfAnotherRequestInTheStoreTakesTheKeysOldAnswerOutOfMemory() {
        IdempotencyEngine cached = new IdempotencyEngine(store, transactions, StoragePolicy.DEFAULT, RETENTION,
                MAX_WAIT, StaleClaimResolver.RERUN, new DownstreamKeys("secret"),
                new ReplayCache(100, 1024, 1 << 20, Duration.ofMinutes(1)));
        store.claimAnswer = () -> new ClaimResult.Claimed("token-1");
        ((Proceed) cached.start(KEY, HASH)).execution().finish(CREATED);

        // the record was removed and the key used again for OTHER_HASH: a third request learns it from the store
        store.claimAnswer = () -> existing(RecordStatus.SUCCEEDED, OTHER_HASH, CREATED);
        assertThat(cached.start(KEY, "c".repeat(64))).isEqualTo(new Mismatch());
        int claims = store.claims.size();

        // the old request is now the store's to judge too: the key belongs to another request
        assertThat(cached.start(KEY, HASH)).isEqualTo(new Mismatch());
        assertThat(store.claims).as("judged by the store, not replayed from memory").hasSize(claims + 1);
        cached.shutdown();
    }

    @Test
    void withAReplayCacheAStoredAnswerIsReplayedWithoutTheStore() {
        IdempotencyEngine cached = new IdempotencyEngine(store, transactions, StoragePolicy.DEFAULT, RETENTION,
                MAX_WAIT, StaleClaimResolver.RERUN, new DownstreamKeys("secret"),
                new ReplayCache(100, 1024, 1 << 20, Duration.ofMinutes(1)));
        store.claimAnswer = () -> new ClaimResult.Claimed("token-1");
        ((Proceed) cached.start(KEY, HASH)).execution().finish(CREATED);
        int claims = store.claims.size();

        assertThat(cached.start(KEY, HASH)).isEqualTo(new Replay(CREATED));
        assertThat(store.claims).as("no claim reached the store").hasSize(claims);
        assertThat(transactions.begun).hasSize(1);

        // another request with the key is the store's to judge: the record may have been removed and the key used
        // again, for this very request, on another instance
        store.claimAnswer = () -> existing(RecordStatus.SUCCEEDED, HASH, CREATED);
        assertThat(cached.start(KEY, OTHER_HASH)).isEqualTo(new Mismatch());
        assertThat(store.claims).hasSize(claims + 1);
        cached.shutdown();
    }

    /**
     * A request remembered as completed, whose answer is not kept, is answered from one read of its record, with no
     * transaction and no claim; a request not remembered is not read first: it goes to the claim, as does a
     * remembered one whose record is gone, or that may not be read apart from the transaction.
     */
    @Test
    void aRequestRememberedCompletedIsAnsweredFromOneReadOfItsRecordAndOnlyThatOneIsRead() {
        IdempotencyEngine remembering = new IdempotencyEngine(store, transactions, StoragePolicy.DEFAULT, RETENTION,
                MAX_WAIT, StaleClaimResolver.RERUN, new DownstreamKeys("secret"),
                new ReplayCache(0, 0, 0, Duration.ZERO, 1000)); // no answer kept, completed requests remembered
        store.claimAnswer = () -> new ClaimResult.Claimed("token-1");
        ((Proceed) remembering.start(KEY, HASH)).execution().finish(CREATED);
        List<ScopedKey> reads = Collections.synchronizedList(new ArrayList<>());
        Instant now = Instant.parse("2025-01-01T00:00:00Z");
        IdempotencyRecord completed = new IdempotencyRecord(KEY, RecordStatus.SUCCEEDED, HASH, "token-1", CREATED, now,
                now.plus(RETENTION), null, false);
        store.records = key -> {
            reads.add(key);
            return Optional.of(completed).filter(record -> record.key().equals(key));
        };

        assertThat(remembering.start(KEY, HASH)).isEqualTo(new Replay(CREATED));
        assertThat(reads).as("one read of the remembered request's record").containsExactly(KEY);
        assertThat(store.claims).as("no claim reached the store").hasSize(1);
        assertThat(transactions.begun).as("no transaction was opened").hasSize(1);

        ScopedKey neverCompleted = new ScopedKey("alice", "POST /payments", "k-2");
        store.claimAnswer = () -> new ClaimResult.Claimed("token-2");
        Start notRemembered = remembering.start(neverCompleted, HASH);
        assertThat(notRemembered).as("claimed in the store").isInstanceOf(Proceed.class);
        ((Proceed) notRemembered).execution().abandon();
        assertThat(reads).as("a request not remembered is not read before its claim").containsExactly(KEY);

        store.records = key -> {
            reads.add(key);
            return Optional.empty(); // removed after the retention
        };
        store.claimAnswer = () -> new ClaimResult.Claimed("token-3");
        Start gone = remembering.start(KEY, HASH);
        assertThat(gone).as("the claim decides when the record is gone").isInstanceOf(Proceed.class);
        ((Proceed) gone).execution().abandon();

        transactions.readsApart = false;
        int readsBefore = reads.size();
        store.claimAnswer = () -> existing(RecordStatus.SUCCEEDED, HASH, CREATED);
        assertThat(remembering.start(KEY, HASH)).isEqualTo(new Replay(CREATED));
        assertThat(reads).as("not read apart from the transaction the claim takes").hasSize(readsBefore);
        remembering.shutdown();
    }

    // ---- coalescing in one instance ----

    @Test
    void aDuplicateInThisInstanceWaitsWithoutATransactionAndGetsTheStoredAnswer() throws Exception {
        IdempotencyEngine.Execution leader = proceed("token-1");
        CompletableFuture<Start> duplicate = startWaitingBehindTheKey();

        leader.finish(CREATED);

        assertThat(duplicate.get(5, TimeUnit.SECONDS)).isEqualTo(new Replay(CREATED));
        assertThat(transactions.begun).as("the duplicate never opened a transaction").hasSize(1);
        assertThat(store.claims).hasSize(1);
    }

    /**
     * As many duplicates as may wait for the request holding the key do; one more is answered "in progress" at once,
     * holding no thread for the wait, and so is a request with another fingerprint, which would wait for the holder's
     * end as they do. Once the holder is done, those that waited get its answer.
     */
    @Test
    void noMoreDuplicatesWaitInThisInstanceThanMay() throws Exception {
        IdempotencyEngine capped = new IdempotencyEngine(store, transactions, StoragePolicy.DEFAULT, RETENTION,
                Duration.ofSeconds(30), StaleClaimResolver.RERUN,
                new DownstreamKeys(IdempotencyEngine.DEFAULT_DOWNSTREAM_SECRET), ReplayCache.NONE,
                IdempotencyEngine.DEFAULT_MAX_STORED_BODY_SIZE, 2);
        try {
            store.claimAnswer = () -> new ClaimResult.Claimed("token-1");
            IdempotencyEngine.Execution leader = ((Proceed) capped.start(KEY, HASH)).execution();
            CompletableFuture<Start> first = startWaitingBehindTheKey(capped);
            CompletableFuture<Start> second = startWaitingBehindTheKey(capped);

            long started = System.nanoTime();
            assertThat(CompletableFuture.supplyAsync(() -> capped.start(KEY, HASH), THREAD_PER_TASK)
                    .get(5, TimeUnit.SECONDS)).as("one more duplicate").isInstanceOf(InProgress.class);
            assertThat(Duration.ofNanos(System.nanoTime() - started)).as("answered at once, not after its wait")
                    .isLessThan(Duration.ofSeconds(5));
            assertThat(CompletableFuture.supplyAsync(() -> capped.start(KEY, OTHER_HASH), THREAD_PER_TASK)
                    .get(5, TimeUnit.SECONDS)).as("another request under the key").isInstanceOf(InProgress.class);
            assertThat(first).isNotDone();
            assertThat(second).isNotDone();

            leader.finish(CREATED);

            assertThat(first.get(5, TimeUnit.SECONDS)).isEqualTo(new Replay(CREATED));
            assertThat(second.get(5, TimeUnit.SECONDS)).isEqualTo(new Replay(CREATED));
            assertThat(store.claims).as("only the leader claimed").hasSize(1);
        } finally {
            capped.shutdown();
        }
    }

    /** A longer wait than the database's lock wait can take would fail every claim (or overflow the deadline). */
    @Test
    void theWaitForADuplicateIsAtMostWhatTheDatabaseCanWait() {
        for (Duration wait : new Duration[] {IdempotencyEngine.MAX_WAIT.plusMillis(1), Duration.ofDays(365 * 300)}) {
            assertThatThrownBy(() -> new IdempotencyEngine(store, transactions, StoragePolicy.DEFAULT, RETENTION,
                    wait)).isInstanceOf(IllegalArgumentException.class).hasMessageContaining("maxWait must be at most");
        }
        new IdempotencyEngine(store, transactions, StoragePolicy.DEFAULT, RETENTION, IdempotencyEngine.MAX_WAIT)
                .shutdown();
    }

    @Test
    void theMostDuplicatesThatMayWaitArePositive() {
        for (int most : new int[] {0, -1}) {
            assertThatThrownBy(() -> new IdempotencyEngine(store, transactions, StoragePolicy.DEFAULT, RETENTION,
                    MAX_WAIT, StaleClaimResolver.RERUN, new DownstreamKeys(IdempotencyEngine.DEFAULT_DOWNSTREAM_SECRET),
                    ReplayCache.NONE, IdempotencyEngine.DEFAULT_MAX_STORED_BODY_SIZE, most))
                    .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("maxWaitingDuplicates");
        }
    }

    /**
     * A request with another fingerprint behind a one-transaction claim, which has not committed, waits for its end, as
     * it would in the database on another instance: a mismatch once the claim commits with its answer.
     */
    @Test
    void aDuplicateWithAnotherFingerprintIsAMismatchOnceTheClaimItWaitsForCommits() throws Exception {
        IdempotencyEngine patient = patientEngine();
        IdempotencyEngine.Execution leader = proceed(patient, "token-1");
        CompletableFuture<Start> other = startWaitingBehindTheKey(patient, OTHER_HASH);

        leader.finish(CREATED);

        assertThat(other.get(5, TimeUnit.SECONDS)).isEqualTo(new Mismatch());
        assertThat(transactions.begun).as("the other request opened no transaction").hasSize(1);
    }

    /**
     * ... and, should the claim roll back, runs: the key is free (refused at once, a request whose key was free a
     * moment later would have been refused for good on this instance, and run on any other).
     */
    @Test
    void aDuplicateWithAnotherFingerprintClaimsTheKeyOnceTheClaimItWaitsForRollsBack() throws Exception {
        IdempotencyEngine patient = patientEngine();
        IdempotencyEngine.Execution leader = proceed(patient, "token-1");
        CompletableFuture<Start> other = startWaitingBehindTheKey(patient, OTHER_HASH);
        store.claimAnswer = () -> new ClaimResult.Claimed("token-2");

        leader.abandon();

        assertThat(other.get(5, TimeUnit.SECONDS)).isInstanceOf(Proceed.class);
        assertThat(store.claims).as("the other request claimed the key itself").hasSize(2);
    }

    /** Behind a committed intent-first claim it is a mismatch at once, as the database tells another instance. */
    @Test
    void aDuplicateWithAnotherFingerprintBehindACommittedIntentIsAMismatchAtOnce() throws Exception {
        intentFirst(new ClaimResult.Claimed("token-1"));

        // another request: on another thread (the leader's own thread may not wait for itself); a mismatch, not the
        // "in progress" its wait would have ended in (the execution does not end)
        assertThat(CompletableFuture.supplyAsync(() -> engine.start(KEY, OTHER_HASH), THREAD_PER_TASK)
                .get(5, TimeUnit.SECONDS)).isEqualTo(new Mismatch());
    }

    @Test
    void theThreadOfARunningExecutionIsRefusedTheSameKeyAtOnceRatherThanWaitingForItself() {
        IdempotencyEngine patient = patientEngine();
        proceed(patient, "token-1");

        for (String hash : List.of(HASH, OTHER_HASH)) {
            long started = System.nanoTime();
            assertThatThrownBy(() -> patient.start(KEY, hash))
                    .isInstanceOf(IllegalStateException.class)
                    .hasMessageContaining("already running on this thread");
            assertThat(Duration.ofNanos(System.nanoTime() - started)).isLessThan(AT_ONCE);
        }
        assertThat(transactions.begun).hasSize(1);
    }

    @Test
    void aRetryIsNotRefusedBecauseOfAnotherRequestThatHasNotGotTheKey() throws Exception {
        // the key was completed for OTHER_HASH; a reuse with HASH is claiming (slowly) when the genuine retry comes
        CountDownLatch release = new CountDownLatch(1);
        CompletableFuture<Start> reuse = reuseClaimingUntil(release, HASH, OTHER_HASH);

        CompletableFuture<Start> retry = new CompletableFuture<>();
        Thread retrying = new Thread(() -> retry.complete(engine.start(KEY, OTHER_HASH)));
        retrying.start();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (retrying.getState() != Thread.State.TIMED_WAITING) { // waits to see whether the other gets the key
            assertThat(retry).as("the retry must wait, not answer").isNotDone();
            assertThat(System.nanoTime()).isLessThan(deadline);
            Thread.sleep(5);
        }
        release.countDown();

        assertThat(reuse.get(5, TimeUnit.SECONDS)).isEqualTo(new Mismatch());
        assertThat(retry.get(5, TimeUnit.SECONDS)).isEqualTo(new Replay(CREATED));
        assertThat(store.claims).as("the retry asked the database itself").hasSize(2);
    }

    @Test
    void anotherFingerprintBehindARequestStillClaimingIsInProgressWhenTheWaitRunsOutAndAMismatchOnceItHoldsTheKey()
            throws Exception {
        CountDownLatch claiming = new CountDownLatch(1);
        CountDownLatch release = new CountDownLatch(1);
        store.claimAnswer = () -> {
            claiming.countDown();
            await(release); // e.g. blocked behind another instance's claim of the key
            return new ClaimResult.Claimed("token-1");
        };
        // a wait of 2 s: the request that waits for the commit below has that long to be seen waiting before it
        IdempotencyEngine waiting = new IdempotencyEngine(store, transactions, StoragePolicy.DEFAULT, RETENTION,
                Duration.ofSeconds(2));
        CompletableFuture<Start> first = CompletableFuture.supplyAsync(() -> waiting.start(KEY, HASH), THREAD_PER_TASK);
        assertThat(claiming.await(5, TimeUnit.SECONDS)).isTrue();

        Start other = waiting.start(KEY, OTHER_HASH);
        release.countDown();

        assertThat(other).as("not known in time whose the key is").isEqualTo(new InProgress());
        IdempotencyEngine.Execution holder = ((Proceed) first.get(5, TimeUnit.SECONDS)).execution();
        CompletableFuture<Start> next = startWaitingBehindTheKey(waiting, OTHER_HASH);
        holder.finish(CREATED);
        assertThat(next.get(5, TimeUnit.SECONDS)).as("the fingerprint holding the key is committed and differs")
                .isEqualTo(new Mismatch());
    }

    @Test
    void aRetryBehindAnotherRequestThatCannotClaimInTimeIsToldToComeBackNotRefused() throws Exception {
        // the key was completed for HASH; a reuse with OTHER_HASH is claiming, and its claim takes longer than the
        // genuine retry's wait (no pool connection to be had, say): whether it gets the key is not known in time
        CountDownLatch release = new CountDownLatch(1);
        CompletableFuture<Start> reuse = reuseClaimingUntil(release, OTHER_HASH, HASH);

        Start retry = engine.start(KEY, HASH);
        release.countDown();

        assertThat(retry).as("the retry is the request the key was completed for: never a mismatch")
                .isEqualTo(new InProgress());
        assertThat(reuse.get(5, TimeUnit.SECONDS)).isEqualTo(new Mismatch());
        assertThat(engine.start(KEY, HASH)).as("its next retry").isEqualTo(new Replay(CREATED));
    }

    /**
     * Starts a request with {@code reuseHash} for the key completed for {@code completedHash}, whose claim is held up
     * until {@code release} (no pool connection to be had, say); returns once it is claiming. Later claims find the
     * completed record at once.
     */
    private CompletableFuture<Start> reuseClaimingUntil(CountDownLatch release, String reuseHash,
                                                        String completedHash) throws InterruptedException {
        CountDownLatch claiming = new CountDownLatch(1);
        store.claimAnswer = () -> {
            if (claiming.getCount() > 0) {
                claiming.countDown();
                await(release);
            }
            return existing(RecordStatus.SUCCEEDED, completedHash, CREATED);
        };
        CompletableFuture<Start> reuse =
                CompletableFuture.supplyAsync(() -> engine.start(KEY, reuseHash), THREAD_PER_TASK);
        assertThat(claiming.await(5, TimeUnit.SECONDS)).isTrue();
        return reuse;
    }

    /** An engine on the same store and transactions that waits {@link #LONG_WAIT} for a key in flight. */
    private IdempotencyEngine patientEngine() {
        return new IdempotencyEngine(store, transactions, StoragePolicy.DEFAULT, RETENTION, LONG_WAIT);
    }

    /**
     * Starts a duplicate of {@code KEY} with {@code HASH} on a thread of its own, and returns once that thread waits for
     * the request holding the key: one that came only after the holder had ended would not show what the test is about.
     */
    private CompletableFuture<Start> startWaitingBehindTheKey() throws InterruptedException {
        return startWaitingBehindTheKey(engine);
    }

    private CompletableFuture<Start> startWaitingBehindTheKey(IdempotencyEngine engine) throws InterruptedException {
        return startWaitingBehindTheKey(engine, HASH);
    }

    /** As {@link #startWaitingBehindTheKey()}, for a request with {@code hash}. */
    private CompletableFuture<Start> startWaitingBehindTheKey(IdempotencyEngine engine, String hash)
            throws InterruptedException {
        CompletableFuture<Start> duplicate = new CompletableFuture<>();
        Thread waiting = new Thread(() -> {
            try {
                duplicate.complete(engine.start(KEY, hash));
            } catch (Throwable e) {
                duplicate.completeExceptionally(e);
            }
        });
        waiting.start();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (waiting.getState() != Thread.State.TIMED_WAITING) {
            assertThat(duplicate).as("waits for the request holding the key").isNotDone();
            assertThat(System.nanoTime()).as("the duplicate began to wait").isLessThan(deadline);
            Thread.sleep(5);
        }
        return duplicate;
    }

    private static void await(CountDownLatch latch) {
        try {
            assertThat(latch.await(5, TimeUnit.SECONDS)).isTrue();
        } catch (InterruptedException e) {
            throw new IllegalStateException(e);
        }
    }

    @Test
    void whenTheRequestHoldingTheKeyRollsBackAWaiterClaimsItself() throws Exception {
        IdempotencyEngine.Execution leader = proceed("token-1");
        CompletableFuture<Start> duplicate = startWaitingBehindTheKey();

        store.claimAnswer = () -> new ClaimResult.Claimed("token-2");
        leader.abandon();

        assertThat(duplicate.get(5, TimeUnit.SECONDS)).isInstanceOf(Proceed.class);
        assertThat(transactions.begun).hasSize(2);
    }

    @Test
    void aWaiterGivesUpAfterTheMaximumWait() throws Exception {
        proceed("token-1");

        CompletableFuture<Duration> waited = CompletableFuture.supplyAsync(() -> {
            long started = System.nanoTime();
            assertThat(engine.start(KEY, HASH)).isEqualTo(new InProgress());
            return Duration.ofNanos(System.nanoTime() - started);
        }, THREAD_PER_TASK);

        assertThat(waited.get(5, TimeUnit.SECONDS)).isGreaterThanOrEqualTo(MAX_WAIT.minusMillis(50));
        assertThat(transactions.begun).hasSize(1);
    }

    @Test
    void anInterruptedDuplicateIsToldToComeBackAtOnceAndTheOthersStillGetTheAnswer() throws Exception {
        IdempotencyEngine patient = patientEngine();
        IdempotencyEngine.Execution leader = proceed(patient, "token-1");
        CompletableFuture<Start> others = startWaitingBehindTheKey(patient);
        CompletableFuture<Start> interrupted = new CompletableFuture<>();
        CompletableFuture<Boolean> stillInterrupted = new CompletableFuture<>();
        Thread waiting = new Thread(() -> {
            interrupted.complete(patient.start(KEY, HASH));
            stillInterrupted.complete(Thread.currentThread().isInterrupted());
        });
        waiting.start();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (waiting.getState() != Thread.State.TIMED_WAITING) {
            assertThat(System.nanoTime()).isLessThan(deadline);
            Thread.sleep(5);
        }

        long started = System.nanoTime();
        waiting.interrupt(); // the server stops the thread
        assertThat(interrupted.get(10, TimeUnit.SECONDS)).isEqualTo(new InProgress());
        assertThat(Duration.ofNanos(System.nanoTime() - started)).isLessThan(AT_ONCE);
        assertThat(stillInterrupted.get(5, TimeUnit.SECONDS)).as("the interrupt is kept for the caller").isTrue();

        leader.finish(CREATED);
        assertThat(others.get(5, TimeUnit.SECONDS)).isEqualTo(new Replay(CREATED));
        assertThat(store.claims).hasSize(1);
    }

    /**
     * A request with another fingerprint, waiting to learn whether the request claiming the key gets it, is told to
     * come back at once when its thread is interrupted (the server stops), and keeps the interrupt.
     */
    @Test
    void anotherFingerprintInterruptedWhileTheKeyIsBeingClaimedIsToldToComeBackAtOnce() throws Exception {
        CountDownLatch claiming = new CountDownLatch(1);
        CountDownLatch release = new CountDownLatch(1);
        store.claimAnswer = () -> {
            claiming.countDown();
            await(release);
            return new ClaimResult.Claimed("token-1");
        };
        IdempotencyEngine patient = patientEngine();
        CompletableFuture<Start> first = CompletableFuture.supplyAsync(() -> patient.start(KEY, HASH),
                THREAD_PER_TASK);
        try {
            assertThat(claiming.await(5, TimeUnit.SECONDS)).isTrue();
            CompletableFuture<Start> other = new CompletableFuture<>();
            CompletableFuture<Boolean> stillInterrupted = new CompletableFuture<>();
            Thread waiting = new Thread(() -> {
                other.complete(patient.start(KEY, OTHER_HASH));
                stillInterrupted.complete(Thread.currentThread().isInterrupted());
            });
            waiting.start();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (waiting.getState() != Thread.State.TIMED_WAITING) {
                assertThat(other).as("waits to learn whose the key is").isNotDone();
                assertThat(System.nanoTime()).isLessThan(deadline);
                Thread.sleep(5);
            }

            long started = System.nanoTime();
            waiting.interrupt();
            assertThat(other.get(10, TimeUnit.SECONDS)).as("come back later, not a refusal").isEqualTo(new InProgress());
            assertThat(Duration.ofNanos(System.nanoTime() - started)).isLessThan(AT_ONCE);
            assertThat(stillInterrupted.get(5, TimeUnit.SECONDS)).as("the interrupt is kept for the caller").isTrue();
        } finally {
            release.countDown();
        }
        assertThat(first.get(5, TimeUnit.SECONDS)).isInstanceOf(Proceed.class);
    }

    /**
     * An intent-first retry that finds its earlier attempt's claim live polls it until its wait runs out; its thread
     * interrupted (the server stops), it is told to come back at once, after one look, and keeps the interrupt.
     */
    @Test
    void anInterruptedIntentFirstRetryStopsPollingALiveClaimAndIsToldToComeBack() throws Exception {
        IdempotencyEngine patient = patientEngine();
        store.claimAnswer = () -> existing(RecordStatus.PROCESSING, HASH, null); // lease not run out
        CompletableFuture<Start> retry = new CompletableFuture<>();
        CompletableFuture<Boolean> stillInterrupted = new CompletableFuture<>();
        CompletableFuture<Duration> took = new CompletableFuture<>();
        Thread retrying = new Thread(() -> {
            Thread.currentThread().interrupt(); // the server stops the thread
            long started = System.nanoTime();
            retry.complete(patient.start(KEY, HASH, IdempotencyMode.INTENT_FIRST, Duration.ofHours(1)));
            took.complete(Duration.ofNanos(System.nanoTime() - started));
            stillInterrupted.complete(Thread.currentThread().isInterrupted());
        });
        try {
            retrying.start();

            assertThat(retry.get(10, TimeUnit.SECONDS)).isEqualTo(new InProgress());
            assertThat(took.get(10, TimeUnit.SECONDS)).as("at once, not after the wait").isLessThan(AT_ONCE);
            assertThat(store.claims).as("one look, no polling").hasSize(1);
            assertThat(stillInterrupted.get(5, TimeUnit.SECONDS)).as("the interrupt is kept for the caller").isTrue();
        } finally {
            patient.shutdown();
        }
    }

    @Test
    void otherKeysDoNotWait() {
        proceed("token-1");
        store.claimAnswer = () -> new ClaimResult.Claimed("token-2");

        Start other = engine.start(new ScopedKey("bob", KEY.scope(), KEY.key()), HASH);

        assertThat(other).isInstanceOf(Proceed.class);
        assertThat(transactions.begun).hasSize(2);
    }

    /**
     * A key claimed for another request (its old record removed) makes the answer kept in memory for the old one
     * stale at once, not only when the new request completes: meanwhile the old request waits for the new one's
     * claim, as it would in the database, and is a mismatch once that commits.
     */
    @Test
    void aKeyClaimedForAnotherRequestTakesTheOldAnswerOutOfMemoryAtOnce() throws Exception {
        IdempotencyEngine cached = new IdempotencyEngine(store, transactions, StoragePolicy.DEFAULT, RETENTION,
                LONG_WAIT, StaleClaimResolver.RERUN, new DownstreamKeys("secret"),
                new ReplayCache(100, 1024, 1 << 20, Duration.ofMinutes(1)));
        store.claimAnswer = () -> new ClaimResult.Claimed("token-1");
        ((Proceed) cached.start(KEY, HASH)).execution().finish(CREATED);

        store.claimAnswer = () -> new ClaimResult.Claimed("token-2");
        IdempotencyEngine.Execution other = ((Proceed) cached.start(KEY, OTHER_HASH)).execution();

        CompletableFuture<Start> old = startWaitingBehindTheKey(cached, HASH);
        other.finish(CREATED);
        assertThat(old.get(5, TimeUnit.SECONDS)).as("not the answer of a record that is gone")
                .isEqualTo(new Mismatch());
        cached.shutdown();
    }

    /** Refused inside an open transaction alike, whether the answer is kept in memory or not. */
    @Test
    void aStartInsideAnOpenTransactionIsRefusedAlsoWhenItsAnswerIsKeptInMemory() {
        IdempotencyEngine cached = new IdempotencyEngine(store, transactions, StoragePolicy.DEFAULT, RETENTION,
                MAX_WAIT, StaleClaimResolver.RERUN, new DownstreamKeys("secret"),
                new ReplayCache(100, 1024, 1 << 20, Duration.ofMinutes(1)));
        store.claimAnswer = () -> new ClaimResult.Claimed("token-1");
        ((Proceed) cached.start(KEY, HASH)).execution().finish(CREATED);
        transactions.openOnThread = new IllegalStateException("a transaction is open on this thread");

        assertThatThrownBy(() -> cached.start(KEY, HASH)).isSameAs(transactions.openOnThread);
        assertThatThrownBy(() -> cached.start(KEY, OTHER_HASH)).isSameAs(transactions.openOnThread);
        assertThat(store.claims).hasSize(1);
        cached.shutdown();
    }

    /**
     * The request this one waited for gave up first (it came earlier, so its wait ran out earlier): this one claims the
     * key itself for the rest of its own wait, rather than be told "in progress" after a fraction of it.
     */
    @Test
    void aDuplicateWhoseRequestGaveUpWaitingClaimsTheKeyItselfWithinItsOwnWait() throws Exception {
        CountDownLatch claiming = new CountDownLatch(1);
        CountDownLatch release = new CountDownLatch(1);
        java.util.concurrent.atomic.AtomicInteger calls = new java.util.concurrent.atomic.AtomicInteger();
        store.claimAnswer = () -> {
            if (calls.getAndIncrement() == 0) {
                claiming.countDown();
                await(release); // blocked behind another instance's claim, until its wait runs out
                return new ClaimResult.Busy();
            }
            return new ClaimResult.Claimed("token-2");
        };
        CompletableFuture<Start> first = CompletableFuture.supplyAsync(() -> engine.start(KEY, HASH), THREAD_PER_TASK);
        assertThat(claiming.await(5, TimeUnit.SECONDS)).isTrue();
        CompletableFuture<Start> duplicate = startWaitingBehindTheKey();

        release.countDown();

        assertThat(first.get(5, TimeUnit.SECONDS)).isEqualTo(new InProgress());
        assertThat(duplicate.get(5, TimeUnit.SECONDS)).isInstanceOf(Proceed.class);
        assertThat(store.claims).hasSize(2);
        ((Proceed) duplicate.get()).execution().abandon();
    }

    // ---- intent first ----

    @Test
    void anIntentFirstClaimIsCommittedBeforeTheWorkWhichRunsInATransactionOfItsOwn() {
        store.claimAnswer = () -> new ClaimResult.Claimed("token-1");
        Duration lease = Duration.ofHours(1); // renewals every 20 minutes: none runs during the test
        try {
            Proceed proceed = (Proceed) engine.start(KEY, HASH, IdempotencyMode.INTENT_FIRST, lease);

            assertThat(store.claims.get(0).lease()).isEqualTo(lease);
            assertThat(transactions.begun).hasSize(2);
            assertThat(transactions.begun.get(0).commits).as("the intent is durable before any side effect")
                    .isEqualTo(1);
            assertThat(transactions.begun.get(1).commits + transactions.begun.get(1).rollbacks)
                    .as("the work's transaction is open").isZero();

            assertThat(proceed.execution().finish(CREATED)).isEqualTo(Outcome.STORED);
            assertThat(store.completions).containsExactly(new Completion(KEY, "token-1", CREATED));
            assertThat(transactions.begun.get(1).commits).isEqualTo(1);
        } finally {
            engine.shutdown();
        }
    }

    /**
     * How an intent-first execution ends decides what becomes of its committed claim: work that never ran releases it
     * for any request, work that failed definitely marks it FAILED (its own request may run again, another is a
     * mismatch), and work whose outcome is unknown leaves it PROCESSING for the resolver. A claim taken over from a
     * FAILED record is never released: the earlier attempt may have reached a third party under the key.
     */
    @Test
    void anIntentFirstClaimIsReleasedMarkedFailedOrLeftForTheResolverAsItsWorkEnded() {
        store.settlementsExpected = true;
        try {
            intentFirst(new ClaimResult.Claimed("token-1")).abandonUnrun();
            intentFirst(new ClaimResult.Claimed("token-2")).abandonDefinitely();
            intentFirst(new ClaimResult.Claimed("token-3")).abandon();
            intentFirst(new ClaimResult.Claimed("token-4", true)).abandonUnrun();
            intentFirst(new ClaimResult.Claimed("token-5", true)).abandonDefinitely();

            assertThat(store.settlements)
                    .containsExactly("release token-1", "fail token-2", "fail token-4", "fail token-5");
            assertThat(store.completions).isEmpty();
        } finally {
            engine.shutdown();
        }
    }

    /**
     * A lease longer than the nanoseconds a long counts (about 292 years; the starter takes any lease its retention
     * covers, up to 100,000 years) still lets the claim be released or marked FAILED as its work ends: otherwise the
     * claim would stay PROCESSING under that lease, and every request with its key be told "in progress" for ever.
     */
    @Test
    void anIntentFirstClaimWithALeaseOfCenturiesIsStillReleasedOrMarkedFailed() {
        store.settlementsExpected = true;
        Duration tenThousandYears = Duration.ofDays(3_650_000);
        try {
            for (String token : List.of("token-1", "token-2")) {
                store.claimAnswer = () -> new ClaimResult.Claimed(token);
                Start start = engine.start(KEY, HASH, IdempotencyMode.INTENT_FIRST, tenThousandYears);
                assertThat(start).isInstanceOf(Proceed.class);
                if (token.equals("token-1")) {
                    ((Proceed) start).execution().abandonUnrun();
                } else {
                    ((Proceed) start).execution().abandonDefinitely();
                }
            }

            assertThat(store.settlements).containsExactly("release token-1", "fail token-2");
        } finally {
            engine.shutdown();
        }
    }

    /**
     * A release or FAILED mark the database did not take (it was briefly out of reach) is thrown, and tried again in
     * the background until the database takes it: the next request runs at once instead of being told "in progress"
     * until the lease runs out. Once taken, it is not tried again, not even as the engine shuts down.
     */
    @Test
    void aReleaseOrFailedMarkTheDatabaseDidNotTakeIsTriedAgainUntilItTakesIt() throws Exception {
        store.settlementsExpected = true;
        int[] refusals = {0};
        store.settlementRefused = attempt -> {
            synchronized (refusals) {
                return refusals[0]++ < 4; // the first four attempts fail: each is tried again at least once
            }
        };
        try {
            IdempotencyEngine.Execution unrun = intentFirst(new ClaimResult.Claimed("token-1"));
            assertThatIllegalStateException().isThrownBy(unrun::abandonUnrun).withMessageContaining("release token-1");
            IdempotencyEngine.Execution failed = intentFirst(new ClaimResult.Claimed("token-2"));
            assertThatIllegalStateException().isThrownBy(failed::abandonDefinitely)
                    .withMessageContaining("fail token-2");

            awaitSettlements("release token-1", "fail token-2");
            assertThat(store.settlementAttempts).as("each tried until the database took it").hasSize(6);
        } finally {
            engine.shutdown();
        }
        assertThat(store.settlementAttempts).as("not tried again once taken, also at the shutdown").hasSize(6);
        assertThat(store.settlements).containsExactlyInAnyOrder("release token-1", "fail token-2");
    }

    /**
     * A release the database never takes is tried again, with a growing pause, only until the claim's lease has run
     * out (a retry or a sweeper then resolves the claim as a stale one); the engine's shutdown does not try it again.
     */
    @Test
    void aReleaseTheDatabaseNeverTakesIsGivenUpOnceTheLeaseHasRunOut() throws Exception {
        store.settlementsExpected = true;
        store.settlementRefused = attempt -> true;
        Duration lease = Duration.ofMillis(500);
        try (CapturedLog log = CapturedLog.of(IdempotencyEngine.class)) {
            store.claimAnswer = () -> new ClaimResult.Claimed("token-1");
            IdempotencyEngine.Execution execution =
                    ((Proceed) engine.start(KEY, HASH, IdempotencyMode.INTENT_FIRST, lease)).execution();
            long started = System.nanoTime();
            assertThatIllegalStateException().isThrownBy(execution::abandonUnrun);

            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (log.records().stream().noneMatch(record -> record.getMessage().contains("lease ran out"))) {
                assertThat(System.nanoTime()).as("the attempts are given up").isLessThan(deadline);
                Thread.sleep(5);
            }
            assertThat(Duration.ofNanos(System.nanoTime() - started)).as("tried until the lease had run out")
                    .isGreaterThanOrEqualTo(lease);
            // pauses of 100, 200, 400 ms: a few attempts, not one after the other
            assertThat(store.settlementAttempts).as("tried again, with a growing pause").hasSizeBetween(2, 5);
            int attempts = store.settlementAttempts.size();

            engine.shutdown();
            assertThat(store.settlementAttempts).as("not tried again at the shutdown").hasSize(attempts);
        } finally {
            engine.shutdown();
        }
    }

    /**
     * The releases and FAILED marks still being tried again when the engine shuts down are tried once more, on the
     * thread that shuts it down, until one fails: the others then run out their lease as stale claims.
     */
    @Test
    void theShutdownTriesTheReleasesStillPendingOnceMoreUntilOneFails() {
        store.settlementsExpected = true;
        Thread caller = Thread.currentThread();
        boolean[] refusedHere = {true};
        // the background attempts never succeed here: only the shutdown's, on this thread, may
        store.settlementRefused = attempt -> Thread.currentThread() != caller || refusedHere[0];
        refused(intentFirst(new ClaimResult.Claimed("token-1"))::abandonUnrun);
        refused(intentFirst(new ClaimResult.Claimed("token-2"))::abandonDefinitely);
        refused(intentFirst(new ClaimResult.Claimed("token-3"))::abandonUnrun);
        int before = attemptsOn(caller);

        refusedHere[0] = false;
        engine.shutdown();

        assertThat(attemptsOn(caller) - before).as("each pending one tried once more at the shutdown").isEqualTo(3);
        assertThat(store.settlements).containsExactlyInAnyOrder("release token-1", "fail token-2", "release token-3");
    }

    @Test
    void theShutdownStopsTryingThePendingReleasesAtTheFirstThatFails() {
        store.settlementsExpected = true;
        store.settlementRefused = attempt -> true;
        Thread caller = Thread.currentThread();
        refused(intentFirst(new ClaimResult.Claimed("token-1"))::abandonUnrun);
        refused(intentFirst(new ClaimResult.Claimed("token-2"))::abandonDefinitely);
        int before = attemptsOn(caller);

        engine.shutdown();
        assertThat(attemptsOn(caller) - before).as("the database does not answer: the others are not tried")
                .isEqualTo(1);

        engine.shutdown();
        assertThat(attemptsOn(caller) - before).as("given up: a second shutdown does not try them").isEqualTo(1);
    }

    /** Ends an execution with a release or FAILED mark the store refuses, which is thrown. */
    private static void refused(Runnable abandon) {
        assertThatIllegalStateException().isThrownBy(abandon::run).withMessageContaining("out of reach");
    }

    private int attemptsOn(Thread thread) {
        synchronized (store.settlementAttempts) {
            return (int) store.settlementAttempts.stream().filter(attempt -> attempt.thread() == thread).count();
        }
    }

    /** Waits until the store has taken exactly {@code expected} (in any order). */
    private void awaitSettlements(String... expected) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (store.settlements.size() < expected.length) {
            assertThat(System.nanoTime()).as("the database took " + List.of(expected)).isLessThan(deadline);
            Thread.sleep(5);
        }
        assertThat(store.settlements).containsExactlyInAnyOrder(expected);
    }

    /**
     * A commit that fails before the answer is written (a listener before the commit throws) still stops the lease's
     * renewal: renewed on, the claim would never run out, and no resolver would ever decide it.
     */
    @Test
    void anIntentFirstCommitThatFailsBeforeTheAnswerIsWrittenStopsRenewingTheLease() throws Exception {
        transactions.beforeCommitFailure = new IllegalStateException("a listener before the commit failed");
        store.records = key -> Optional.of(new IdempotencyRecord(key, RecordStatus.PROCESSING, HASH, "token-1", null,
                Instant.EPOCH, Instant.EPOCH, Instant.EPOCH, false));
        try {
            IdempotencyEngine.Execution execution = intentFirst(new ClaimResult.Claimed("token-1"));

            assertThatExceptionOfType(CommitFailedException.class).isThrownBy(() -> execution.finish(CREATED));

            assertThat(store.completions).isEmpty();
            java.lang.reflect.Field renewals = IdempotencyEngine.class.getDeclaredField("renewals");
            renewals.setAccessible(true);
            assertThat(((java.util.concurrent.ThreadPoolExecutor) renewals.get(engine)).getQueue()).isEmpty();
        } finally {
            engine.shutdown();
        }
    }

    /**
     * The engine's own threads start when a request first needs them (here a lease renewal), on that request's
     * thread: they must not inherit its inheritable thread-locals — Spring Security's context in
     * MODE_INHERITABLETHREADLOCAL, say — which they would keep, and show to all the work they do, for as long as the
     * process lives.
     */
    @Test
    void theRenewalThreadsInheritNothingFromTheRequestThatStartedThem() throws Exception {
        InheritableThreadLocal<String> requestState = new InheritableThreadLocal<>();
        List<String> seenByRenewals = Collections.synchronizedList(new ArrayList<>());
        store.renewals = Collections.synchronizedList(new ArrayList<>() {
            @Override
            public boolean add(String token) {
                seenByRenewals.add(String.valueOf(requestState.get()));
                return super.add(token);
            }
        });
        store.claimAnswer = () -> new ClaimResult.Claimed("token-1");
        requestState.set("alice's authentication");
        try {
            Proceed proceed = (Proceed) engine.start(KEY, HASH, IdempotencyMode.INTENT_FIRST, Duration.ofMillis(30));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
            while (seenByRenewals.isEmpty()) {
                assertThat(System.nanoTime() - deadline).as("the lease was renewed").isNegative();
                Thread.sleep(5);
            }
            assertThat(proceed.execution().finish(CREATED)).isEqualTo(Outcome.STORED);
        } finally {
            requestState.remove();
            engine.shutdown();
        }

        assertThat(seenByRenewals).as("what the renewal threads inherited from the request").containsOnly("null");
    }

    // ---- stale intent-first claims ----

    @Test
    void aRetryThatFindsItsClaimStaleTakesItOverAndReplaysTheAnswerTheResolverFound() {
        List<StaleClaimResolver.StaleClaim> asked = Collections.synchronizedList(new ArrayList<>());
        IdempotencyEngine resolving = resolvingWith(claim -> {
            asked.add(claim);
            return StaleClaimResolver.Resolution.complete(CREATED);
        });
        store.claimAnswer = () -> stale(HASH);
        store.takeOverAnswer = expired -> Optional.of("token-2");
        try {
            assertThat(resolving.start(KEY, HASH, IdempotencyMode.INTENT_FIRST, Duration.ofHours(1)))
                    .isEqualTo(new Replay(CREATED));

            assertThat(store.takeOvers).containsExactly("stale-token for PT1H");
            assertThat(asked).singleElement().satisfies(claim -> {
                assertThat(claim.key()).isEqualTo(KEY);
                assertThat(claim.requestHash()).isEqualTo(HASH);
                assertThat(claim.downstreamKey()).isEqualTo(new DownstreamKeys("secret").derive(KEY));
                assertThat(claim.lockedUntil()).isEqualTo(((ClaimResult.Existing) stale(HASH)).record().lockedUntil());
                assertThat(claim.retryWaiting()).isTrue();
            });
            assertThat(store.completions).containsExactly(new Completion(KEY, "token-2", CREATED));
        } finally {
            resolving.shutdown();
        }
    }

    /**
     * The resolver's answer is not the retry's to replay when the claim's token no longer records it (the retry's lease
     * ran out while the resolver was asked, and another took the claim over): the new holder's outcome stands.
     */
    @Test
    void aResolverAnswerTheTokenNoLongerRecordsIsNotReplayed() {
        StoredResponse theirs = new StoredResponse(200, List.of(), "theirs".getBytes(UTF_8));
        IdempotencyEngine resolving = resolvingWith(claim -> StaleClaimResolver.Resolution.complete(CREATED));
        store.claimAnswer = () -> store.claims.size() == 1 ? stale(HASH) : existing(RecordStatus.SUCCEEDED, HASH, theirs);
        store.takeOverAnswer = expired -> Optional.of("token-2");
        store.completeAnswer = false;
        try {
            assertThat(resolving.start(KEY, HASH, IdempotencyMode.INTENT_FIRST, Duration.ofHours(1)))
                    .isEqualTo(new Replay(theirs));
        } finally {
            resolving.shutdown();
        }
    }

    /**
     * A retry that finds a stale claim ({@code resolving}'s resolver decides it), takes it over as token-2, and claims
     * the key again as token-3 once the claim is marked FAILED.
     */
    private Start retryOfAStaleClaimTakenOverAndMarkedFailed(IdempotencyEngine resolving) {
        store.claimAnswer = () -> store.claims.size() == 1 ? stale(HASH) : new ClaimResult.Claimed("token-3", true);
        store.takeOverAnswer = expired -> Optional.of("token-2");
        store.settlementsExpected = true;
        return resolving.start(KEY, HASH, IdempotencyMode.INTENT_FIRST, Duration.ofHours(1));
    }

    /** Marked FAILED by the resolver, the claim is claimed again at once by its retry, which keeps it from release. */
    @Test
    void aStaleClaimTheResolverFailsIsMarkedFailedAndItsRetryRunsUnderTheKey() {
        IdempotencyEngine resolving = resolvingWith(claim -> StaleClaimResolver.Resolution.fail());
        try {
            Start start = retryOfAStaleClaimTakenOverAndMarkedFailed(resolving);

            assertThat(start).isInstanceOf(Proceed.class);
            assertThat(store.settlements).containsExactly("fail token-2");
            ((Proceed) start).execution().abandonUnrun();
            assertThat(store.settlements).containsExactly("fail token-2", "fail token-3");
        } finally {
            resolving.shutdown();
        }
    }

    /**
     * A resolver may take longer to decide than the retry would wait (it asks a payment provider): once it has marked
     * the claim FAILED, the retry claims the key it freed, rather than answer "in progress" for a key nobody holds.
     */
    @Test
    void aStaleClaimTheResolverFailsAfterTheRetrysWaitIsClaimedAgainByItsRetry() {
        IdempotencyEngine resolving = resolvingWith(claim -> {
            try {
                Thread.sleep(MAX_WAIT.toMillis() + 100); // decides after the wait of the retry that asked has run out
            } catch (InterruptedException e) {
                throw new IllegalStateException(e);
            }
            return StaleClaimResolver.Resolution.fail();
        });
        try {
            Start start = retryOfAStaleClaimTakenOverAndMarkedFailed(resolving);

            assertThat(start).isInstanceOf(Proceed.class);
            assertThat(store.settlements).containsExactly("fail token-2");
            assertThat(store.claims).hasSize(2);
            ((Proceed) start).execution().abandonUnrun();
        } finally {
            resolving.shutdown();
        }
    }

    @Test
    void aStaleClaimTheResolverHasRerunRunsItsRequestUnderTheClaimTakenOver() {
        IdempotencyEngine resolving = resolvingWith(StaleClaimResolver.RERUN);
        store.claimAnswer = () -> stale(HASH);
        store.takeOverAnswer = expired -> Optional.of("token-2");
        store.settlementsExpected = true;
        store.renewals = Collections.synchronizedList(new ArrayList<>());
        try {
            Start start = resolving.start(KEY, HASH, IdempotencyMode.INTENT_FIRST, Duration.ofHours(1));

            assertThat(start).isInstanceOf(Proceed.class);
            assertThat(store.renewals).as("the claim is confirmed still the retry's before the request runs")
                    .containsExactly("token-2");
            assertThat(((Proceed) start).execution().finish(CREATED)).isEqualTo(Outcome.STORED);
            assertThat(store.completions).containsExactly(new Completion(KEY, "token-2", CREATED));
            assertThat(store.claims).hasSize(1);
            assertThat(store.settlements).isEmpty();
        } finally {
            resolving.shutdown();
        }
    }

    /**
     * The renewal before a rerun's work may take a while (its commit held up on the server): the lease it wrote counts
     * from its statement, so the next renewal comes a third of the lease after that, not a third of it after the
     * renewal returned, by which time the lease could have run out and another retry taken the claim over.
     */
    @Test
    void aRerunWhoseRenewalTookAThirdOfTheLeaseIsRenewedAgainAtOnce() throws InterruptedException {
        IdempotencyEngine resolving = resolvingWith(StaleClaimResolver.RERUN);
        store.claimAnswer = () -> stale(HASH);
        store.takeOverAnswer = expired -> Optional.of("token-2");
        store.settlementsExpected = true;
        store.renewals = Collections.synchronizedList(new ArrayList<>());
        Duration lease = Duration.ofSeconds(6);
        store.firstRenewalMillis = lease.toMillis() / 3 + 100;
        try {
            Start start = resolving.start(KEY, HASH, IdempotencyMode.INTENT_FIRST, lease);

            assertThat(start).isInstanceOf(Proceed.class);
            long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(lease.toMillis() / 6);
            while (store.renewals.size() < 2 && System.nanoTime() - deadline < 0) {
                Thread.sleep(5);
            }
            assertThat(store.renewals).as("renewed again well before a third of the lease after the slow renewal")
                    .containsExactly("token-2", "token-2");
            ((Proceed) start).execution().abandonUnrun();
        } finally {
            resolving.shutdown();
        }
    }

    @Test
    void aStaleClaimOfAnotherRequestIsAMismatchAndIsLeftAlone() {
        IdempotencyEngine resolving = resolvingWith(claim -> {
            throw new AssertionError("asked about another request's claim");
        });
        store.claimAnswer = () -> stale(OTHER_HASH);
        try {
            assertThat(resolving.start(KEY, HASH, IdempotencyMode.INTENT_FIRST, Duration.ofHours(1)))
                    .isEqualTo(new Mismatch());
            assertThat(transactions.only().rollbacks).as("the claim's transaction does not stay open").isEqualTo(1);
        } finally {
            resolving.shutdown();
        }
    }

    @Test
    void aStaleClaimSomebodyElseTookOverIsWaitedForAndItsAnswerReplayed() {
        IdempotencyEngine resolving = resolvingWith(claim -> {
            throw new AssertionError("asked though another took the claim over");
        });
        store.claimAnswer = () -> store.claims.size() == 1 ? stale(HASH) : existing(RecordStatus.SUCCEEDED, HASH, CREATED);
        store.takeOverAnswer = expired -> Optional.empty();
        try {
            assertThat(resolving.start(KEY, HASH, IdempotencyMode.INTENT_FIRST, Duration.ofHours(1)))
                    .isEqualTo(new Replay(CREATED));
            assertThat(store.claims).hasSize(2);
        } finally {
            resolving.shutdown();
        }
    }

    /**
     * A resolver's answer that says nothing final — none, a status the policy does not store, a body above the cap — is
     * refused: nothing is recorded, and the claim stays PROCESSING for a later resolution.
     */
    @Test
    void aResolverAnswerThatDecidesNothingIsRefusedAndNothingIsRecorded() {
        store.claimAnswer = () -> stale(HASH);
        store.takeOverAnswer = expired -> Optional.of("token-2");
        // each with the type a message listener tells from its own mistakes by (side-effects.md): redeliver later
        Map<StaleClaimResolver, Class<? extends RuntimeException>> undecided = new LinkedHashMap<>();
        undecided.put(claim -> null, StaleClaimUndecidedException.class);
        undecided.put(claim -> StaleClaimResolver.Resolution.complete(new StoredResponse(503, List.of(), null)),
                StaleClaimUndecidedException.class);
        undecided.put(claim -> StaleClaimResolver.Resolution.complete(new StoredResponse(200, List.of(), new byte[5])),
                StoredBodyTooLargeException.class);
        undecided.forEach((resolver, refusal) -> {
            IdempotencyEngine resolving = new IdempotencyEngine(store, transactions, StoragePolicy.DEFAULT, RETENTION,
                    MAX_WAIT, resolver, new DownstreamKeys("secret"), ReplayCache.NONE, 4);
            try {
                assertThatThrownBy(() -> resolving.start(KEY, HASH, IdempotencyMode.INTENT_FIRST,
                        Duration.ofHours(1))).isInstanceOf(refusal);
            } finally {
                resolving.shutdown();
            }
        });
        // accepted at the cap, with a status the policy stores
        IdempotencyEngine resolving = new IdempotencyEngine(store, transactions, StoragePolicy.DEFAULT, RETENTION,
                MAX_WAIT, claim -> StaleClaimResolver.Resolution.complete(new StoredResponse(200, List.of(),
                new byte[4])), new DownstreamKeys("secret"), ReplayCache.NONE, 4);
        try {
            assertThat(resolving.start(KEY, HASH, IdempotencyMode.INTENT_FIRST, Duration.ofHours(1)))
                    .isInstanceOf(Replay.class);
        } finally {
            resolving.shutdown();
        }
        assertThat(store.completions).hasSize(1);
    }

    /**
     * What the resolver is told of a stale claim is made before the claim is taken over: should that fail (deriving
     * its downstream key with the library's default secret logs a warning, whose handler may throw), the claim is
     * left as it was, for any retry to resolve at once — not taken over by nobody, with its lease renewed for ever.
     */
    @Test
    void aStaleClaimTheResolverCannotBeToldOfIsNeitherTakenOverNorHeld() throws Exception {
        store.claimAnswer = () -> stale(HASH);
        store.takeOverAnswer = expired -> Optional.of("token-2");
        IdempotencyEngine resolving = new IdempotencyEngine(store, transactions, StoragePolicy.DEFAULT, RETENTION,
                MAX_WAIT); // the default secret, of which the first downstream key derived warns
        IllegalStateException logFailed = new IllegalStateException("the log's disk is full");
        java.util.logging.Logger logger = java.util.logging.Logger.getLogger(DownstreamKeys.class.getName());
        java.util.logging.Handler failing = failingWith(logFailed);
        logger.addHandler(failing);
        try {
            assertThatThrownBy(() -> resolving.start(KEY, HASH, IdempotencyMode.INTENT_FIRST, Duration.ofHours(1)))
                    .isSameAs(logFailed);

            java.lang.reflect.Field renewals = IdempotencyEngine.class.getDeclaredField("renewals");
            renewals.setAccessible(true);
            assertThat(((java.util.concurrent.ThreadPoolExecutor) renewals.get(resolving)).getQueue())
                    .as("the leases still renewed").isEmpty();
            assertThat(store.takeOvers).as("the claims taken over").isEmpty();
        } finally {
            logger.removeHandler(failing);
            resolving.shutdown();
        }
    }

    /**
     * A sweep takes each stale claim over before it asks the resolver, and records the decision under its own token:
     * "complete" stores the answer, "fail" and "rerun" mark the claim FAILED. A claim another sweeper or retry took over
     * is left to it, and a resolver that fails keeps the other claims from nothing.
     */
    @Test
    void aSweepResolvesEachStaleClaimItTakesOverAndLeavesTheOthers() {
        store.expiredLeases = List.of(staleRecord("complete"), staleRecord("taken"), staleRecord("fail"),
                staleRecord("throw"), staleRecord("rerun"));
        store.takeOverAnswer = expired -> expired.equals("stale-taken") ? Optional.empty()
                : Optional.of(expired.replace("stale", "swept"));
        store.settlementsExpected = true;
        RuntimeException unreachable = new RuntimeException("the gateway is unreachable");
        List<StaleClaimResolver.StaleClaim> asked = Collections.synchronizedList(new ArrayList<>());
        StaleClaimResolver resolver = claim -> {
            asked.add(claim);
            return switch (claim.key().key()) {
                case "complete" -> StaleClaimResolver.Resolution.complete(CREATED);
                case "fail" -> StaleClaimResolver.Resolution.fail();
                case "rerun" -> StaleClaimResolver.Resolution.rerun();
                default -> throw unreachable;
            };
        };
        List<String> progress = new ArrayList<>();

        StaleClaimSweeper.Sweep sweep = new StaleClaimSweeper(store, resolver, new DownstreamKeys("secret"),
                Duration.ofHours(1), 10).sweep(new StaleClaimSweeper.Progress() {
                    @Override
                    public void resolved(ScopedKey key, boolean completed) {
                        progress.add(key.key() + (completed ? " completed" : " failed"));
                    }

                    @Override
                    public void unresolved(StaleClaimSweeper.Unresolved unresolved) {
                        progress.add(unresolved.key().key() + " unresolved");
                    }
                });

        assertThat(sweep.found()).isEqualTo(5);
        assertThat(sweep.completed()).isEqualTo(1);
        assertThat(sweep.failed()).isEqualTo(2);
        assertThat(sweep.resolved()).isEqualTo(3);
        assertThat(sweep.unresolved()).singleElement().satisfies(unresolved -> {
            assertThat(unresolved.key().key()).isEqualTo("throw");
            assertThat(unresolved.error()).isSameAs(unreachable);
        });
        assertThat(store.completions).containsExactly(
                new Completion(staleRecord("complete").key(), "swept-complete", CREATED));
        assertThat(store.settlements).containsExactly("fail swept-fail", "fail swept-rerun");
        assertThat(progress).containsExactly("complete completed", "fail failed", "throw unresolved", "rerun failed");
        assertThat(asked).extracting(claim -> claim.key().key()).containsExactly("complete", "fail", "throw", "rerun");
        assertThat(asked).allSatisfy(claim -> assertThat(claim.retryWaiting()).isFalse());
    }

    /**
     * A sweep that cannot tell the resolver of a stale claim (deriving its downstream key with the library's default
     * secret logs a warning, whose handler may throw) reports it unresolved, as when the resolver fails, and holds
     * it no longer: renewed while the sweep resolves the other claims, it would be out of everyone's reach for as
     * long as their resolvers take.
     */
    @Test
    void aSweepThatCannotTellTheResolverOfAClaimHoldsItNoLonger() throws Exception {
        store.expiredLeases = List.of(staleRecord("untold"), staleRecord("told"));
        store.takeOverAnswer = expired -> Optional.of(expired.replace("stale", "swept"));
        store.settlementsExpected = true;
        store.renewals = Collections.synchronizedList(new ArrayList<>());
        IllegalStateException logFailed = new IllegalStateException("the log's disk is full");
        java.util.logging.Logger logger = java.util.logging.Logger.getLogger(DownstreamKeys.class.getName());
        java.util.logging.Handler failing = failingWith(logFailed);
        StaleClaimResolver resolver = claim -> {
            // long enough for every lease this sweep holds to be renewed: on its one renewal thread, the lease of
            // the claim taken over first is renewed before the second renewal of this one
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (store.renewals.stream().filter("swept-told"::equals).count() < 2) {
                if (System.nanoTime() - deadline > 0) {
                    throw new AssertionError("the lease of the claim asked about was not renewed");
                }
                java.util.concurrent.locks.LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(1));
            }
            return StaleClaimResolver.Resolution.fail();
        };
        logger.addHandler(failing);
        StaleClaimSweeper.Sweep sweep;
        try {
            // the default secret, of which the first downstream key derived warns; renewed every 10 ms
            sweep = new StaleClaimSweeper(store, resolver,
                    new DownstreamKeys(IdempotencyEngine.DEFAULT_DOWNSTREAM_SECRET), Duration.ofMillis(30), 10).sweep();
        } finally {
            logger.removeHandler(failing);
        }

        assertThat(sweep.unresolved()).singleElement().satisfies(unresolved -> {
            assertThat(unresolved.key().key()).isEqualTo("untold");
            assertThat(unresolved.error()).isSameAs(logFailed);
        });
        assertThat(sweep.failed()).isEqualTo(1);
        assertThat(store.renewals).as("the leases renewed").doesNotContain("swept-untold");
    }

    /** A decision the claim's token no longer records (the claim was taken over meanwhile) is not counted as made. */
    @Test
    void aSweepDecisionTheTokenNoLongerRecordsIsReportedSuperseded() {
        store.expiredLeases = List.of(staleRecord("complete"));
        store.takeOverAnswer = expired -> Optional.of("swept");
        store.completeAnswer = false;
        List<String> superseded = new ArrayList<>();

        StaleClaimSweeper.Sweep sweep = new StaleClaimSweeper(store,
                claim -> StaleClaimResolver.Resolution.complete(CREATED), new DownstreamKeys("secret"),
                Duration.ofHours(1), 10).sweep(new StaleClaimSweeper.Progress() {
                    @Override
                    public void superseded(ScopedKey key, boolean completed) {
                        superseded.add(key.key() + (completed ? " completed" : " failed"));
                    }
                });

        assertThat(sweep.found()).isEqualTo(1);
        assertThat(sweep.resolved()).isZero();
        assertThat(superseded).containsExactly("complete completed");
    }

    private IdempotencyEngine resolvingWith(StaleClaimResolver resolver) {
        return new IdempotencyEngine(store, transactions, StoragePolicy.DEFAULT, RETENTION, MAX_WAIT, resolver,
                new DownstreamKeys("secret"));
    }

    /** The claim of {@code KEY} for {@code hash}, PROCESSING with its lease run out. */
    private static ClaimResult.Existing stale(String hash) {
        Instant now = Instant.parse("2025-01-01T00:00:00Z");
        return new ClaimResult.Existing(new IdempotencyRecord(KEY, RecordStatus.PROCESSING, hash, "stale-token", null,
                now, now.plus(RETENTION), now.plusSeconds(30), true));
    }

    /** A stale claim of the key {@code key}, held by the token {@code "stale-" + key}. */
    private static IdempotencyRecord staleRecord(String key) {
        Instant now = Instant.parse("2025-01-01T00:00:00Z");
        return new IdempotencyRecord(new ScopedKey("", "charges", key), RecordStatus.PROCESSING, HASH, "stale-" + key,
                null, now, now.plus(RETENTION), now.plusSeconds(30), true);
    }

    // ---- the template ----

    /**
     * The template's input is what tells one piece of work from another under a key: the same input gets the stored
     * result without the work running again, other input is refused.
     */
    @Test
    void aTemplateStoresTheResultOfItsWorkReplaysItForTheSameInputAndRefusesOtherInput() throws Exception {
        store.claimAnswer = () -> new ClaimResult.Claimed("token-1");
        IdempotencyTemplate template = new IdempotencyTemplate(engine);
        byte[] charged = "charged".getBytes(UTF_8);

        IdempotencyTemplate.Result first = template.execute(KEY, utf8("{\"amount\":100}"), charged::clone);

        assertThat(first.value()).isEqualTo(charged);
        assertThat(first.replayed()).isFalse();
        StoredResponse stored = new StoredResponse(200, List.of(), charged);
        assertThat(store.completions).containsExactly(new Completion(KEY, "token-1", stored));

        String fingerprint = store.claims.get(0).requestHash();
        store.claimAnswer = () -> existing(RecordStatus.SUCCEEDED, fingerprint, stored);
        IdempotencyTemplate.Result again = template.execute(KEY, utf8("{\"amount\":100}"), () -> {
            throw new AssertionError("the work ran again");
        });
        assertThat(again.value()).isEqualTo(charged);
        assertThat(again.replayed()).isTrue();
        assertThatExceptionOfType(IdempotencyTemplate.KeyReusedException.class)
                .isThrownBy(() -> template.execute(KEY, utf8("{\"amount\":200}"), () -> {
                    throw new AssertionError("the work ran for other input");
                }));
        assertThat(store.claims.get(2).requestHash()).isNotEqualTo(fingerprint);
    }

    @Test
    void aTemplateWithoutInputIsFingerprintedAsEmptyInput() throws Exception {
        store.claimAnswer = () -> new ClaimResult.Claimed("token-1");
        IdempotencyTemplate template = new IdempotencyTemplate(engine);

        template.execute(KEY, null, () -> new byte[0]);
        template.execute(KEY, new byte[0], () -> null);

        assertThat(store.claims.get(0).requestHash()).isEqualTo(store.claims.get(1).requestHash());
        assertThat(store.completions.get(1).response().body()).isEmpty();
    }

    @Test
    void aTemplateResultAboveTheCapIsRolledBackAndOneOfTheCapIsStored() throws Exception {
        IdempotencyEngine capped = new IdempotencyEngine(store, transactions, StoragePolicy.DEFAULT, RETENTION,
                MAX_WAIT, StaleClaimResolver.RERUN, new DownstreamKeys("secret"), ReplayCache.NONE, 4);
        store.claimAnswer = () -> new ClaimResult.Claimed("token-1");
        IdempotencyTemplate template = new IdempotencyTemplate(capped);

        assertThat(template.execute(KEY, new byte[0], () -> utf8("1234")).value()).isEqualTo(utf8("1234"));
        assertThatExceptionOfType(StoredBodyTooLargeException.class)
                .isThrownBy(() -> template.execute(KEY, new byte[0], () -> utf8("12345")));

        assertThat(store.completions).hasSize(1);
        assertThat(transactions.begun.get(1).rollbacks).isEqualTo(1);
        assertThat(transactions.begun.get(1).commits).isZero();
        capped.shutdown();
    }

    /**
     * A result the work returned is copied to be stored, and a large one may find no memory for its copy. Thrown
     * there, the error must still end the execution as a failure of the work does: left running, its transaction
     * would stay open on the thread with the claim (every redelivery told "in progress" for ever, every later call on
     * the thread refused) and an intent-first claim's lease would be renewed for ever. Run in a JVM of its own with a
     * small heap, which the work's result nearly fills.
     */
    @Test
    void aTemplateWhoseResultFindsNoMemoryForItsCopyLeavesNothingRunning() throws Exception {
        java.nio.file.Path output = java.nio.file.Files.createTempFile("template-out-of-memory", ".txt");
        try {
            Process probe = new ProcessBuilder(
                    java.nio.file.Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                    "-Xmx64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                    "-cp", System.getProperty("java.class.path"), ResultWithoutMemoryForItsCopy.class.getName())
                    .redirectOutput(output.toFile()).redirectError(ProcessBuilder.Redirect.INHERIT).start();
            if (!probe.waitFor(2, TimeUnit.MINUTES)) {
                probe.destroyForcibly();
                throw new AssertionError("the probe did not end in time");
            }
            List<String> lines = java.nio.file.Files.readAllLines(output, UTF_8);
            assertThat(probe.exitValue()).as("the probe's exit, after %s", lines).isZero();

            assertThat(lines).containsExactly(
                    "ONE_TRANSACTION: thrown java.lang.OutOfMemoryError",
                    "ONE_TRANSACTION: transactions left open 0",
                    "ONE_TRANSACTION: renewals left 0",
                    "ONE_TRANSACTION: run again on the thread: stored",
                    "INTENT_FIRST: thrown java.lang.OutOfMemoryError",
                    "INTENT_FIRST: transactions left open 0",
                    "INTENT_FIRST: renewals left 0",
                    "INTENT_FIRST: run again on the thread: stored");
        } finally {
            java.nio.file.Files.delete(output);
        }
    }

    /** The JVM of {@link #aTemplateWhoseResultFindsNoMemoryForItsCopyLeavesNothingRunning}: writes what it saw. */
    static final class ResultWithoutMemoryForItsCopy {

        public static void main(String[] args) throws Exception {
            for (IdempotencyMode mode : IdempotencyMode.values()) {
                IdempotencyEngineTest fakes = new IdempotencyEngineTest();
                fakes.store.claimAnswer = () -> new ClaimResult.Claimed("token-" + fakes.store.claims.size());
                // no cap below the result: its copy is what fails
                IdempotencyEngine engine = new IdempotencyEngine(fakes.store, fakes.transactions,
                        StoragePolicy.DEFAULT, RETENTION, MAX_WAIT, StaleClaimResolver.RERUN,
                        new DownstreamKeys("secret"), ReplayCache.NONE, Long.MAX_VALUE);
                IdempotencyTemplate template = new IdempotencyTemplate(engine);
                Duration lease = Duration.ofHours(1); // renewals every 20 minutes: none runs meanwhile
                String thrown = "nothing";
                try {
                    template.execute(KEY, new byte[0], mode, lease, ResultWithoutMemoryForItsCopy::largestArray);
                } catch (Throwable e) {
                    thrown = e.getClass().getName();
                }
                System.out.println(mode + ": thrown " + thrown);
                System.out.println(mode + ": transactions left open "
                        + fakes.transactions.begun.stream().filter(t -> t.commits == 0 && t.rollbacks == 0).count());
                java.lang.reflect.Field renewals = IdempotencyEngine.class.getDeclaredField("renewals");
                renewals.setAccessible(true);
                System.out.println(mode + ": renewals left "
                        + ((java.util.concurrent.ThreadPoolExecutor) renewals.get(engine)).getQueue().size());
                String again;
                try {
                    template.execute(KEY, new byte[0], mode, lease, () -> utf8("done"));
                    again = "stored";
                } catch (Exception e) {
                    again = e.toString();
                }
                System.out.println(mode + ": run again on the thread: " + again);
                engine.shutdown();
            }
        }

        /** The largest array the heap holds: no room is left for a copy of it. */
        private static byte[] largestArray() {
            long size = Math.min(Runtime.getRuntime().maxMemory(), Integer.MAX_VALUE - 8);
            for (; ; size = size * 9 / 10) {
                try {
                    return new byte[(int) size];
                } catch (OutOfMemoryError tooLarge) {
                    // a little smaller
                }
            }
        }
    }

    private static byte[] utf8(String text) {
        return text.getBytes(UTF_8);
    }

    // ---- helpers and fakes ----

    private IdempotencyEngine.Execution proceed(String token) {
        return proceed(engine, token);
    }

    private IdempotencyEngine.Execution proceed(IdempotencyEngine engine, String token) {
        store.claimAnswer = () -> new ClaimResult.Claimed(token);
        Start start = engine.start(KEY, HASH);
        assertThat(start).isInstanceOf(Proceed.class);
        return ((Proceed) start).execution();
    }

    /** Starts an intent-first execution of {@code KEY} whose claim the store answers with {@code claimed}. */
    private IdempotencyEngine.Execution intentFirst(ClaimResult.Claimed claimed) {
        store.claimAnswer = () -> claimed;
        Start start = engine.start(KEY, HASH, IdempotencyMode.INTENT_FIRST, Duration.ofHours(1));
        assertThat(start).isInstanceOf(Proceed.class);
        return ((Proceed) start).execution();
    }

    private static ClaimResult.Existing existing(RecordStatus status, String hash, StoredResponse response) {
        Instant now = Instant.parse("2025-01-01T00:00:00Z");
        return new ClaimResult.Existing(new IdempotencyRecord(
                KEY, status, hash, "their-token", response, now, now.plus(RETENTION), null, false));
    }

    private record Completion(ScopedKey key, String token, StoredResponse response) {
    }

    private record SettlementAttempt(String what, Thread thread) {
    }

    @Test
    void aConnectionLostWhileFinishingDoesNotStrandTheKeyInThisInstance() {
        IdempotencyEngine.Execution execution = proceed("token-1");
        store.completeFailure = new RuntimeException("I/O error: the connection is gone");
        transactions.rollbackFailure = new RuntimeException("rollback failed: the connection is gone");

        assertThatExceptionOfType(RuntimeException.class).isThrownBy(() -> execution.finish(CREATED));

        // the next request with the key asks the database again, instead of waiting for a flight that never lands
        transactions.rollbackFailure = null;
        store.claimAnswer = () -> new ClaimResult.Claimed("token-2");
        assertThat(engine.start(KEY, HASH)).isInstanceOf(Proceed.class);
        assertThat(store.claims).hasSize(2);
    }

    @Test
    void anEndedIntentFirstExecutionLeavesNoRenewalBehindInMemory() throws Exception {
        store.claimAnswer = () -> new ClaimResult.Claimed("token-1");
        Duration lease = Duration.ofHours(1); // renewals every 20 minutes: none runs during the test
        try {
            for (int i = 0; i < 100; i++) {
                ScopedKey key = new ScopedKey("alice", "POST /charges", "k-" + i);
                Proceed proceed = (Proceed) engine.start(key, HASH, IdempotencyMode.INTENT_FIRST, lease);
                if (i % 2 == 0) {
                    proceed.execution().finish(CREATED);
                } else {
                    proceed.execution().abandon();
                }
            }

            // a cancelled renewal that stays queued until its next run keeps its key and token for a third of the
            // lease: at a steady rate of requests, that is memory in proportion to the lease
            java.lang.reflect.Field renewals = IdempotencyEngine.class.getDeclaredField("renewals");
            renewals.setAccessible(true);
            assertThat(((java.util.concurrent.ThreadPoolExecutor) renewals.get(engine)).getQueue()).isEmpty();
        } finally {
            engine.shutdown();
        }
    }

    private final class FakeStore implements IdempotencyStore {
        Supplier<ClaimResult> claimAnswer;
        boolean completeAnswer = true;
        Throwable completeFailure;
        final List<ClaimRequest> claims = Collections.synchronizedList(new ArrayList<>());
        final List<Completion> completions = new ArrayList<>();
        boolean transactionOpenDuringClaim;
        boolean transactionOpenDuringComplete;

        @Override
        public ClaimResult claim(ClaimRequest request) {
            claims.add(request);
            transactionOpenDuringClaim = transactions.hasOpen();
            return claimAnswer.get();
        }

        @Override
        public boolean complete(ScopedKey key, String fencingToken, StoredResponse response) {
            transactionOpenDuringComplete = transactions.hasOpen();
            if (completeFailure != null) {
                return IdempotencyEngineTest.<Boolean, RuntimeException>sneakyThrow(completeFailure);
            }
            completions.add(new Completion(key, fencingToken, response));
            return completeAnswer;
        }

        /** Whether the engine may release or fail intent-first claims; recorded in {@link #settlements}. */
        boolean settlementsExpected;
        /** The releases and FAILED marks the store took ("release token-1", "fail token-2"). */
        final List<String> settlements = Collections.synchronizedList(new ArrayList<>());
        /** Every release and FAILED mark asked for, taken or not, with the thread that asked. */
        final List<SettlementAttempt> settlementAttempts = Collections.synchronizedList(new ArrayList<>());
        /** Whether an attempt ("release token-1") fails, as when the database is out of reach; none by default. */
        volatile java.util.function.Predicate<String> settlementRefused = attempt -> false;

        @Override
        public boolean fail(ScopedKey key, String fencingToken) {
            if (!settlementsExpected) {
                throw new AssertionError("the engine does not call fail");
            }
            return settle("fail " + fencingToken);
        }

        @Override
        public boolean release(ScopedKey key, String fencingToken) {
            if (!settlementsExpected) {
                throw new AssertionError("the engine does not call release");
            }
            return settle("release " + fencingToken);
        }

        private boolean settle(String attempt) {
            settlementAttempts.add(new SettlementAttempt(attempt, Thread.currentThread()));
            if (settlementRefused.test(attempt)) {
                throw new IllegalStateException("the database is out of reach for " + attempt);
            }
            settlements.add(attempt);
            return true;
        }

        /** What {@link #find} reads; by default the engine is not expected to read. */
        java.util.function.Function<ScopedKey, Optional<IdempotencyRecord>> records = key -> {
            throw new AssertionError("the engine does not call find");
        };

        @Override
        public Optional<IdempotencyRecord> find(ScopedKey key) {
            return records.apply(key);
        }

        /** The tokens whose lease was renewed, in order, once renewals are expected; by default none are. */
        List<String> renewals;

        @Override
        public boolean renew(ScopedKey key, String fencingToken, Duration lease) {
            if (renewals == null) {
                throw new AssertionError("one-transaction executions have no lease");
            }
            renewals.add(fencingToken);
            if (renewals.size() == 1 && firstRenewalMillis > 0) {
                try {
                    Thread.sleep(firstRenewalMillis);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            return true;
        }

        /** How long the first renewal takes (its commit held up on the server, say); 0: no time. */
        long firstRenewalMillis;

        /** What {@link #takeOver} answers, by the expired token; by default nothing is taken over. */
        java.util.function.Function<String, Optional<String>> takeOverAnswer;
        final List<String> takeOvers = new ArrayList<>();
        /** What {@link #findExpiredLeases} finds; by default nothing sweeps. */
        List<IdempotencyRecord> expiredLeases;

        @Override
        public Optional<String> takeOver(ScopedKey key, String expiredToken, Duration lease) {
            if (takeOverAnswer == null) {
                throw new AssertionError("one-transaction executions have no lease");
            }
            takeOvers.add(expiredToken + " for " + lease);
            return takeOverAnswer.apply(expiredToken);
        }

        @Override
        public List<IdempotencyRecord> findExpiredLeases(int limit) {
            if (expiredLeases == null) {
                throw new AssertionError("the engine does not sweep");
            }
            return expiredLeases;
        }

        @Override
        public int deleteExpired(int limit) {
            throw new AssertionError("the engine does not call deleteExpired");
        }
    }

    private static final class FakeTransactions implements Transactions {
        final List<RecordingTransaction> begun = Collections.synchronizedList(new ArrayList<>());
        RuntimeException commitFailure;
        /** Thrown by a commit as it is, after the database committed (a JPA provider's post-commit listener). */
        Error commitError;
        RuntimeException rollbackFailure;
        RuntimeException flushFailure;
        /** Thrown by a commit before it runs what the engine writes last (a listener before the commit failed). */
        RuntimeException beforeCommitFailure;
        /** Thrown by {@link #checkNoneOpen()}: a transaction is open on the thread. */
        RuntimeException openOnThread;

        @Override
        public void checkNoneOpen() {
            if (openOnThread != null) {
                throw openOnThread;
            }
        }

        /** What {@link #mayReadApart()} answers. */
        boolean readsApart = true;

        @Override
        public boolean mayReadApart() {
            return readsApart;
        }

        @Override
        public Transaction begin() {
            RecordingTransaction transaction = new RecordingTransaction(this);
            begun.add(transaction);
            return transaction;
        }

        RecordingTransaction only() {
            assertThat(begun).hasSize(1);
            return begun.get(0);
        }

        boolean hasOpen() {
            return begun.stream().anyMatch(t -> t.commits == 0 && t.rollbacks == 0);
        }
    }

    private static final class RecordingTransaction implements Transactions.Transaction {
        private final FakeTransactions owner;
        int commits;
        int rollbacks;
        int flushes;

        RecordingTransaction(FakeTransactions owner) {
            this.owner = owner;
        }

        @Override
        public void flush() {
            flushes++;
            if (owner.flushFailure != null) {
                throw owner.flushFailure;
            }
        }

        @Override
        public void commit(Runnable last) {
            if (owner.beforeCommitFailure != null) {
                rollbacks++; // as the contract says: a failed commit rolls back
                throw owner.beforeCommitFailure;
            }
            last.run();
            commit();
        }

        @Override
        public void commit() {
            commits++;
            if (owner.commitFailure != null) {
                rollbacks++; // as the contract says: a failed commit rolls back
                throw owner.commitFailure;
            }
            if (owner.commitError != null) {
                throw owner.commitError;
            }
        }

        @Override
        public void rollback() {
            rollbacks++;
            if (owner.rollbackFailure != null) {
                throw owner.rollbackFailure;
            }
        }
    }

    /** A log handler that fails every record with {@code failure}, as a full disk would. */
    private static java.util.logging.Handler failingWith(RuntimeException failure) {
        return new java.util.logging.Handler() {
            @Override
            public void publish(java.util.logging.LogRecord record) {
                throw failure;
            }

            @Override
            public void flush() {
            }

            @Override
            public void close() {
            }
        };
    }
}
