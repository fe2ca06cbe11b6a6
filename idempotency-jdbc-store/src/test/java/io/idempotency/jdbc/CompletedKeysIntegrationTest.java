package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.DownstreamKeys;
import io.idempotency.core.ExpiredRecordCleaner;
import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.IdempotencyTemplate;
import io.idempotency.core.IdempotencyRecord;
import io.idempotency.core.ReplayCache;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StoragePolicy;
import io.idempotency.core.StoredResponse;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.Async;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.transaction.TransactionDefinition;
import org.springframework.transaction.support.TransactionTemplate;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Requests an instance remembers completed, without keeping their answers in memory, are answered from one read of
 * their record, outside any transaction, instead of a claim and its rollback — and only when that record is the
 * request's own completed one: a record removed, or its key used again by another request since, is judged by the
 * claim, as on an instance that never saw the key.
 */
class CompletedKeysIntegrationTest {

    private static final String FIRST = "1".repeat(64);
    private static final String SECOND = "2".repeat(64);
    /** A TTL that has passed by the time the cleanup runs. */
    private static final Duration SHORT_TTL = Duration.ofMillis(1);

    /** The PostgreSQL store, counting the claims and the reads it is asked for. */
    private static final class CountingStore extends PostgresIdempotencyStore {
        final AtomicInteger claims = new AtomicInteger();
        final AtomicInteger reads = new AtomicInteger();
        /** The server process of the last claim's connection. */
        volatile int claimingPid;
        /** How long each read waits before it reads, so that requests meant to wait for it arrive meanwhile. */
        volatile long readPauseMillis;

        private final HikariDataSource pool;

        CountingStore(HikariDataSource pool) {
            super(pool, "idempotency_keys");
            this.pool = pool;
        }

        @Override
        public ClaimResult claim(ClaimRequest request) {
            claims.incrementAndGet();
            claimingPid = new JdbcTemplate(pool).queryForObject("SELECT pg_backend_pid()", Integer.class);
            return super.claim(request);
        }

        @Override
        public Optional<IdempotencyRecord> find(ScopedKey key) {
            reads.incrementAndGet();
            try {
                Thread.sleep(readPauseMillis);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            return super.find(key);
        }
    }

    private HikariDataSource poolA;
    private HikariDataSource poolB;
    private CountingStore storeA;
    private IdempotencyEngine instanceA;
    private IdempotencyEngine instanceB;
    private ExpiredRecordCleaner cleaner;

    @BeforeEach
    void twoInstances() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        poolA = database.dataSource(4);
        poolB = database.dataSource(2);
        new IdempotencySchemaMigrator(poolA, "idempotency_keys").migrate();
        storeA = new CountingStore(poolA);
        instanceA = engine(storeA, poolA);
        instanceB = engine(new PostgresIdempotencyStore(poolB, "idempotency_keys"), poolB);
        cleaner = new ExpiredRecordCleaner(new PostgresIdempotencyStore(poolB, "idempotency_keys"), 100);
    }

    @AfterEach
    void stop() {
        instanceA.shutdown();
        instanceB.shutdown();
        poolA.close();
        poolB.close();
    }

    /**
     * An engine that keeps no answer in memory but remembers which requests completed. Its in-flight wait is long: no
     * test here means to run it out, and one holds a read for a while that fifteen requests wait for.
     */
    private static IdempotencyEngine engine(PostgresIdempotencyStore store, HikariDataSource pool) {
        return new IdempotencyEngine(store, new SpringTransactions(new DataSourceTransactionManager(pool)),
                StoragePolicy.DEFAULT, SHORT_TTL, Duration.ofSeconds(10), StaleClaimResolver.RERUN,
                new DownstreamKeys("secret"), new ReplayCache(0, 64 * 1024, 1 << 20, Duration.ofMinutes(10), 1_000));
    }

    private static StoredResponse answer(String text) {
        return new StoredResponse(201, List.of(), text.getBytes(StandardCharsets.UTF_8));
    }

    private static ScopedKey newKey() {
        return new ScopedKey("alice", "POST /payments", UUID.randomUUID().toString());
    }

    private void removeExpiredRecords() throws InterruptedException {
        Thread.sleep(20); // past the TTL
        assertThat(cleaner.run().deleted()).isPositive();
    }

    @Test
    void aRequestThisInstanceCompletedIsReplayedFromOneReadWithoutAClaim() {
        ScopedKey key = newKey();
        StoredResponse first = answer("first payment");
        ((IdempotencyEngine.Proceed) instanceA.start(key, FIRST)).execution().finish(first);
        int claims = storeA.claims.get();

        assertThat(instanceA.start(key, FIRST)).isEqualTo(new IdempotencyEngine.Replay(first));
        assertThat(instanceA.start(key, FIRST, IdempotencyMode.INTENT_FIRST, Duration.ofSeconds(5)))
                .as("in either mode").isEqualTo(new IdempotencyEngine.Replay(first));

        assertThat(storeA.claims.get()).as("claims for the replays").isEqualTo(claims);
        assertThat(storeA.reads.get()).isEqualTo(2);
    }

