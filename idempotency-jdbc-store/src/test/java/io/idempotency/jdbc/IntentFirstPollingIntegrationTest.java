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
        // one connection in all, and a wait for it half as long as the duplicate's: a poll that kept it through the
        // wait would starve every other user
        try (HikariDataSource pool = database.dataSource(1, config -> config.setConnectionTimeout(1000))) {
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
                long deadline = start + TimeUnit.SECONDS.toNanos(10);
                int used = 0;
                long lastUsed = start;
                while (!duplicate.isDone() && System.nanoTime() < deadline) {
                    Thread.sleep(100);
                    // fails after a second if the duplicate holds the connection
                    try (Connection connection = pool.getConnection();
                         Statement statement = connection.createStatement()) {
                        lastUsed = System.nanoTime();
                        statement.execute("select 1");
                    }
                    used++;
                }

                assertThat(duplicate.get(10, TimeUnit.SECONDS)).isInstanceOf(IdempotencyEngine.InProgress.class);
                assertThat(Duration.ofNanos(System.nanoTime() - start)).as("it polled for its whole wait")
                        .isGreaterThanOrEqualTo(Duration.ofMillis(1900));
                assertThat(used).as("the pool's one connection was had throughout the wait").isGreaterThanOrEqualTo(5);
                assertThat(Duration.ofNanos(lastUsed - start)).as("the pool's one connection was had late in the wait")
                        .isGreaterThanOrEqualTo(Duration.ofMillis(1500));
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
        TestPostgres.Database database = migratedDatabase();
        try (HikariDataSource pool = database.dataSource(4);
             Connection other = pool.getConnection();
             Statement otherStatement = other.createStatement()) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(pool, IdempotencySchema.DEFAULT_TABLE_NAME);
            IdempotencyEngine engine = engine(pool, store, Duration.ofSeconds(5));
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            try {
                holdUncommittedClaim(other, otherStatement, key);
                // rolled back after five sixths of the lease: a first renewal a third of it later comes too late
                CompletableFuture<Void> rolledBack = rollBackLater(other, 2500);
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

    /**
     * A claim whose statement waited for another transaction's claim longer than its whole lease is committed with
     * the lease run out. Renewed only in the background (at once, but on another thread), it let a duplicate on
     * another instance take the claim over and run the work beside the holder, which had begun it.
     */
    @Test
    void anIntentFirstClaimCommittedWithItsLeaseRunOutIsRenewedBeforeItsWorkStarts() throws Exception {
        TestPostgres.Database database = migratedDatabase();
        try (HikariDataSource pool = database.dataSource(4);
             Connection other = pool.getConnection();
             Statement otherStatement = other.createStatement()) {
            // renewals in the background come late (a busy renewal thread); those made on a request's thread do not
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(pool, IdempotencySchema.DEFAULT_TABLE_NAME) {
                @Override
                public boolean renew(ScopedKey key, String fencingToken, Duration lease) {
                    if (Thread.currentThread().getName().startsWith("idempotency-lease-renewal")) {
                        try {
                            Thread.sleep(1500);
                        } catch (InterruptedException e) {
                            Thread.currentThread().interrupt();
                            return false;
                        }
                    }
                    return super.renew(key, fencingToken, lease);
                }
            };
            IdempotencyEngine holder = engine(pool, store, Duration.ofSeconds(5));
            IdempotencyEngine duplicate = engine(pool, store, Duration.ofMillis(300)); // another instance
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            try {
                holdUncommittedClaim(other, otherStatement, key);
                // rolled back once the lease the waiting claim writes has run out
                CompletableFuture<Void> rolledBack = rollBackLater(other, 3500);

                IdempotencyEngine.Start started = holder.start(key, HASH, IdempotencyMode.INTENT_FIRST,
                        Duration.ofSeconds(2));

                rolledBack.get(10, TimeUnit.SECONDS);
                assertThat(started).isInstanceOf(IdempotencyEngine.Proceed.class);
                try {
                    // the holder's work runs now: a duplicate must not run it too
                    IdempotencyEngine.Start second = Async.supply(() -> {
                        IdempotencyEngine.Start start = duplicate.start(key, HASH, IdempotencyMode.INTENT_FIRST,
                                Duration.ofSeconds(2));
                        if (start instanceof IdempotencyEngine.Proceed proceed) {
                            proceed.execution().abandon(); // on the thread its transaction is bound to
                        }
                        return start;
                    }).get(10, TimeUnit.SECONDS);
                    assertThat(second).as("a duplicate while the holder's work runs")
                            .isInstanceOf(IdempotencyEngine.InProgress.class);
                } finally {
                    ((IdempotencyEngine.Proceed) started).execution().abandon();
                }
            } finally {
                holder.shutdown();
                duplicate.shutdown();
            }
        }
    }

    /**
     * When the claim was taken over between its commit and its work's start (its lease had run out), the holder does
     * not start the work, which is the new holder's to resolve, and the holder's request is told it is in progress.
     */
    @Test
    void anIntentFirstClaimTakenOverBeforeItsWorkStartsDoesNotStartIt() throws Exception {
        TestPostgres.Database database = migratedDatabase();
        try (HikariDataSource pool = database.dataSource(4);
             Connection other = pool.getConnection();
             Statement otherStatement = other.createStatement()) {
            ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
            String[] takenOverBy = new String[1];
            // the first renewal of the holder's claim comes after another instance took the claim over
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(pool, IdempotencySchema.DEFAULT_TABLE_NAME) {
                @Override
                public boolean renew(ScopedKey renewed, String fencingToken, Duration lease) {
                    synchronized (takenOverBy) {
                        if (takenOverBy[0] == null) {
                            takenOverBy[0] = takeOver(renewed, fencingToken, lease).orElseThrow();
                        }
                    }
                    return super.renew(renewed, fencingToken, lease);
                }
            };
            IdempotencyEngine holder = engine(pool, store, Duration.ofSeconds(5));
            try {
                holdUncommittedClaim(other, otherStatement, key);
                CompletableFuture<Void> rolledBack = rollBackLater(other, 3500);

                IdempotencyEngine.Start started = holder.start(key, HASH, IdempotencyMode.INTENT_FIRST,
                        Duration.ofSeconds(2));

                rolledBack.get(10, TimeUnit.SECONDS);
                if (started instanceof IdempotencyEngine.Proceed proceed) {
                    proceed.execution().abandon();
                }
                assertThat(started).as("the holder's start, its claim taken over before its work")
                        .isInstanceOf(IdempotencyEngine.InProgress.class);
                assertThat(database.queryLong("select count(*) from idempotency_keys where idempotency_key = '"
                        + key.key() + "' and status = 'PROCESSING' and fencing_token::text = '" + takenOverBy[0] + "'"))
                        .as("the claim, still the new holder's").isEqualTo(1);
            } finally {
                holder.shutdown();
            }
        }
    }

    /** A database with the library's table. */
    private static TestPostgres.Database migratedDatabase() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource migration = database.dataSource(2)) {
            new IdempotencySchemaMigrator(migration, IdempotencySchema.DEFAULT_TABLE_NAME).migrate();
        }
        return database;
    }

    /**
     * Another transaction's claim of {@code key} on {@code connection}, not yet committed (an intent whose commit
     * stalls).
     */
    private static void holdUncommittedClaim(Connection connection, Statement statement, ScopedKey key)
            throws Exception {
        connection.setAutoCommit(false);
        statement.execute("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash,"
                + " fencing_token, expires_at, locked_until) values ('', 'POST /charges', '" + key.key()
                + "', 'PROCESSING', '" + HASH + "', gen_random_uuid(), now() + interval '1 day',"
                + " now() + interval '1 day')");
    }

    private static CompletableFuture<Void> rollBackLater(Connection connection, long millis) {
        return Async.run(() -> {
            try {
                Thread.sleep(millis);
                connection.rollback();
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
    }

    private static IdempotencyEngine engine(HikariDataSource pool, PostgresIdempotencyStore store, Duration maxWait) {
        return new IdempotencyEngine(store, new SpringTransactions(new DataSourceTransactionManager(pool)),
                StoragePolicy.DEFAULT, DAY, maxWait, StaleClaimResolver.RERUN, new DownstreamKeys("secret"));
    }
}
