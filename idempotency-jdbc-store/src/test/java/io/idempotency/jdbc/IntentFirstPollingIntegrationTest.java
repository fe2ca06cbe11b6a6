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

    /**
     * A claim whose statement waited for another transaction's uncommitted claim of the key (PostgreSQL's unique
     * index makes it wait, within the in-flight wait) writes a lease counted from the statement's start. Waiting
     * longer than two thirds of a short lease, it was first renewed a third of the lease after it ended: its lease
     * ran out before, and a duplicate or a sweeper could take the claim over and run the work beside it.
     */
    @Test
    void anIntentFirstClaimThatWaitedForAnotherTransactionsClaimHoldsALiveLeaseWhenItsWorkStarts() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource migration = database.dataSource(2)) {
            new IdempotencySchemaMigrator(migration, IdempotencySchema.DEFAULT_TABLE_NAME).migrate();
        }
        try (HikariDataSource pool = database.dataSource(4);
             Connection other = pool.getConnection();
             Statement otherStatement = other.createStatement()) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(pool, IdempotencySchema.DEFAULT_TABLE_NAME);
            IdempotencyEngine engine = engine(pool, store, Duration.ofSeconds(5));
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            try {
                // another transaction's claim of the key, not yet committed (an intent whose commit stalls)
                other.setAutoCommit(false);
                otherStatement.execute("insert into idempotency_keys (caller, scope, idempotency_key, status,"
                        + " request_hash, fencing_token, expires_at, locked_until) values ('', 'POST /charges', '"
                        + key.key() + "', 'PROCESSING', '" + HASH + "', gen_random_uuid(), now() + interval '1 day',"
                        + " now() + interval '1 day')");
                // rolled back after five sixths of the lease: a first renewal a third of it later comes too late
                CompletableFuture<Void> rolledBack = Async.run(() -> {
                    try {
                        Thread.sleep(2500);
                        other.rollback();
                    } catch (Exception e) {
                        throw new IllegalStateException(e);
                    }
                });
                long claiming = System.nanoTime();

                IdempotencyEngine.Start started = engine.start(key, HASH, IdempotencyMode.INTENT_FIRST,
                        Duration.ofSeconds(3));

                rolledBack.get(10, TimeUnit.SECONDS);
                assertThat(Duration.ofNanos(System.nanoTime() - claiming)).as("waited for the other transaction")
                        .isGreaterThanOrEqualTo(Duration.ofMillis(2400));
                assertThat(started).isInstanceOf(IdempotencyEngine.Proceed.class);
                try {
                    // the lease as the others see it, while the work would run: renewed only a third of the lease after
                    // the claim ended, it ran out half a second after the work began, half a second before that renewal
                    long leastLeftMillis = Long.MAX_VALUE;
                    long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(1500);
                    while (System.nanoTime() < until) {
                        leastLeftMillis = Math.min(leastLeftMillis, database.queryLong("select (extract(epoch from"
                                + " locked_until - clock_timestamp()) * 1000)::bigint from idempotency_keys"
                                + " where idempotency_key = '" + key.key() + "'"));
                        Thread.sleep(20);
                    }
                    assertThat(leastLeftMillis).as("the least lease left while the work ran (ms)").isPositive();
                } finally {
                    ((IdempotencyEngine.Proceed) started).execution().abandon();
                }
            } finally {
                engine.shutdown();
            }
        }
    }

    private static IdempotencyEngine engine(HikariDataSource pool, PostgresIdempotencyStore store, Duration maxWait) {
        return new IdempotencyEngine(store, new SpringTransactions(new DataSourceTransactionManager(pool)),
                StoragePolicy.DEFAULT, DAY, maxWait, StaleClaimResolver.RERUN, new DownstreamKeys("secret"));
    }
}