    @Test
    void aRequestOnlyAnotherInstanceCompletedIsJudgedByTheClaim() {
        ScopedKey key = newKey();
        StoredResponse first = answer("first payment");
        ((IdempotencyEngine.Proceed) instanceB.start(key, FIRST)).execution().finish(first);

        assertThat(instanceA.start(key, FIRST)).isEqualTo(new IdempotencyEngine.Replay(first));
        assertThat(storeA.claims.get()).isEqualTo(1);
        assertThat(storeA.reads.get()).as("nothing remembered: no read first").isZero();

        // the claim's replay is remembered too: the next retry takes the read
        assertThat(instanceA.start(key, FIRST)).isEqualTo(new IdempotencyEngine.Replay(first));
        assertThat(storeA.claims.get()).isEqualTo(1);
        assertThat(storeA.reads.get()).isEqualTo(1);
    }

    @Test
    void anotherBodyUnderARememberedKeyIsRefusedByTheClaimWithoutARead() {
        ScopedKey key = newKey();
        ((IdempotencyEngine.Proceed) instanceA.start(key, FIRST)).execution().finish(answer("first payment"));

        assertThat(instanceA.start(key, SECOND)).isEqualTo(new IdempotencyEngine.Mismatch());
        assertThat(storeA.reads.get()).isZero();
    }

    @Test
    void aRememberedRequestWhoseRecordWasRemovedRunsAgainAsOnAnyInstance() throws InterruptedException {
        ScopedKey key = newKey();
        ((IdempotencyEngine.Proceed) instanceA.start(key, FIRST)).execution().finish(answer("first payment"));
        removeExpiredRecords();

        IdempotencyEngine.Start again = instanceA.start(key, FIRST);

        assertThat(again).as("no record: the claim takes the key").isInstanceOf(IdempotencyEngine.Proceed.class);
        StoredResponse rerun = answer("payment made again");
        ((IdempotencyEngine.Proceed) again).execution().finish(rerun);
        assertThat(storeA.reads.get()).as("looked up first").isEqualTo(1);
        assertThat(instanceB.start(key, FIRST)).isEqualTo(new IdempotencyEngine.Replay(rerun));
    }

    @Test
    void aRememberedRequestWhoseKeyAnotherRequestHoldsNowIsRefused() throws Exception {
        ScopedKey key = newKey();
        ((IdempotencyEngine.Proceed) instanceA.start(key, FIRST)).execution().finish(answer("first payment"));
        removeExpiredRecords();

        // the key, free again, is used by another request on B, which completes while A's request waits for it
        IdempotencyEngine.Execution second = ((IdempotencyEngine.Proceed) instanceB.start(key, SECOND)).execution();
        CompletableFuture<IdempotencyEngine.Start> waiting =
                Async.supply(() -> instanceA.start(key, FIRST));
        awaitClaimWaitingOnALock();
        second.finish(answer("second payment"));
        IdempotencyEngine.Start whileHeld = waiting.get();
        IdempotencyEngine.Start afterwards = instanceA.start(key, FIRST);

        assertThat(whileHeld).as("the claim waited for B's, then read its record")
                .isEqualTo(new IdempotencyEngine.Mismatch());
        assertThat(afterwards).isEqualTo(new IdempotencyEngine.Mismatch());
        assertThat(storeA.reads.get()).as("each looked up first, and found another request's record")
                .isGreaterThanOrEqualTo(2);
    }

    /** Until A's claim waits in the database for a lock (B's uncommitted claim of the key). */
    private void awaitClaimWaitingOnALock() throws InterruptedException {
        JdbcTemplate jdbc = new JdbcTemplate(poolB);
        long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
        while (!jdbc.queryForList("SELECT wait_event_type FROM pg_stat_activity WHERE pid = ?", String.class,
                storeA.claimingPid).contains("Lock")) {
            assertThat(System.nanoTime() - deadline).as("A's claim waiting for B's").isNegative();
            Thread.sleep(5);
        }
    }

    @Test
    void concurrentRetriesOfARememberedRequestShareOneRead() throws Exception {
        ScopedKey key = newKey();
        StoredResponse first = answer("first payment");
        ((IdempotencyEngine.Proceed) instanceA.start(key, FIRST)).execution().finish(first);

        storeA.readPauseMillis = 1_500;
        int retries = 16;
        CountDownLatch go = new CountDownLatch(1);
        List<CompletableFuture<IdempotencyEngine.Start>> answers = new ArrayList<>();
        for (int i = 0; i < retries; i++) {
            answers.add(Async.supply(() -> {
                try {
                    go.await();
                } catch (InterruptedException e) {
                    throw new IllegalStateException(e);
                }
                return instanceA.start(key, FIRST);
            }));
        }
        go.countDown();

        for (CompletableFuture<IdempotencyEngine.Start> answer : answers) {
            assertThat(answer.get()).isEqualTo(new IdempotencyEngine.Replay(first));
        }
        assertThat(storeA.claims.get()).as("claims for the retries").isEqualTo(1);
        assertThat(storeA.reads.get()).as("retries in flight together wait for the first one's read, holding no"
                + " connection").isEqualTo(1);
    }

