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
import io.idempotency.testkit.Async;
import io.idempotency.testkit.EngineStorm;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;

import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.time.Duration;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Duplicates of one instance that wait in memory behind another request, on real PostgreSQL and a real pool. Tagged
 * {@code engine}: the engine's behaviour over the store, whose statements the store's own tests check on every
 * PostgreSQL version the build runs; this runs on the configured server only.
 */
@Tag("engine")
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
                    reuse = Async.supply(() -> engine.start(key, OTHER));
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

    @Test
    void aDuplicateThatCameLaterWaitsItsOwnWaitNotOnlyWhatWasLeftOfTheRequestItWaitedBehind() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource migration = database.dataSource(2)) {
            new IdempotencySchemaMigrator(migration, "idempotency_keys").migrate();
        }
        Duration maxWait = Duration.ofSeconds(8);
        try (HikariDataSource otherInstance = database.dataSource(2); HikariDataSource thisInstance =
                database.dataSource(4)) {
            IdempotencyEngine other = engine(otherInstance, maxWait, ReplayCache.NONE);
            IdempotencyEngine engine = engine(thisInstance, maxWait, ReplayCache.NONE);
            try {
                ScopedKey key = new ScopedKey("alice", "POST /payments", UUID.randomUUID().toString());
                StoredResponse paid = new StoredResponse(201, List.of(), "paid".getBytes(StandardCharsets.UTF_8));
                // the request runs on another instance, its claim not committed yet
                IdempotencyEngine.Execution running =
                        ((IdempotencyEngine.Proceed) other.start(key, RETRIED)).execution();

                // a first retry on this instance waits in the database for that claim
                CompletableFuture<IdempotencyEngine.Start> first =
                        Async.supply(() -> engine.start(key, RETRIED));
                // a session of this test's own: other tests may hold and wait for locks on the same server
                database.awaitLockWaiter(Duration.ofSeconds(10));
                // a later retry on this instance waits in memory behind the first, with most of its own wait ahead
                Thread.sleep(3_000);
                CompletableFuture<IdempotencyEngine.Start> later =
                        Async.supply(() -> engine.start(key, RETRIED));

                assertThat(first.get(30, TimeUnit.SECONDS)).as("its wait ran out")
                        .isInstanceOf(IdempotencyEngine.InProgress.class);
                running.finish(paid); // within the later retry's wait

                assertThat(later.get(30, TimeUnit.SECONDS)).as("answered within its own wait, as on another instance")
                        .isEqualTo(new IdempotencyEngine.Replay(paid));
            } finally {
                other.shutdown();
                engine.shutdown();
            }
        }
    }

    /** {@link EngineStorm}: the storm of duplicates, reuses and failures on two instances, on PostgreSQL. */
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
        try (HikariDataSource first = database.dataSource(8); HikariDataSource second = database.dataSource(8)) {
            // the first instance replays from the answers it keeps, the second from one read of the records it remembers
            List<IdempotencyEngine> engines = List.of(engine(first, maxWait),
                    engine(second, maxWait, new ReplayCache(0, 1024, 1 << 20, Duration.ofMinutes(1), 10_000)));
            try {
                EngineStorm.run(engines, List.of(new JdbcTemplate(first), new JdbcTemplate(second)), mode, LEASE,
                        () -> { });
            } finally {
                engines.forEach(IdempotencyEngine::shutdown);
            }
        }
    }

    private static IdempotencyEngine engine(HikariDataSource dataSource, Duration maxWait) {
        return engine(dataSource, maxWait, new ReplayCache(100, 1024, 1 << 20, Duration.ofMinutes(1)));
    }

    private static IdempotencyEngine engine(HikariDataSource dataSource, Duration maxWait, ReplayCache replayCache) {
        return new IdempotencyEngine(new PostgresIdempotencyStore(dataSource, "idempotency_keys"),
                new SpringTransactions(new DataSourceTransactionManager(dataSource)), StoragePolicy.DEFAULT,
                Duration.ofDays(1), maxWait, StaleClaimResolver.RERUN, new DownstreamKeys("secret"), replayCache);
    }
}
