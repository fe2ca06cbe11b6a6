package io.idempotency.mariadb;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.CommitFailedException;
import io.idempotency.core.DownstreamKeys;
import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.IdempotencyTemplate;
import io.idempotency.core.RecordStatus;
import io.idempotency.core.ReplayCache;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StaleClaimSweeper;
import io.idempotency.core.StoragePolicy;
import io.idempotency.core.StoredResponse;
import io.idempotency.core.Transactions;
import io.idempotency.jdbc.SpringTransactions;
import io.idempotency.testkit.Async;
import io.idempotency.testkit.Await;
import io.idempotency.testkit.EngineStorm;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIf;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.springframework.dao.DataAccessException;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;

import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.Callable;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The engine on the MariaDB store, on real MariaDB with two pools standing for two instances: storms of duplicates,
 * reuses and failures run each key's effect at most once; a chain of holders that roll back with many claims waiting
 * behind them hands the key on to one claim at a time, with no claim lost to a deadlock; cleanup running through it
 * all deletes only finished, expired records; and stale claims raced by sweepers and retries are resolved once.
 */
@EnabledIf("io.idempotency.mariadb.TestMariaDb#available")
class MariaDbEngineIntegrationTest {

    private static final String RETRIED = "1".repeat(64);
    private static final Duration LEASE = Duration.ofMillis(200);

    /**
     * {@link EngineStorm}, on MariaDB, while cleanup runs back to back: besides the storm's own checks, cleanup
     * deleted the expired finished records only.
     */
    @ParameterizedTest
    @EnumSource(IdempotencyMode.class)
    void aStormOnTwoInstancesWithCleanupRunningLeavesEveryKeyRunOnceOrFree(IdempotencyMode mode) throws Exception {
        TestMariaDb.Database database = TestMariaDb.newDatabase();
        Duration maxWait = Duration.ofMillis(400);
        try (HikariDataSource first = database.dataSource(8); HikariDataSource second = database.dataSource(8)) {
            JdbcTemplate setUp = new JdbcTemplate(first);
            setUp.execute(MariaDbIdempotencyStore.schema("idempotency_keys"));
            setUp.execute("CREATE TABLE effects (idempotency_key varchar(255), request_hash char(64))");
            MariaDbIdempotencyStore store = new MariaDbIdempotencyStore(first, "idempotency_keys");
            Transactions transactions = new SpringTransactions(new DataSourceTransactionManager(first));
            List<ScopedKey> expired = new ArrayList<>();
            List<ScopedKey> expiredClaims = new ArrayList<>();
            for (int i = 0; i < 200; i++) {
                ScopedKey done = scoped("expired-" + UUID.randomUUID());
                ScopedKey unfinished = scoped("unfinished-" + UUID.randomUUID());
                expired.add(done);
                expiredClaims.add(unfinished);
                Transactions.Transaction transaction = transactions.begin();
                String token = ((ClaimResult.Claimed) store.claim(new ClaimRequest(done, RETRIED,
                        Duration.ofMillis(1), maxWait))).fencingToken();
                store.complete(done, token, new StoredResponse(200, List.of(), null));
                store.claim(new ClaimRequest(unfinished, RETRIED, Duration.ofMillis(1), maxWait, LEASE));
                transaction.commit();
            }

            // the first instance replays from the answers it keeps, the second from one read of the records it remembers
            List<IdempotencyEngine> engines = List.of(engine(first, maxWait),
                    engine(second, maxWait, new ReplayCache(0, 1024, 1 << 20, Duration.ofMinutes(1), 10_000)));
            ExecutorService cleaner = Executors.newSingleThreadExecutor();
            AtomicBoolean storming = new AtomicBoolean(true);
            try {
                Future<Integer> cleanup = cleaner.submit(() -> {
                    int deleted = 0;
                    while (storming.get()) {
                        deleted += store.deleteExpired(7);
                    }
                    return deleted;
                });
                EngineStorm.run(engines, List.of(new JdbcTemplate(first), new JdbcTemplate(second)), mode, LEASE,
                        () -> {
                            storming.set(false);
                            int deleted;
                            try {
                                deleted = cleanup.get(60, TimeUnit.SECONDS) + store.deleteExpired(1000);
                            } catch (Exception e) {
                                throw new AssertionError("cleanup failed", e);
                            }
                            assertThat(deleted).as("the expired finished records, and nothing else")
                                    .isEqualTo(expired.size());
                            for (ScopedKey key : expired) {
                                assertThat(store.find(key)).isEmpty();
                            }
                            for (ScopedKey key : expiredClaims) {
                                assertThat(store.find(key)).as("an unfinished claim is never cleaned up").isPresent();
                            }
                        });
            } finally {
                storming.set(false);
                cleaner.shutdownNow();
                engines.forEach(IdempotencyEngine::shutdown);
            }
        }
    }

