package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.Transactions;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.Async;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The PostgreSQL facts the claim is built on, as docs/how-it-works.md states them ("The claim, and the PostgreSQL facts
 * it relies on"), pinned on the server itself rather than through the store: should a version of PostgreSQL behave
 * otherwise, the design is wrong there, whatever the store's own tests say. The store's tests run on the oldest and
 * newest supported versions too, so these facts are checked on each.
 */
class PostgresFactsIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();
    private static final HikariDataSource POOL = DATABASE.dataSource(4);

    static {
        try (Connection connection = POOL.getConnection(); Statement statement = connection.createStatement()) {
            statement.execute("create table facts (k text primary key, v text not null)");
        } catch (SQLException e) {
            throw new IllegalStateException(e);
        }
        new IdempotencySchemaMigrator(POOL, IdempotencySchema.DEFAULT_TABLE_NAME).migrate();
    }

    @AfterAll
    static void closePool() {
        POOL.close();
    }

    /** A concurrent insert of the key blocks on the uncommitted row until its transaction ends; then inserts none. */
    @Test
    void anInsertOnConflictDoNothingWaitsForTheUncommittedRowItConflictsWith() throws Exception {
        String key = newKey();
        try (Connection holder = transaction(); Connection other = transaction()) {
            insert(holder, key, "first");
            CompletableFuture<Integer> waiting = Async.supply(() -> insertOrNothing(other, key, "second"));
            DATABASE.awaitLockWaiter(Duration.ofSeconds(10));
            assertThat(waiting).as("blocked while the conflicting row is uncommitted").isNotDone();

            holder.commit();
            assertThat(waiting.get(10, TimeUnit.SECONDS)).as("the committed row wins: nothing inserted").isZero();
            other.commit();
        }
        assertThat(value(key)).isEqualTo("first");
    }

    /** When the holder rolls back instead, the waiting insert inserts its row. */
    @Test
    void theWaitingInsertTakesTheKeyWhenTheHolderRollsBack() throws Exception {
        String key = newKey();
        try (Connection holder = transaction(); Connection other = transaction()) {
            insert(holder, key, "first");
            CompletableFuture<Integer> waiting = Async.supply(() -> insertOrNothing(other, key, "second"));
            DATABASE.awaitLockWaiter(Duration.ofSeconds(10));

            holder.rollback();
            assertThat(waiting.get(10, TimeUnit.SECONDS)).isEqualTo(1);
            other.commit();
        }
        assertThat(value(key)).isEqualTo("second");
    }

    /** lock_timeout ends the wait with SQLSTATE 55P03, and aborts the transaction: it takes no further statement. */
    @Test
    void lockTimeoutEndsTheWaitWith55P03AndAbortsTheTransaction() throws Exception {
        String key = newKey();
        try (Connection holder = transaction(); Connection other = transaction()) {
            insert(holder, key, "first");
            execute(other, "set local lock_timeout = '200ms'");
            long start = System.nanoTime();
            assertThatThrownBy(() -> insertOrNothing(other, key, "second")).isInstanceOf(SqlFailure.class)
                    .hasCauseInstanceOf(SQLException.class)
                    .satisfies(e -> assertThat(((SQLException) e.getCause()).getSQLState()).isEqualTo("55P03"));
            assertThat(Duration.ofNanos(System.nanoTime() - start)).as("bounded by the lock_timeout")
                    .isLessThan(Duration.ofSeconds(5));
            assertThatThrownBy(() -> execute(other, "select 1")).as("the transaction is aborted")
                    .isInstanceOfSatisfying(SQLException.class, e -> assertThat(e.getSQLState()).isEqualTo("25P02"));
            other.rollback();
            holder.rollback();
        }
    }

    /**
     * Under READ COMMITTED, one statement that inserts or else reads the key shows neither its own row nor the one
     * committed while it waited (its snapshot predates the wait); a separate SELECT after it shows the committed row.
     */
    @Test
    void underReadCommittedOnlyASeparateSelectSeesTheRowCommittedWhileTheInsertWaited() throws Exception {
        String key = newKey();
        try (Connection holder = transaction(); Connection other = transaction()) {
            insert(holder, key, "first");
            CompletableFuture<List<String>> insertOrRead = Async.supply(() -> values(other,
                    "with inserted as (insert into facts (k, v) values (?, 'second') on conflict do nothing"
                            + " returning v) select v from inserted union all select v from facts where k = ?", key));
            DATABASE.awaitLockWaiter(Duration.ofSeconds(10));

            holder.commit();
            assertThat(insertOrRead.get(10, TimeUnit.SECONDS)).as("the single statement shows nothing").isEmpty();
            assertThat(values(other, "select v from facts where k = ?", key)).as("a separate SELECT sees it")
                    .containsExactly("first");
            other.commit();
        }
    }

    /** Under REPEATABLE READ or SERIALIZABLE, the insert that waited for a row committed meanwhile fails with 40001. */
    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"repeatable read", "serializable"})
    void underAStricterIsolationTheInsertThatWaitedFailsWith40001(String isolation) throws Exception {
        String key = newKey();
        try (Connection holder = transaction(); Connection other = transaction()) {
            execute(other, "set transaction isolation level " + isolation);
            insert(holder, key, "first");
            CompletableFuture<Integer> waiting = Async.supply(() -> insertOrNothing(other, key, "second"));
            DATABASE.awaitLockWaiter(Duration.ofSeconds(10));

            holder.commit();
            assertThat(waiting).failsWithin(Duration.ofSeconds(10)).withThrowableThat()
                    .havingRootCause().isInstanceOfSatisfying(SQLException.class,
                            e -> assertThat(e.getSQLState()).isEqualTo("40001"));
            other.rollback();
        }
    }

    /**
     * The bounded wait covers the key's row, not the table: a statement takes its table lock before the claim's
     * lock_timeout is set, so while DDL holds the table's ACCESS EXCLUSIVE lock a claim waits past its bounded wait,
     * and once the lock is gone it goes on as usual (a claim, not "in progress" nor an error). The replay read waits
     * for the table alike.
     */
    @Test
    void aClaimAndTheReplayReadWaitForDdlOnTheTableBeyondTheBoundedWaitThenGoOn() throws Exception {
        PostgresIdempotencyStore store = new PostgresIdempotencyStore(POOL, IdempotencySchema.DEFAULT_TABLE_NAME);
        Transactions transactions = new SpringTransactions(new DataSourceTransactionManager(POOL));
        ScopedKey key = new ScopedKey("", "POST /facts", newKey());
        Duration wait = Duration.ofMillis(200);
        try (Connection migration = transaction()) {
            execute(migration, "lock table " + IdempotencySchema.DEFAULT_TABLE_NAME + " in access exclusive mode");
            CompletableFuture<ClaimResult> claim = Async.supply(() -> {
                Transactions.Transaction transaction = transactions.begin();
                try {
                    return store.claim(new ClaimRequest(key, "a".repeat(64), Duration.ofDays(1), wait));
                } finally {
                    transaction.rollback();
                }
            });
            CompletableFuture<Boolean> read = Async.supply(() -> store.find(key).isPresent());
            awaitLockWaiters(2);
            Thread.sleep(wait.multipliedBy(4).toMillis());
            assertThat(claim).as("still waiting for the table, four times its bounded wait later").isNotDone();
            assertThat(read).as("the read waits for the table too").isNotDone();

            migration.commit();
            assertThat(claim.get(10, TimeUnit.SECONDS)).isInstanceOf(ClaimResult.Claimed.class);
            assertThat(read.get(10, TimeUnit.SECONDS)).isFalse();
        }
    }

    private static void awaitLockWaiters(int count) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (DATABASE.lockWaiters() < count) {
            assertThat(System.nanoTime()).as(count + " sessions waiting for a lock").isLessThan(deadline);
            Thread.sleep(20);
        }
    }

    private static String newKey() {
        return UUID.randomUUID().toString();
    }

    private static Connection transaction() throws SQLException {
        Connection connection = POOL.getConnection();
        connection.setAutoCommit(false);
        return connection;
    }

    private static void execute(Connection connection, String sql) throws SQLException {
        try (Statement statement = connection.createStatement()) {
            statement.execute(sql);
        }
    }

    private static void insert(Connection connection, String key, String value) throws SQLException {
        assertThat(insertOrNothing(connection, key, value)).isEqualTo(1);
    }

    private static int insertOrNothing(Connection connection, String key, String value) {
        try (PreparedStatement insert = connection.prepareStatement(
                "insert into facts (k, v) values (?, ?) on conflict do nothing")) {
            insert.setString(1, key);
            insert.setString(2, value);
            return insert.executeUpdate();
        } catch (SQLException e) {
            throw new SqlFailure(e);
        }
    }

    private static List<String> values(Connection connection, String sql, String key) {
        try (PreparedStatement query = connection.prepareStatement(sql)) {
            for (int i = 1; i <= query.getParameterMetaData().getParameterCount(); i++) {
                query.setString(i, key);
            }
            List<String> values = new ArrayList<>();
            try (ResultSet rows = query.executeQuery()) {
                while (rows.next()) {
                    values.add(rows.getString(1));
                }
            }
            return values;
        } catch (SQLException e) {
            throw new SqlFailure(e);
        }
    }

    private static String value(String key) throws SQLException {
        try (Connection connection = POOL.getConnection()) {
            List<String> values = values(connection, "select v from facts where k = ?", key);
            return values.isEmpty() ? null : values.get(0);
        }
    }

    /** An SQLException passed through a lambda, unwrapped where a test asserts on it. */
    private static final class SqlFailure extends RuntimeException {
        SqlFailure(SQLException cause) {
            super(cause);
        }
    }
}
