package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.DownstreamKeys;
import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.ReplayCache;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StoragePolicy;
import io.idempotency.core.StoredResponse;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;

import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/** Duplicates of one instance that wait in memory behind another request, on real PostgreSQL and a real pool. */
class CoalescingIntegrationTest {

    private static final String RETRIED = "1".repeat(64);
    private static final String OTHER = "2".repeat(64);
    private static final Duration LEASE = Duration.ofMillis(200);

    @Test
    void aRetryOfACompletedRequestBehindAReuseWaitingForAConnectionIsNeverRefused() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource migration = database.dataSource(2)) {
            new IdempotencySchemaMigrator(migration, "idempotency_keys").migrate();
        }
        try (HikariDataSource dataSource = database.dataSource(1)) {
            IdempotencyEngine engine = new IdempotencyEngine(new PostgresIdempotencyStore(dataSource,
                    "idempotency_keys"), new SpringTransactions(new DataSourceTransactionManager(dataSource)),
                    StoragePolicy.DEFAULT, Duration.ofDays(1), Duration.ofMillis(500), StaleClaimResolver.RERUN,
                    new DownstreamKeys("secret"));
            try {
                ScopedKey key = new ScopedKey("alice", "POST /payments", UUID.randomUUID().toString());
                StoredResponse paid = new StoredResponse(201, List.of(), "paid".getBytes(StandardCharsets.UTF_8));
                ((IdempotencyEngine.Proceed) engine.start(key, RETRIED)).execution().finish(paid);

                CompletableFuture<IdempotencyEngine.Start> reuse;
                IdempotencyEngine.Start retry;
                try (Connection busy = dataSource.getConnection()) { // the pool has nothing left to give
                    reuse = CompletableFuture.supplyAsync(() -> engine.start(key, OTHER));
                    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                    while (dataSource.getHikariPoolMXBean().getThreadsAwaitingConnection() == 0) {
                        assertThat(System.nanoTime()).isLessThan(deadline);
                        Thread.sleep(5);
                    }

                    retry = engine.start(key, RETRIED); // waits in memory behind the reuse
                }

                assertThat(retry).as("the request the key was completed for, told to come back, not refused")
                        .isInstanceOf(IdempotencyEngine.InProgress.class);
                assertThat(reuse.get(10, TimeUnit.SECONDS)).isInstanceOf(IdempotencyEngine.Mismatch.class);
                assertThat(engine.start(key, RETRIED)).isEqualTo(new IdempotencyEngine.Replay(paid));
            } finally {
                engine.shutdown();
            }
        }
    }

    /**
     * A storm on many keys, sent to two instances at once: duplicates, reuses of the key with another body, handlers
     * that fail, answers that are not stored. Whatever the interleaving, each key's effect is committed at most once,
     * and once when an answer was stored; no request is answered with another request's answer; and once the storm is
     * over every key is free or replayed at once, on both instances: no duplicate is left waiting for a request that
     * has ended. In intent-first mode too, where a failed or unstored attempt leaves its claim for the stale-claim
     * resolver, which a later duplicate asks once the short lease has run out.
     */
    @ParameterizedTest
    @EnumSource(IdempotencyMode.class)
    void aStormOfDuplicatesReusesAndFailuresOnTwoInstancesLeavesEveryKeyRunOnceOrFree(IdempotencyMode mode)
            throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource migration = database.dataSource(2)) {
            new IdempotencySchemaMigrator(migration, "idempotency_keys").migrate();
            new JdbcTemplate(migration).execute("CREATE TABLE effects (idempotency_key text, request_hash text)");
        }
        Duration maxWait = Duration.ofMillis(400);
        int keys = 24;
        int requestsPerKey = 16;
        try (HikariDataSource first = database.dataSource(8); HikariDataSource second = database.dataSource(8)) {
            List<IdempotencyEngine> engines = List.of(engine(first, maxWait), engine(second, maxWait));
            List<JdbcTemplate> jdbcs = List.of(new JdbcTemplate(first), new JdbcTemplate(second));
            ExecutorService executor = Executors.newFixedThreadPool(keys * requestsPerKey / 4);
            try {
                List<String> keyNames = new ArrayList<>();
                List<Future<Outcome>> outcomes = new ArrayList<>();
                CountDownLatch go = new CountDownLatch(1);
                for (int k = 0; k < keys; k++) {
                    String key = UUID.randomUUID().toString();
                    keyNames.add(key);
                    for (int r = 0; r < requestsPerKey; r++) {
                        int instance = r % 2;
                        String hash = r % 4 == 3 ? OTHER : RETRIED;
                        outcomes.add(executor.submit(() -> {
                            go.await();
                            return run(engines.get(instance), jdbcs.get(instance), key, hash, mode);
                        }));
                    }
                }
                go.countDown();

                Map<String, Set<String>> stored = new HashMap<>();
                for (Future<Outcome> future : outcomes) {
                    Outcome outcome = future.get(60, TimeUnit.SECONDS);
                    if (outcome.start() instanceof IdempotencyEngine.Replay replay) {
                        assertThat(new String(replay.response().body(), StandardCharsets.UTF_8))
                                .as("a replay is the answer of this very request")
                                .isEqualTo(outcome.hash() + ":" + outcome.key());
                        stored.computeIfAbsent(outcome.key(), k -> new HashSet<>()).add(outcome.hash());
                    }
                    if (outcome.stored()) {
                        stored.computeIfAbsent(outcome.key(), k -> new HashSet<>()).add(outcome.hash());
                    }
                }
                Thread.sleep(LEASE.toMillis() * 2); // intent-first claims left by failed attempts are stale by now
                for (String key : keyNames) {
                    List<String> effects = jdbcs.get(0).queryForList(
                            "SELECT request_hash FROM effects WHERE idempotency_key = ?", String.class, key);
                    Set<String> answered = stored.getOrDefault(key, Set.of());
                    assertThat(answered).as("one request's answer per key").hasSizeLessThanOrEqualTo(1);
                    assertThat(effects).as("each key's effect committed once, by the request answered")
                            .containsExactlyElementsOf(answered);
                    for (IdempotencyEngine engine : engines) {
                        // nothing left in flight: a request now is answered at once, replayed or run
                        long started = System.nanoTime();
                        IdempotencyEngine.Start after = engine.start(scoped(key), RETRIED, mode, LEASE);
                        assertThat(Duration.ofNanos(System.nanoTime() - started)).isLessThan(maxWait);
                        if (after instanceof IdempotencyEngine.Proceed proceed) {
                            assertThat(answered).isEmpty();
                            proceed.execution().abandonUnrun();
                        } else if (answered.contains(RETRIED)) {
                            assertThat(after).isInstanceOf(IdempotencyEngine.Replay.class);
                        } else {
                            assertThat(after).isInstanceOf(IdempotencyEngine.Mismatch.class);
                        }
                    }
                }
            } finally {
                executor.shutdownNow();
                engines.forEach(IdempotencyEngine::shutdown);
            }
        }
    }

    private record Outcome(String key, String hash, IdempotencyEngine.Start start, boolean stored) {
    }

    /** One request: claims, and when it holds the key writes its effect and fails, answers 503, or answers 201. */
    private static Outcome run(IdempotencyEngine engine, JdbcTemplate jdbc, String key, String hash,
                               IdempotencyMode mode) {
        IdempotencyEngine.Start start = engine.start(scoped(key), hash, mode, LEASE);
        boolean stored = false;
        if (start instanceof IdempotencyEngine.Proceed proceed) {
            jdbc.update("INSERT INTO effects VALUES (?, ?)", key, hash);
            int dice = ThreadLocalRandom.current().nextInt(10);
            if (dice < 2) {
                proceed.execution().abandon(); // the handler threw
            } else {
                StoredResponse answer = dice < 3 ? new StoredResponse(503, List.of(), new byte[0])
                        : new StoredResponse(201, List.of(), (hash + ":" + key).getBytes(StandardCharsets.UTF_8));
                stored = proceed.execution().finish(answer) == IdempotencyEngine.Outcome.STORED;
            }
        }
        return new Outcome(key, hash, start, stored);
    }

    private static ScopedKey scoped(String key) {
        return new ScopedKey("alice", "POST /payments", key);
    }

    private static IdempotencyEngine engine(HikariDataSource dataSource, Duration maxWait) {
        return new IdempotencyEngine(new PostgresIdempotencyStore(dataSource, "idempotency_keys"),
                new SpringTransactions(new DataSourceTransactionManager(dataSource)), StoragePolicy.DEFAULT,
                Duration.ofDays(1), maxWait, StaleClaimResolver.RERUN, new DownstreamKeys("secret"),
                new ReplayCache(100, 1024, 1 << 20, Duration.ofMinutes(1)));
    }
}