    /**
     * Sixteen claims of one key from two pools, each holder rolling back after a while: InnoDB would deadlock the
     * claims waiting to insert behind a holder that rolls back, and roll one back whole. Here each in turn claims the
     * key, one at a time, and none fails.
     */
    @Test
    void claimsBehindHoldersThatRollBackTakeTheKeyOneAtATime() throws Exception {
        TestMariaDb.Database database = TestMariaDb.newDatabase();
        int claims = 16;
        try (HikariDataSource first = database.dataSource(claims);
             HikariDataSource second = database.dataSource(claims)) {
            new JdbcTemplate(first).execute(MariaDbIdempotencyStore.schema("idempotency_keys"));
            List<MariaDbIdempotencyStore> stores = List.of(new MariaDbIdempotencyStore(first, "idempotency_keys"),
                    new MariaDbIdempotencyStore(second, "idempotency_keys"));
            List<Transactions> transactions = List.of(
                    new SpringTransactions(new DataSourceTransactionManager(first)),
                    new SpringTransactions(new DataSourceTransactionManager(second)));
            ScopedKey key = scoped(UUID.randomUUID().toString());
            ExecutorService executor = Executors.newFixedThreadPool(claims);
            try {
                CyclicBarrier start = new CyclicBarrier(claims);
                AtomicInteger holding = new AtomicInteger();
                List<Future<Boolean>> results = new ArrayList<>();
                for (int i = 0; i < claims; i++) {
                    int instance = i % 2;
                    results.add(executor.submit(() -> {
                        start.await();
                        Transactions.Transaction transaction = transactions.get(instance).begin();
                        try {
                            ClaimResult result = stores.get(instance).claim(new ClaimRequest(key, RETRIED,
                                    Duration.ofDays(1), Duration.ofSeconds(30)));
                            assertThat(result).isInstanceOf(ClaimResult.Claimed.class);
                            assertThat(holding.incrementAndGet()).as("holders at once").isEqualTo(1);
                            Thread.sleep(20);
                            holding.decrementAndGet();
                            return true;
                        } finally {
                            transaction.rollback();
                        }
                    }));
                }
                for (Future<Boolean> result : results) {
                    assertThat(result.get(60, TimeUnit.SECONDS)).isTrue();
                }
                assertThat(stores.get(0).find(key)).isEmpty();
            } finally {
                executor.shutdownNow();
            }
        }
    }