    /**
     * A message redelivered to a listener that calls the template inside a transaction of its own (a
     * {@code @Transactional} method, or the work of another execution) is refused as the docs say — before anything is
     * read or claimed — whether or not this instance remembers the message: a read would run in that transaction,
     * and replay what a claim refuses.
     */
    @Test
    void aRememberedRequestIsStillRefusedInsideAnOpenTransaction() throws Exception {
        IdempotencyTemplate template = new IdempotencyTemplate(instanceA);
        ScopedKey key = new ScopedKey("", "payment-events", UUID.randomUUID().toString());
        byte[] message = "m-1".getBytes(StandardCharsets.UTF_8);
        assertThat(template.execute(key, message, () -> "applied".getBytes(StandardCharsets.UTF_8)).replayed())
                .isFalse();
        int reads = storeA.reads.get();

        assertRefusedInsideATransaction(template, key, message);
        assertThat(storeA.reads.get()).as("nothing read in the open transaction").isEqualTo(reads);
        assertThat(template.execute(key, message, () -> new byte[0]).replayed()).as("outside it").isTrue();
    }

    /** The same with the answer kept in memory: refused before the answer is looked up, as before a claim. */
    @Test
    void aRequestWhoseAnswerIsKeptIsStillRefusedInsideAnOpenTransaction() throws Exception {
        IdempotencyEngine keeping = new IdempotencyEngine(storeA,
                new SpringTransactions(new DataSourceTransactionManager(poolA)), StoragePolicy.DEFAULT, SHORT_TTL,
                Duration.ofSeconds(2), StaleClaimResolver.RERUN, new DownstreamKeys("secret"),
                new ReplayCache(100, 64 * 1024, 1 << 20, Duration.ofMinutes(10)));
        try {
            IdempotencyTemplate template = new IdempotencyTemplate(keeping);
            ScopedKey key = new ScopedKey("", "payment-events", UUID.randomUUID().toString());
            byte[] message = "m-1".getBytes(StandardCharsets.UTF_8);
            template.execute(key, message, () -> "applied".getBytes(StandardCharsets.UTF_8));

            assertRefusedInsideATransaction(template, key, message);
            assertThat(template.execute(key, message, () -> new byte[0]).replayed()).as("outside it").isTrue();
        } finally {
            keeping.shutdown();
        }
    }

    /**
     * A listener method marked {@code @Transactional(propagation = SUPPORTS)} runs with no transaction, so the template
     * serves it; but Spring binds any connection taken there to the method's scope until it returns. A retry it
     * remembers must leave no connection behind once it is answered — as its claim leaves none, whose transaction
     * suspends the scope — or the rest of the listener's work holds one of the pool's connections.
     */
    @Test
    void aReplayInsideATransactionlessScopeLeavesNoConnectionHeld() throws Exception {
        IdempotencyTemplate template = new IdempotencyTemplate(instanceA);
        ScopedKey key = new ScopedKey("", "payment-events", UUID.randomUUID().toString());
        byte[] message = "m-1".getBytes(StandardCharsets.UTF_8);
        template.execute(key, message, () -> "applied".getBytes(StandardCharsets.UTF_8));

        TransactionTemplate supports = new TransactionTemplate(new DataSourceTransactionManager(poolA));
        supports.setPropagationBehavior(TransactionDefinition.PROPAGATION_SUPPORTS);
        int[] heldAfterwards = new int[1];
        IdempotencyTemplate.Result again = supports.execute(status -> {
            try {
                IdempotencyTemplate.Result result = template.execute(key, message, () -> new byte[0]);
                heldAfterwards[0] = poolA.getHikariPoolMXBean().getActiveConnections();
                return result;
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });

        assertThat(again.replayed()).isTrue();
        assertThat(again.value()).isEqualTo("applied".getBytes(StandardCharsets.UTF_8));
        assertThat(heldAfterwards[0]).as("connections held by the listener once its message was answered").isZero();
    }

    /** Sends {@code message} again from inside a transaction, as a {@code @Transactional} listener would. */
    private void assertRefusedInsideATransaction(IdempotencyTemplate template, ScopedKey key, byte[] message) {
        assertThatThrownBy(() -> new TransactionTemplate(new DataSourceTransactionManager(poolA))
                .executeWithoutResult(status -> {
                    try {
                        template.execute(key, message, () -> new byte[0]);
                    } catch (Exception e) {
                        throw new IllegalStateException(e);
                    }
                }))
                .isInstanceOf(IllegalStateException.class).hasMessageContaining("already active on this thread");
    }
}
