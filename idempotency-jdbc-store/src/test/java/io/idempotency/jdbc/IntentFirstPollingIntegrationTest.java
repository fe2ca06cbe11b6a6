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
import org.junit.jupiter.api.Test;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;

import java.sql.Connection;
import java.sql.Statement;
import java.time.Duration;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * docs/side-effects.md: a duplicate on another instance polls the committed intent-first claim, holding no connection
 * between polls, until {@code idempotency.in-flight-wait} has run out and it is answered "in progress". A duplicate
 * that kept its connection while it waited would drain the pool of that instance for the length of every lease.
 */
@Tag("engine")
class IntentFirstPollingIntegrationTest {

    private static final String HASH = "7".repeat(64);
    private static final Duration DAY = Duration.ofDays(1);

    @Test
    void aDuplicatePollingACommittedClaimLeavesThePoolItsConnectionBetweenPolls() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource migration = database.dataSource(2)) { // the migration takes two connections
            new IdempotencySchemaMigrator(migration, IdempotencySchema.DEFAULT_TABLE_NAME).migrate();
        }
        // one connection in all, and a short wait for it: a poll that kept it would starve every other user
        try (HikariDataSource pool = database.dataSource(1, config -> config.setConnectionTimeout(250))) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(pool, IdempotencySchema.DEFAULT_TABLE_NAME);
            IdempotencyEngine holder = engine(pool, store, Duration.ofMillis(300));
            IdempotencyEngine other = engine(pool, store, Duration.ofSeconds(2)); // another instance
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            try {
                IdempotencyEngine.Start held = holder.start(key, HASH, IdempotencyMode.INTENT_FIRST,
                        Duration.ofSeconds(30));
                assertThat(held).isInstanceOf(IdempotencyEngine.Proceed.class);
                // its holder died after the intent was committed: the claim is live for its whole lease
                ((IdempotencyEngine.Proceed) held).execution().abandon();

                long start = System.nanoTime();
                CompletableFuture<IdempotencyEngine.Start> duplicate = Async.supply(() ->
                        other.start(key, HASH, IdempotencyMode.INTENT_FIRST, Duration.ofSeconds(30)));
                int used = 0;
                while (!duplicate.isDone() && used < 12) {
                    Thread.sleep(100);
                    // fails after 250 ms if the duplicate holds the connection
                    try (Connection connection = pool.getConnection();
                         Statement statement = connection.createStatement()) {
                        statement.execute("select 1");
                    }
                    used++;
                }

                assertThat(duplicate.get(10, TimeUnit.SECONDS)).isInstanceOf(IdempotencyEngine.InProgress.class);
                assertThat(Duration.ofNanos(System.nanoTime() - start)).as("it polled for its whole wait")
                        .isGreaterThanOrEqualTo(Duration.ofMillis(1900));
                assertThat(used).as("the pool's one connection was had throughout the wait").isGreaterThanOrEqualTo(10);
            } finally {
                holder.shutdown();
                other.shutdown();
            }
        }
    }

    private static IdempotencyEngine engine(HikariDataSource pool, PostgresIdempotencyStore store, Duration maxWait) {
        return new IdempotencyEngine(store, new SpringTransactions(new DataSourceTransactionManager(pool)),
                StoragePolicy.DEFAULT, DAY, maxWait, StaleClaimResolver.RERUN, new DownstreamKeys("secret"));
    }
}