    /**
     * A FAILED record sent again by its request from two instances at once: one of them takes it over, the others see
     * the claim in progress or its answer, never a second run.
     */
    @Test
    void aFailedRecordSentAgainFromTwoInstancesAtOnceIsTakenOverOnce() throws Exception {
        TestMariaDb.Database database = TestMariaDb.newDatabase();
        int requests = 16;
        try (HikariDataSource first = database.dataSource(requests);
             HikariDataSource second = database.dataSource(requests)) {
            new JdbcTemplate(first).execute(MariaDbIdempotencyStore.schema("idempotency_keys"));
            List<IdempotencyEngine> engines = List.of(engine(first, Duration.ofSeconds(5)),
                    engine(second, Duration.ofSeconds(5)));
            // a lease no renewal can miss on a loaded machine, and that no retry waits out: the race here is the FAILED
            // record's (a lapsed lease would let a waiting duplicate take the winner's claim over and run it again)
            Duration lease = Duration.ofSeconds(30);
            ExecutorService executor = Executors.newFixedThreadPool(requests);
            try {
                for (int round = 0; round < 5; round++) {
                    ScopedKey key = scoped(UUID.randomUUID().toString());
                    IdempotencyEngine.Proceed failed = (IdempotencyEngine.Proceed) engines.get(0).start(key, RETRIED,
                            IdempotencyMode.INTENT_FIRST, lease);
                    failed.execution().abandonDefinitely(); // a definite failure: FAILED, for its request to retry
                    assertThat(new MariaDbIdempotencyStore(first, "idempotency_keys").find(key).orElseThrow().status())
                            .isEqualTo(RecordStatus.FAILED);
                    StoredResponse paid = new StoredResponse(201, List.of(),
                            ("paid " + round).getBytes(StandardCharsets.UTF_8));
                    CyclicBarrier start = new CyclicBarrier(requests);
                    AtomicInteger runs = new AtomicInteger();
                    List<Future<IdempotencyEngine.Start>> results = new ArrayList<>();
                    for (int i = 0; i < requests; i++) {
                        IdempotencyEngine engine = engines.get(i % 2);
                        results.add(executor.submit(() -> {
                            start.await();
                            IdempotencyEngine.Start retry = engine.start(key, RETRIED, IdempotencyMode.INTENT_FIRST,
                                    lease);
                            if (retry instanceof IdempotencyEngine.Proceed proceed) {
                                runs.incrementAndGet();
                                Thread.sleep(30);
                                proceed.execution().finish(paid);
                            }
                            return retry;
                        }));
                    }
                    for (Future<IdempotencyEngine.Start> result : results) {
                        assertThat(result.get(60, TimeUnit.SECONDS)).isInstanceOfAny(IdempotencyEngine.Proceed.class,
                                IdempotencyEngine.InProgress.class, IdempotencyEngine.Replay.class);
                    }
                    assertThat(runs).as("runs in round %d", round).hasValue(1);
                    assertThat(engines.get(1).start(key, RETRIED, IdempotencyMode.INTENT_FIRST, lease))
                            .isEqualTo(new IdempotencyEngine.Replay(paid));
                }
            } finally {
                executor.shutdownNow();
                engines.forEach(IdempotencyEngine::shutdown);
            }
        }
    }

