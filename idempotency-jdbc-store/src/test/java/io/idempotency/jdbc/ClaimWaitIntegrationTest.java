package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.DownstreamKeys;
import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StoragePolicy;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.Async;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;

import java.sql.Connection;
import java.sql.Statement;
import java.time.Duration;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The in-flight wait ({@code idempotency.in-flight-wait}) is counted from the request's start: a request that first
 * waited for a pool connection waits for another transaction's claim of its key only what is left of it, not the whole
 * wait again.
 */
@Tag("engine")
class ClaimWaitIntegrationTest {

    private static final String HASH = "7".repeat(64);

    @ParameterizedTest
    @EnumSource(IdempotencyMode.class)
    void aClaimThatWaitedForAPoolConnectionWaitsForTheKeyOnlyWhatIsLeft(IdempotencyMode mode) throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource migration = database.dataSource(2)) {
            new IdempotencySchemaMigrator(migration, IdempotencySchema.DEFAULT_TABLE_NAME).migrate();
        }
        ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
        try (HikariDataSource others = database.dataSource(1);
             Connection other = others.getConnection();
             Statement otherStatement = other.createStatement();
             // the engine's pool: one connection, which another request holds for 3.6 s of the 4 s wait
             HikariDataSource pool = database.dataSource(1, config -> config.setConnectionTimeout(10_000))) {
            // another transaction's claim of the key, not committed while the request waits
            other.setAutoCommit(false);
            otherStatement.execute("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash,"
                    + " fencing_token, expires_at, locked_until) values ('', 'POST /charges', '" + key.key()
                    + "', 'PROCESSING', '" + HASH + "', gen_random_uuid(), now() + interval '1 day',"
                    + " now() + interval '1 day')");
            CountDownLatch taken = new CountDownLatch(1);
            CompletableFuture<Void> busy = Async.run(() -> {
                try (Connection connection = pool.getConnection()) {
                    taken.countDown();
                    Thread.sleep(3600);
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });
            assertThat(taken.await(10, TimeUnit.SECONDS)).isTrue();
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(pool, IdempotencySchema.DEFAULT_TABLE_NAME);
            IdempotencyEngine engine = new IdempotencyEngine(store,
                    new SpringTransactions(new DataSourceTransactionManager(pool)), StoragePolicy.DEFAULT,
                    Duration.ofDays(1), Duration.ofSeconds(4), StaleClaimResolver.RERUN, new DownstreamKeys("secret"));
            try {
                long start = System.nanoTime();

                IdempotencyEngine.Start started = engine.start(key, HASH, mode, Duration.ofSeconds(30));

                Duration took = Duration.ofNanos(System.nanoTime() - start);
                busy.get(10, TimeUnit.SECONDS);
                assertThat(started).isInstanceOf(IdempotencyEngine.InProgress.class);
                // the whole wait again after the connection's: 7.6 s
                assertThat(took).as("the request's 4 s wait, 3.6 s of it for a connection")
                        .isGreaterThanOrEqualTo(Duration.ofMillis(3900))
                        .isLessThan(Duration.ofMillis(6000));
            } finally {
                engine.shutdown();
                other.rollback();
            }
        }
    }
}
