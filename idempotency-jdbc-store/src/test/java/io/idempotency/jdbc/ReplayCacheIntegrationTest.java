package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.CommitFailedException;
import io.idempotency.core.DownstreamKeys;
import io.idempotency.core.ExpiredRecordCleaner;
import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyRecord;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.ReplayCache;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StaleClaimSweeper;
import io.idempotency.core.StoragePolicy;
import io.idempotency.core.StoredResponse;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.Async;
import io.idempotency.testkit.Await;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Locale;
import java.util.Optional;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Two application instances on one database, each with its own replay cache, while records are removed by the
 * retention cleanup and their keys used again: what an instance answers from memory must not contradict a record the
 * database holds.
 */
class ReplayCacheIntegrationTest {

    private static final String FIRST = "1".repeat(64);
    private static final String SECOND = "2".repeat(64);
    /** A TTL that has passed by the time the cleanup runs. */
    private static final Duration SHORT_TTL = Duration.ofMillis(1);

    private HikariDataSource poolA;
    private HikariDataSource poolB;
    private IdempotencyEngine instanceA;
    private IdempotencyEngine instanceB;
    private ExpiredRecordCleaner cleaner;

    @BeforeEach
    void twoInstances() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        poolA = database.dataSource(2);
        poolB = database.dataSource(2);
        new IdempotencySchemaMigrator(poolA, "idempotency_keys").migrate();
        instanceA = engine(poolA);
        instanceB = engine(poolB);
        cleaner = new ExpiredRecordCleaner(new PostgresIdempotencyStore(poolB, "idempotency_keys"), 100);
    }

    @AfterEach
    void stop() {
        instanceA.shutdown();
        instanceB.shutdown();
        poolA.close();
        poolB.close();
    }

    private static IdempotencyEngine engine(HikariDataSource pool) {
        return new IdempotencyEngine(new PostgresIdempotencyStore(pool, "idempotency_keys"),
                new SpringTransactions(new DataSourceTransactionManager(pool)), StoragePolicy.DEFAULT, SHORT_TTL,
                Duration.ofSeconds(2), StaleClaimResolver.RERUN, new DownstreamKeys("secret"),
                new ReplayCache(100, 64 * 1024, 1 << 20, Duration.ofMinutes(10)));
    }

    private static StoredResponse answer(String text) {
        return new StoredResponse(201, List.of(), text.getBytes(StandardCharsets.UTF_8));
    }

    private void removeExpiredRecords() throws InterruptedException {
        Thread.sleep(20); // past the TTL
        assertThat(cleaner.run().deleted()).isPositive();
    }

    /**
     * The fingerprint is compared as given, in memory and with the record read back; a text the database does not
     * keep as given (PostgreSQL pads a {@code char(64)}, MariaDB's column is ASCII) would be replayed from memory by
     * the instance that stored it and refused as another request's by every other instance, and by that one too once
     * the answer has left its memory. Only a hex SHA-256, as the library makes, is taken.
     */
    @Test
    void aFingerprintTheDatabaseWouldNotKeepAsGivenIsRefusedBeforeMemoryAndDatabase() {
        ScopedKey key = new ScopedKey("alice", "POST /payments", UUID.randomUUID().toString());
        for (String fingerprint : List.of("abc123", "1".repeat(65), "1".repeat(63) + "\u00e9", "1".repeat(63) + " ")) {
            IdempotencyEngine.Start onA;
            try {
                onA = instanceA.start(key, fingerprint);
            } catch (IllegalArgumentException refused) {
                assertThat(refused).hasMessageContaining("requestHash");
                continue;
            }
            if (onA instanceof IdempotencyEngine.Proceed proceed) {
                proceed.execution().finish(answer("payment"));
            }
            assertThat(List.of(instanceA.start(key, fingerprint), instanceB.start(key, fingerprint)))
                    .as("the same request, on the instance that stored it and on another one: " + fingerprint)
                    .containsOnly(new IdempotencyEngine.Replay(answer("payment")));
        }
    }

    /** A digest is a number: written in upper or lower case, it is one request's fingerprint, not two requests'. */
    @Test
    void aFingerprintInUpperCaseIsTheSameRequestAsInLowerCase() {
        ScopedKey key = new ScopedKey("alice", "POST /payments", UUID.randomUUID().toString());
        String fingerprint = "0123456789abcdef".repeat(4);
        ((IdempotencyEngine.Proceed) instanceA.start(key, fingerprint.toUpperCase(Locale.ROOT))).execution()
                .finish(answer("payment"));
        assertThat(List.of(instanceA.start(key, fingerprint), instanceB.start(key, fingerprint)))
                .as("its retry with the digest in lower case, on the instance that stored it and on another one")
                .containsOnly(new IdempotencyEngine.Replay(answer("payment")));
    }

    @Test
    void aKeyUsedAgainAfterItsRecordWasRemovedIsReplayedNotRefusedByAnInstanceThatCachedTheOldAnswer()
            throws InterruptedException {
        ScopedKey key = new ScopedKey("alice", "POST /payments", UUID.randomUUID().toString());
        StoredResponse first = answer("first payment");
        StoredResponse second = answer("second payment");
        ((IdempotencyEngine.Proceed) instanceA.start(key, FIRST)).execution().finish(first); // cached on A
        removeExpiredRecords();

        // the key is free again: a new request with it runs on B, and its record is in the database
        ((IdempotencyEngine.Proceed) instanceB.start(key, SECOND)).execution().finish(second);

        // its retry reaches A: the record that exists is honoured, as B would
        assertThat(instanceB.start(key, SECOND)).isEqualTo(new IdempotencyEngine.Replay(second));
        assertThat(instanceA.start(key, SECOND)).as("the retry of the request the database holds, on A")
                .isEqualTo(new IdempotencyEngine.Replay(second));
        // and A now knows the record the database holds: the first request is the one refused
        assertThat(instanceA.start(key, FIRST)).isEqualTo(new IdempotencyEngine.Mismatch());
    }

    @Test
    void aKeyUsedAgainAfterItsRecordWasRemovedRunsOnTheInstanceThatCachedTheOldAnswer() throws InterruptedException {
        ScopedKey key = new ScopedKey("alice", "POST /payments", UUID.randomUUID().toString());
        ((IdempotencyEngine.Proceed) instanceA.start(key, FIRST)).execution().finish(answer("first payment"));
        removeExpiredRecords();

        IdempotencyEngine.Start reuse = instanceA.start(key, SECOND);

        assertThat(reuse).as("no record holds the key: the new request runs, as on any other instance")
                .isInstanceOf(IdempotencyEngine.Proceed.class);
        StoredResponse second = answer("second payment");
        ((IdempotencyEngine.Proceed) reuse).execution().finish(second);
        assertThat(instanceA.start(key, SECOND)).isEqualTo(new IdempotencyEngine.Replay(second));
        assertThat(instanceB.start(key, SECOND)).isEqualTo(new IdempotencyEngine.Replay(second));
    }

    /**
     * The instance that cached the old answer claims the key for a new request itself: it has learnt that the old
     * record is gone and that the key is another request's now. The old request, sent again, is judged as on any other
     * instance — it waits for the new request's claim, and is refused 422 once that has committed — not replayed an
     * answer from memory that the database contradicts.
     */
    @Test
    void anInstanceThatClaimedAKeyForANewRequestNoLongerReplaysTheOldAnswerFromMemory() throws Exception {
        ScopedKey key = new ScopedKey("alice", "POST /payments", UUID.randomUUID().toString());
        ScopedKey intentKey = new ScopedKey("alice", "POST /purchases", UUID.randomUUID().toString());
        ((IdempotencyEngine.Proceed) instanceA.start(key, FIRST)).execution().finish(answer("first payment"));
        ((IdempotencyEngine.Proceed) instanceA.start(intentKey, FIRST)).execution().finish(answer("first purchase"));
        removeExpiredRecords();

        IdempotencyEngine.Execution second = ((IdempotencyEngine.Proceed) instanceA.start(key, SECOND)).execution();
        CompletableFuture<IdempotencyEngine.Start> old = Async.supply(() -> instanceA.start(key, FIRST));
        Await.until("the old request waiting in memory to learn whose the key is", Duration.ofSeconds(10),
                () -> Thread.getAllStackTraces().values().stream().anyMatch(stack -> java.util.Arrays.stream(stack)
                        .anyMatch(frame -> frame.getClassName().endsWith("IdempotencyEngine$Flight")
                                && frame.getMethodName().equals("awaitHeld"))));
        assertThat(second.finish(answer("second payment"))) // on the thread its transaction is bound to
                .isEqualTo(IdempotencyEngine.Outcome.STORED);
        assertThat(old.get(10, TimeUnit.SECONDS)).as("the new request holds the key, claimed on this very instance")
                .isEqualTo(new IdempotencyEngine.Mismatch());

        // intent-first: the new request's claim is committed, and stays when the outcome of its work is unknown
        Duration lease = Duration.ofMinutes(1);
        ((IdempotencyEngine.Proceed) instanceA.start(intentKey, SECOND, IdempotencyMode.INTENT_FIRST, lease))
                .execution().abandon();
        assertThat(instanceB.start(intentKey, FIRST, IdempotencyMode.INTENT_FIRST, lease)).as("on B")
                .isEqualTo(new IdempotencyEngine.Mismatch());
        assertThat(instanceA.start(intentKey, FIRST, IdempotencyMode.INTENT_FIRST, lease))
                .as("on A, which made the claim the database holds").isEqualTo(new IdempotencyEngine.Mismatch());
    }

    @Test
    void anAnswerWhoseCommitFailedIsNeitherCachedNorHandedToTheDuplicatesWaitingForIt() throws Exception {
        JdbcTemplate jdbc = new JdbcTemplate(poolA);
        jdbc.execute("CREATE TABLE IF NOT EXISTS charges (payment text,"
                + " CONSTRAINT one_charge UNIQUE (payment) DEFERRABLE INITIALLY DEFERRED)");
        ScopedKey key = new ScopedKey("alice", "POST /payments", UUID.randomUUID().toString());
        IdempotencyEngine.Execution first = ((IdempotencyEngine.Proceed) instanceA.start(key, FIRST)).execution();
        jdbc.update("INSERT INTO charges VALUES (?), (?)", key.key(), key.key()); // refused only at commit
        CompletableFuture<IdempotencyEngine.Start> duplicate = Async.supply(() -> {
            IdempotencyEngine.Start start = instanceA.start(key, FIRST); // waits in memory behind it
            if (start instanceof IdempotencyEngine.Proceed proceed) {
                proceed.execution().abandon(); // on the thread its transaction is bound to
            }
            return start;
        });
        Thread.sleep(100);

        assertThatThrownBy(() -> first.finish(answer("charged"))).isInstanceOf(CommitFailedException.class);

        IdempotencyEngine.Start behind = duplicate.get(10, TimeUnit.SECONDS);
        assertThat(behind).as("nothing was committed: the duplicate runs").isInstanceOf(IdempotencyEngine.Proceed.class);
        IdempotencyEngine.Start retry = instanceA.start(key, FIRST);
        assertThat(retry).as("no answer from memory").isInstanceOf(IdempotencyEngine.Proceed.class);
        ((IdempotencyEngine.Proceed) retry).execution().abandon();
        assertThat(jdbc.queryForObject("SELECT count(*) FROM charges WHERE payment = ?", Long.class, key.key()))
                .isZero();
    }

    @Test
    void anAnswerTheSweeperRecordedForAKeyUsedAgainIsReplayedByAnInstanceThatCachedTheOldOne() throws Exception {
        ScopedKey key = new ScopedKey("alice", "POST /purchases", UUID.randomUUID().toString());
        ((IdempotencyEngine.Proceed) instanceA.start(key, FIRST)).execution().finish(answer("first purchase"));
        removeExpiredRecords();

        // the key is used again on B, intent-first; the outcome of the call to the third party is unknown
        Duration lease = Duration.ofMillis(200);
        ((IdempotencyEngine.Proceed) instanceB.start(key, SECOND, IdempotencyMode.INTENT_FIRST, lease)).execution()
                .abandon();
        Thread.sleep(400); // the lease runs out
        StoredResponse asked = answer("second purchase, as the third party reports it");
        StaleClaimSweeper sweeper = new StaleClaimSweeper(new PostgresIdempotencyStore(poolB, "idempotency_keys"),
                claim -> StaleClaimResolver.Resolution.complete(asked), new DownstreamKeys("secret"), lease, 10);
        assertThat(sweeper.sweep().completed()).isEqualTo(1);

        assertThat(instanceA.start(key, SECOND, IdempotencyMode.INTENT_FIRST, lease))
                .as("the answer the database holds for this request").isEqualTo(new IdempotencyEngine.Replay(asked));
    }
    /**
     * A retry reads its request's completed record, which is then removed and its key claimed by a new request on the
     * same instance, before the retry puts the answer it read into memory. Put that late, the old answer would stand in
     * memory for the key the new request holds, and be replayed to the old request the database now refuses: so the
     * new request only claims once the retry has landed (one request per key at a time on an instance), and its claim
     * takes the old answer out of memory.
     */
    @Test
    void anAnswerReadJustBeforeItsRecordWasRemovedIsNotKeptForAKeyANewRequestClaimedMeanwhile() throws Exception {
        ScopedKey key = new ScopedKey("alice", "POST /payments", UUID.randomUUID().toString());
        CountDownLatch read = new CountDownLatch(1);
        CountDownLatch resume = new CountDownLatch(1);
        PostgresIdempotencyStore pausingAfterRead = new PostgresIdempotencyStore(poolA, "idempotency_keys") {
            @Override
            public Optional<IdempotencyRecord> find(ScopedKey found) {
                Optional<IdempotencyRecord> record = super.find(found);
                if (found.equals(key) && read.getCount() > 0) {
                    read.countDown();
                    try {
                        assertThat(resume.await(30, TimeUnit.SECONDS)).isTrue();
                    } catch (InterruptedException e) {
                        throw new IllegalStateException(e);
                    }
                }
                return record;
            }
        };
        // one answer kept in memory, and the requests completed remembered: a retry whose answer has left memory
        // reads its record
        IdempotencyEngine instance = new IdempotencyEngine(pausingAfterRead,
                new SpringTransactions(new DataSourceTransactionManager(poolA)), StoragePolicy.DEFAULT, SHORT_TTL,
                Duration.ofSeconds(30), StaleClaimResolver.RERUN, new DownstreamKeys("secret"),
                new ReplayCache(1, 64 * 1024, 1 << 20, Duration.ofMinutes(10), 1_000));
        try {
            StoredResponse first = answer("first payment");
            ((IdempotencyEngine.Proceed) instance.start(key, FIRST)).execution().finish(first);
            ScopedKey other = new ScopedKey("alice", "POST /payments", UUID.randomUUID().toString());
            ((IdempotencyEngine.Proceed) instance.start(other, FIRST)).execution().finish(answer("other payment"));

            CompletableFuture<IdempotencyEngine.Start> retry =
                    Async.supply(() -> instance.start(key, FIRST));
            assertThat(read.await(30, TimeUnit.SECONDS)).as("the retry read the record").isTrue();
            removeExpiredRecords();
            CompletableFuture<IdempotencyEngine.Start> newRequest = new CompletableFuture<>();
            Thread newRequestThread = new Thread(() -> {
                try {
                    IdempotencyEngine.Start start = instance.start(key, SECOND);
                    if (start instanceof IdempotencyEngine.Proceed proceed) {
                        proceed.execution().finish(answer("second payment"));
                    }
                    newRequest.complete(start);
                } catch (Throwable e) {
                    newRequest.completeExceptionally(e);
                }
            });
            newRequestThread.start();
            // until the new request waits for the retry, or (were requests with one key not taken one at a time) has
            // claimed the key and completed
            while (newRequestThread.getState() != Thread.State.TIMED_WAITING && !newRequest.isDone()) {
                Thread.onSpinWait();
            }
            resume.countDown();

            assertThat(retry.get(30, TimeUnit.SECONDS)).isEqualTo(new IdempotencyEngine.Replay(first));
            assertThat(newRequest.get(30, TimeUnit.SECONDS)).isInstanceOf(IdempotencyEngine.Proceed.class);
            assertThat(instance.start(key, FIRST)).as("the key is the new request's: the old one is refused")
                    .isEqualTo(new IdempotencyEngine.Mismatch());
            assertThat(instance.start(key, SECOND)).isEqualTo(new IdempotencyEngine.Replay(answer("second payment")));
        } finally {
            resume.countDown();
            instance.shutdown();
        }
    }
}