    /**
     * Callers, scopes and keys of the longest length, in characters of three and four bytes in UTF-8, are kept whole:
     * keys that differ only in their last character are two keys, and each replays its own answer.
     */
    @Test
    void theLongestKeysInMultiByteCharactersAreKeptWhole() throws Exception {
        TestMariaDb.Database database = TestMariaDb.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(4)) {
            new JdbcTemplate(dataSource).execute(MariaDbIdempotencyStore.schema("idempotency_keys"));
            IdempotencyEngine engine = engine(dataSource, Duration.ofSeconds(1));
            try {
                String caller = "\u20ac".repeat(ScopedKey.MAX_LENGTH); // 3 bytes each
                String scope = "POST /" + "\u00e9".repeat(ScopedKey.MAX_LENGTH - 6);
                String emoji = "\ud83d\ude00"; // 4 bytes, two Java characters
                String prefix = emoji.repeat((ScopedKey.MAX_LENGTH - 1) / 2);
                List<ScopedKey> keys = List.of(new ScopedKey(caller, scope, prefix + "a"),
                        new ScopedKey(caller, scope, prefix + "b"), new ScopedKey(caller, scope, prefix + " "),
                        new ScopedKey(caller, scope, prefix));
                for (ScopedKey key : keys) {
                    assertThat(key.key().codePointCount(0, key.key().length())).isLessThanOrEqualTo(128);
                    StoredResponse answer = new StoredResponse(201, List.of(),
                            key.key().getBytes(StandardCharsets.UTF_8));
                    ((IdempotencyEngine.Proceed) engine.start(key, RETRIED)).execution().finish(answer);
                }
                for (ScopedKey key : keys) {
                    IdempotencyEngine.Start again = engine.start(key, RETRIED);
                    assertThat(again).isInstanceOf(IdempotencyEngine.Replay.class);
                    assertThat(((IdempotencyEngine.Replay) again).response().body())
                            .isEqualTo(key.key().getBytes(StandardCharsets.UTF_8));
                }
                assertThat(new JdbcTemplate(dataSource).queryForObject("SELECT count(*) FROM idempotency_keys",
                        Integer.class)).isEqualTo(keys.size());
            } finally {
                engine.shutdown();
            }
        }
    }

    /** An answer of several megabytes, with the stored-body cap raised, is stored and replayed byte for byte. */
    @Test
    void aLargeAnswerIsStoredAndReplayedWhole() throws Exception {
        TestMariaDb.Database database = TestMariaDb.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(4)) {
            new JdbcTemplate(dataSource).execute(MariaDbIdempotencyStore.schema("idempotency_keys"));
            IdempotencyEngine engine = new IdempotencyEngine(new MariaDbIdempotencyStore(dataSource,
                    "idempotency_keys"), new SpringTransactions(new DataSourceTransactionManager(dataSource)),
                    StoragePolicy.DEFAULT, Duration.ofDays(1), Duration.ofSeconds(1), StaleClaimResolver.RERUN,
                    new DownstreamKeys("secret"), ReplayCache.NONE, 8L << 20);
            try {
                byte[] body = new byte[6 << 20];
                ThreadLocalRandom.current().nextBytes(body);
                StoredResponse answer = new StoredResponse(200, List.of(), body);
                ScopedKey key = scoped(UUID.randomUUID().toString());
                assertThat(((IdempotencyEngine.Proceed) engine.start(key, RETRIED)).execution().finish(answer))
                        .isEqualTo(IdempotencyEngine.Outcome.STORED);
                assertThat(engine.start(key, RETRIED)).isEqualTo(new IdempotencyEngine.Replay(answer));
            } finally {
                engine.shutdown();
            }
        }
    }

    /**
     * Claims abandoned by a crashed holder, their leases run out on the database's clock, resolved by a sweeper on
     * each instance and by retries on both at once: the resolver is asked once per claim, and each claim ends with the
     * answer it gave.
     */
    @Test
    void staleClaimsRacedBySweepersAndRetriesOnTwoInstancesAreResolvedOnce() throws Exception {
        TestMariaDb.Database database = TestMariaDb.newDatabase();
        int claims = 20;
        try (HikariDataSource first = database.dataSource(8); HikariDataSource second = database.dataSource(8)) {
            new JdbcTemplate(first).execute(MariaDbIdempotencyStore.schema("idempotency_keys"));
            List<HikariDataSource> pools = List.of(first, second);
            IdempotencyEngine crashed = engine(first, Duration.ofSeconds(1));
            List<ScopedKey> keys = new ArrayList<>();
            for (int i = 0; i < claims; i++) {
                ScopedKey key = scoped(UUID.randomUUID().toString());
                keys.add(key);
                ((IdempotencyEngine.Proceed) crashed.start(key, RETRIED, IdempotencyMode.INTENT_FIRST, LEASE))
                        .execution().abandon(); // the committed claim stays PROCESSING, its lease no longer renewed
            }
            crashed.shutdown();
            Thread.sleep(LEASE.toMillis() + 100);

            Map<ScopedKey, AtomicInteger> consulted = new ConcurrentHashMap<>();
            StaleClaimResolver resolver = claim -> {
                consulted.computeIfAbsent(claim.key(), k -> new AtomicInteger()).incrementAndGet();
                return StaleClaimResolver.Resolution.complete(new StoredResponse(201, List.of(),
                        claim.key().key().getBytes(StandardCharsets.UTF_8)));
            };
            List<IdempotencyEngine> engines = new ArrayList<>();
            List<Callable<Object>> work = new ArrayList<>();
            for (HikariDataSource pool : pools) {
                MariaDbIdempotencyStore store = new MariaDbIdempotencyStore(pool, "idempotency_keys");
                StaleClaimSweeper sweeper = new StaleClaimSweeper(store, resolver, new DownstreamKeys("secret"),
                        Duration.ofSeconds(30), 7);
                work.add(() -> {
                    while (sweeper.sweep().resolved() > 0) {
                        // on until nothing is left to resolve
                    }
                    return null;
                });
                IdempotencyEngine engine = new IdempotencyEngine(store, new SpringTransactions(
                        new DataSourceTransactionManager(pool)), StoragePolicy.DEFAULT, Duration.ofDays(1),
                        Duration.ofSeconds(5), resolver, new DownstreamKeys("secret"));
                engines.add(engine);
                for (ScopedKey key : keys) {
                    // with a lease as long as the sweepers', not the crashed holder's 200 ms: a resolution that takes
                    // longer than its taker's lease (a machine busy with other work) is rightly asked for again by
                    // whoever takes the claim over next, which is not the race this test is about
                    work.add(() -> engine.start(key, RETRIED, IdempotencyMode.INTENT_FIRST, Duration.ofSeconds(30)));
                }
            }
            ExecutorService executor = Executors.newFixedThreadPool(12);
            try {
                for (Future<Object> done : executor.invokeAll(work)) {
                    Object start = done.get(60, TimeUnit.SECONDS);
                    if (start != null) {
                        assertThat(start).isInstanceOfAny(IdempotencyEngine.Replay.class,
                                IdempotencyEngine.InProgress.class);
                    }
                }
                for (ScopedKey key : keys) {
                    assertThat(consulted.get(key)).as("resolver asked about " + key.key()).hasValue(1);
                    assertThat(engines.get(1).start(key, RETRIED, IdempotencyMode.INTENT_FIRST, LEASE))
                            .isEqualTo(new IdempotencyEngine.Replay(new StoredResponse(201, List.of(),
                                    key.key().getBytes(StandardCharsets.UTF_8))));
                }
            } finally {
                executor.shutdownNow();
                engines.forEach(IdempotencyEngine::shutdown);
            }
        }
    }

    /**
     * InnoDB rolls a deadlock's victim back whole — with the claim of the work in one transaction with it — and the
     * connection goes on in a new transaction. Work that carries on after the deadlock (it retries the statement that
     * failed, as InnoDB's deadlocks are often retried) wrote beside a claim that is no longer there: the run ends as a
     * commit that failed, with a known outcome — nothing of it kept, the key free, so the redelivery runs — and not as
     * an {@code IllegalStateException}, which the template's callers take for a mistake of their own (nothing
     * claimed, dead-letter it).
     */
    @Test
    void workCarryingOnAfterADeadlockRolledItsTransactionBackKeepsNothingAndItsRedeliveryRuns() throws Exception {
        TestMariaDb.Database database = TestMariaDb.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(4)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute(MariaDbIdempotencyStore.schema("idempotency_keys"));
            twoAccounts(jdbc);
            IdempotencyEngine engine = engine(dataSource, Duration.ofSeconds(1));
            IdempotencyTemplate template = new IdempotencyTemplate(engine);
            ScopedKey key = scoped(UUID.randomUUID().toString());
            CyclicBarrier bothHoldTheirRow = new CyclicBarrier(2);
            AtomicBoolean deadlocked = new AtomicBoolean();
            ExecutorService other = Executors.newSingleThreadExecutor();
            try {
                Future<?> heavier = other.submit(aHeavierTransfer(dataSource, bothHoldTheirRow));

                assertThatThrownBy(() -> template.execute(key, "transfer".getBytes(StandardCharsets.UTF_8),
                        aTransferCarryingOnAfterADeadlock(jdbc, bothHoldTheirRow, deadlocked)))
                        .isInstanceOfSatisfying(CommitFailedException.class,
                                failed -> assertThat(failed.outcomeUnknown()).as("nothing was committed").isFalse());
                heavier.get(10, TimeUnit.SECONDS);
            } finally {
                other.shutdownNow();
            }

            assertThat(deadlocked).as("the work's transaction was the deadlock's victim").isTrue();
            assertThat(jdbc.queryForList("SELECT balance FROM accounts ORDER BY id", Integer.class))
                    .as("only the other transaction's writes").containsExactly(100, 100);
            MariaDbIdempotencyStore store = new MariaDbIdempotencyStore(dataSource, "idempotency_keys");
            assertThat(store.find(key)).as("the key is free").isEmpty();

            IdempotencyTemplate.Result redelivered = template.execute(key,
                    "transfer".getBytes(StandardCharsets.UTF_8), () -> {
                        jdbc.update("UPDATE accounts SET balance = balance + 1 WHERE id IN (1, 2)");
                        return "done".getBytes(StandardCharsets.UTF_8);
                    });
            assertThat(redelivered.replayed()).isFalse();
            assertThat(jdbc.queryForList("SELECT balance FROM accounts ORDER BY id", Integer.class))
                    .containsExactly(101, 101);
            engine.shutdown();
        }
    }

    /**
     * In intent-first mode the claim was committed before the work's transaction, so nothing shows the library that
     * InnoDB rolled that transaction back as a deadlock's victim: work that carries on after the deadlock loses the
     * writes made before it, and those made after it commit with the answer, which is replayed — as docs/mariadb.md
     * says.
     */
    @Test
    void intentFirstWorkCarryingOnAfterADeadlockKeepsOnlyTheWritesAfterItWithItsAnswer() throws Exception {
        TestMariaDb.Database database = TestMariaDb.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(4)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute(MariaDbIdempotencyStore.schema("idempotency_keys"));
            twoAccounts(jdbc);
            IdempotencyEngine engine = engine(dataSource, Duration.ofSeconds(1), ReplayCache.NONE);
            IdempotencyTemplate template = new IdempotencyTemplate(engine);
            ScopedKey key = scoped(UUID.randomUUID().toString());
            byte[] input = "transfer".getBytes(StandardCharsets.UTF_8);
            CyclicBarrier bothHoldTheirRow = new CyclicBarrier(2);
            AtomicBoolean deadlocked = new AtomicBoolean();
            ExecutorService other = Executors.newSingleThreadExecutor();
            IdempotencyTemplate.Result result;
            try {
                Future<?> heavier = other.submit(aHeavierTransfer(dataSource, bothHoldTheirRow));
                result = template.execute(key, input, IdempotencyMode.INTENT_FIRST, Duration.ofSeconds(30),
                        aTransferCarryingOnAfterADeadlock(jdbc, bothHoldTheirRow, deadlocked));
                heavier.get(10, TimeUnit.SECONDS);
            } finally {
                other.shutdownNow();
            }
            assertThat(deadlocked).isTrue();
            assertThat(result.replayed()).isFalse();
            assertThat(jdbc.queryForList("SELECT balance FROM accounts ORDER BY id", Integer.class))
                    .as("the write before the deadlock lost, the one after it kept").containsExactly(100, 101);
            assertThat(jdbc.queryForObject("SELECT status FROM idempotency_keys WHERE idempotency_key = ?",
                    String.class, key.key())).isEqualTo(RecordStatus.SUCCEEDED.name());
            assertThat(template.execute(key, input, IdempotencyMode.INTENT_FIRST, Duration.ofSeconds(30),
                    () -> "again".getBytes(StandardCharsets.UTF_8)).replayed()).isTrue();
            engine.shutdown();
        }
    }

    /** Accounts 1 and 2 at 0, and an audit table, for the transfers that deadlock below. */
    private static void twoAccounts(JdbcTemplate jdbc) {
        jdbc.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL)");
        jdbc.execute("CREATE TABLE audit (id int AUTO_INCREMENT PRIMARY KEY, note varchar(20))");
        jdbc.update("INSERT INTO accounts VALUES (1, 0), (2, 0)");
    }

    /**
     * A transfer that takes account 2, then account 1 once the work holds account 1, adding 100 to each. It has
     * written more rows than the work, so InnoDB rolls the work's transaction back when they deadlock.
     */
    private static Callable<Void> aHeavierTransfer(HikariDataSource dataSource, CyclicBarrier bothHoldTheirRow) {
        return () -> {
            try (Connection connection = dataSource.getConnection()) {
                connection.setAutoCommit(false);
                try (Statement statement = connection.createStatement()) {
                    for (int i = 0; i < 20; i++) {
                        statement.executeUpdate("INSERT INTO audit (note) VALUES ('other')");
                    }
                    statement.executeUpdate("UPDATE accounts SET balance = balance + 100 WHERE id = 2");
                    bothHoldTheirRow.await(10, TimeUnit.SECONDS);
                    statement.executeUpdate("UPDATE accounts SET balance = balance + 100 WHERE id = 1");
                }
                connection.commit();
            }
            return null;
        };
    }

    /**
     * Work that takes account 1, then account 2 once the other transfer holds it — the deadlock — adding 1 to each,
     * and that carries on when told of the deadlock: it writes account 2 again, as InnoDB's deadlocks are often
     * retried.
     */
    private static Callable<byte[]> aTransferCarryingOnAfterADeadlock(JdbcTemplate jdbc,
                                                                      CyclicBarrier bothHoldTheirRow,
                                                                      AtomicBoolean deadlocked) {
        return () -> {
            jdbc.update("UPDATE accounts SET balance = balance + 1 WHERE id = 1");
            bothHoldTheirRow.await(10, TimeUnit.SECONDS);
            Thread.sleep(300); // the other transaction waits for account 1 meanwhile
            try {
                jdbc.update("UPDATE accounts SET balance = balance + 1 WHERE id = 2");
            } catch (DataAccessException e) {
                deadlocked.set(true);
                jdbc.update("UPDATE accounts SET balance = balance + 1 WHERE id = 2");
            }
            return "done".getBytes(StandardCharsets.UTF_8);
        };
    }

    /**
     * On pools that do not auto-commit, an intent-first claim's lease is renewed in the background while its handler
     * works, each renewal committed in a transaction of its own: left to the connection, it would be rolled back when
     * the connection goes back, and the lease would run out under a live handler, for another instance's retry or
     * sweeper to take the claim over and run the handler a second time. The claim outlives its first lease: another
     * instance's retry is told it is in progress, its sweeper finds nothing stale, and the holder's answer is stored.
     * Once expired, the record is deleted by the cleanup, which commits its batch itself as well.
     */
    @Test
    void aLeaseRenewedOnAPoolThatDoesNotAutoCommitKeepsAnotherInstanceOut() throws Exception {
        TestMariaDb.Database database = TestMariaDb.newDatabase();
        Duration lease = Duration.ofSeconds(3);
        ScopedKey key = scoped(UUID.randomUUID().toString());
        try (HikariDataSource first = database.dataSource(4, config -> config.setAutoCommit(false));
             HikariDataSource second = database.dataSource(4, config -> config.setAutoCommit(false));
             HikariDataSource reader = database.dataSource(1)) {
            JdbcTemplate read = new JdbcTemplate(reader);
            read.execute(MariaDbIdempotencyStore.schema("idempotency_keys"));
            MariaDbIdempotencyStore otherStore = new MariaDbIdempotencyStore(second, "idempotency_keys");
            IdempotencyEngine holder = engine(first, Duration.ofMillis(300));
            IdempotencyEngine other = engine(second, Duration.ofMillis(300)); // another instance
            IdempotencyEngine.Execution execution = ((IdempotencyEngine.Proceed) holder.start(key, RETRIED,
                    IdempotencyMode.INTENT_FIRST, lease)).execution();
            try {
                String firstLeaseEnd = read.queryForObject("SELECT CAST(locked_until AS CHAR) FROM idempotency_keys"
                        + " WHERE idempotency_key = ?", String.class, key.key());
                Await.until("the claim's first lease has run out on the database's clock", Duration.ofSeconds(30),
                        () -> read.queryForObject("SELECT UTC_TIMESTAMP(6) > ?", Boolean.class, firstLeaseEnd));

                assertThat(read.queryForObject("SELECT locked_until > UTC_TIMESTAMP(6) FROM idempotency_keys"
                        + " WHERE idempotency_key = ?", Boolean.class, key.key())).as("the lease, renewed").isTrue();
                IdempotencyEngine.Start retry = Async.supply(() -> {
                    IdempotencyEngine.Start start = other.start(key, RETRIED, IdempotencyMode.INTENT_FIRST, lease);
                    if (start instanceof IdempotencyEngine.Proceed proceed) {
                        proceed.execution().abandon();
                    }
                    return start;
                }).get(30, TimeUnit.SECONDS);
                assertThat(retry).as("another instance's retry").isInstanceOf(IdempotencyEngine.InProgress.class);
                assertThat(new StaleClaimSweeper(otherStore, StaleClaimResolver.RERUN, new DownstreamKeys("secret"),
                        lease, 10).sweep().found()).as("stale claims").isZero();
                assertThat(execution.finish(new StoredResponse(201, List.of(), null)))
                        .isEqualTo(IdempotencyEngine.Outcome.STORED);
            } finally {
                execution.abandon(); // after a failed assertion: nothing stays bound to the thread
                holder.shutdown();
                other.shutdown();
            }
            assertThat(read.queryForObject("SELECT status FROM idempotency_keys WHERE idempotency_key = ?",
                    String.class, key.key())).isEqualTo("SUCCEEDED");

            read.update("UPDATE idempotency_keys SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND"
                    + " WHERE idempotency_key = ?", key.key());
            assertThat(otherStore.deleteExpired(10)).isEqualTo(1);
            assertThat(read.queryForObject("SELECT COUNT(*) FROM idempotency_keys", Long.class)).as("cleaned up")
                    .isZero();
        }
    }

    private static ScopedKey scoped(String key) {
        return new ScopedKey("alice", "POST /payments", key);
    }

    private static IdempotencyEngine engine(HikariDataSource dataSource, Duration maxWait) {
        return engine(dataSource, maxWait, new ReplayCache(100, 1024, 1 << 20, Duration.ofMinutes(1)));
    }

    private static IdempotencyEngine engine(HikariDataSource dataSource, Duration maxWait, ReplayCache replayCache) {
        return new IdempotencyEngine(new MariaDbIdempotencyStore(dataSource, "idempotency_keys"),
                new SpringTransactions(new DataSourceTransactionManager(dataSource)), StoragePolicy.DEFAULT,
                Duration.ofDays(1), maxWait, StaleClaimResolver.RERUN, new DownstreamKeys("secret"), replayCache);
    }
}
