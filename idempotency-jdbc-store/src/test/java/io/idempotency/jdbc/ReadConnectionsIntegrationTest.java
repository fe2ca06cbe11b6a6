package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.ScopedKey;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.postgresql.ds.PGSimpleDataSource;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.jdbc.datasource.DelegatingDataSource;
import org.springframework.jdbc.datasource.TransactionAwareDataSourceProxy;
import org.springframework.transaction.support.TransactionTemplate;

import javax.sql.DataSource;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicBoolean;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

/**
 * The connections the library reads on outside a transaction of its own go back to the pool outside a transaction,
 * and a connection of the caller's transaction is left to it.
 */
class ReadConnectionsIntegrationTest {

    private static final String TABLE = "idempotency_keys";

    /**
     * A rollback refused by a connection that is still alive (a driver's or a proxy's failure) would leave it in the
     * pool inside its transaction, "idle in transaction": the connection is given up instead, which ends the
     * transaction with the session, and the read it served is still answered. HikariCP's own rollback on return is
     * refused too here, as it would be on such a connection.
     */
    @Test
    void aConnectionWhoseRollbackIsRefusedDoesNotGoBackInItsTransaction() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        AtomicBoolean refuseRollbacks = new AtomicBoolean();
        try (HikariDataSource pool = refusingPool(database, refuseRollbacks)) {
            long[] backend = new long[1];
            refuseRollbacks.set(true);
            Throwable thrown = catchThrowable(() -> {
                try (Connection connection = ReadConnections.borrow(pool);
                     Statement statement = connection.createStatement();
                     ResultSet rs = statement.executeQuery("select pg_backend_pid()")) {
                    rs.next();
                    backend[0] = rs.getLong(1);
                }
            });
            refuseRollbacks.set(false);

            assertThat(backend[0]).isPositive();
            assertThat(database.queryLong("select count(*) from pg_stat_activity where pid = " + backend[0]
                    + " and state like 'idle in transaction%'")).as("session left inside its transaction").isZero();
            assertThat(thrown).as("the read was answered").isNull();
            assertThat(new JdbcTemplate(pool).queryForObject("select 1", Integer.class))
                    .as("the pool still serves").isEqualTo(1);
        }
    }

    /**
     * The store's look-up made outside a transaction ends its read the same way: a connection that refuses the rollback
     * is given up, not given back inside its transaction, and the look-up is answered.
     */
    @Test
    void aStoreReadWhoseRollbackIsRefusedDoesNotGoBackInItsTransaction() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        AtomicBoolean refuseRollbacks = new AtomicBoolean();
        try (HikariDataSource migrating = database.dataSource(2)) {
            new IdempotencySchemaMigrator(migrating, TABLE).migrate();
        }
        try (HikariDataSource pool = refusingPool(database, refuseRollbacks)) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(pool, TABLE);
            long backend = new JdbcTemplate(pool).queryForObject("select pg_backend_pid()", Long.class);
            refuseRollbacks.set(true);
            Throwable thrown = catchThrowable(() -> store.find(new ScopedKey("", "POST /orders", "k-1")));
            refuseRollbacks.set(false);

            assertThat(database.queryLong("select count(*) from pg_stat_activity where pid = " + backend
                    + " and state like 'idle in transaction%'")).as("session left inside its transaction").isZero();
            assertThat(thrown).as("the look-up was answered").isNull();
        }
    }

    /**
     * An application that asks, inside its own transaction, whether a partition covers now, through a
     * {@link TransactionAwareDataSourceProxy} (whose connection is the transaction's): its work is committed, not
     * rolled back by the look-up.
     */
    @Test
    void aLookUpInTheApplicationsTransactionLeavesItsWorkAlone() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource pool = database.dataSource(2)) {
            new IdempotencySchemaMigrator(pool, TABLE, true).migrate();
            JdbcTemplate jdbc = new JdbcTemplate(pool);
            jdbc.execute("create table orders (reference text primary key)");
            PostgresPartitionMaintenance maintenance = throughProxy(pool);
            maintenance.createAhead(false);

            new TransactionTemplate(new DataSourceTransactionManager(pool)).executeWithoutResult(status -> {
                jdbc.update("insert into orders values ('covered')");
                assertThat(maintenance.coversNow()).isTrue();
                jdbc.update("insert into orders values ('listed')");
                assertThat(maintenance.partitions()).isNotEmpty();
            });

            assertThat(jdbc.queryForList("select reference from orders order by reference", String.class))
                    .as("the application's writes, committed").containsExactly("covered", "listed");
        }
    }

    /**
     * A look-up made while the application's transaction on another DataSource is open (a second database, or a
     * transaction manager of its own) gets a connection of its own, not the application's: its read is rolled back at
     * once, as outside any transaction, rather than left open until the other transaction ends (and on a pool that does
     * not roll back on return, after that). So is the next one in the same transaction.
     */
    @Test
    void aStoreReadInAnotherDataSourcesTransactionEndsItsOwnTransaction() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        TestPostgres.Database elsewhere = TestPostgres.newDatabase();
        try (HikariDataSource migrating = database.dataSource(2)) {
            new IdempotencySchemaMigrator(migrating, TABLE).migrate();
        }
        try (HikariDataSource pool = database.dataSource(2, config -> config.setAutoCommit(false));
             HikariDataSource other = elsewhere.dataSource(1)) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(pool, TABLE);
            inTransactionOf(other, () -> {
                assertThat(store.find(new ScopedKey("", "POST /orders", "k-1"))).isEmpty();
                assertThat(idleInTransaction(database)).as("the look-up's session, left in its transaction").isZero();
                assertThat(store.find(new ScopedKey("", "POST /orders", "k-2"))).isEmpty();
                assertThat(idleInTransaction(database)).as("after a second look-up").isZero();
            });
        }
    }

    /**
     * The same for a partition look-up through a {@link TransactionAwareDataSourceProxy} while the application's
     * transaction on another DataSource is open: the connection is not one of a transaction, and each read is rolled
     * back.
     */
    @Test
    void aPartitionLookUpInAnotherDataSourcesTransactionEndsItsOwnTransaction() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        TestPostgres.Database elsewhere = TestPostgres.newDatabase();
        try (HikariDataSource pool = database.dataSource(2, config -> config.setAutoCommit(false));
             HikariDataSource other = elsewhere.dataSource(1)) {
            new IdempotencySchemaMigrator(pool, TABLE, true).migrate();
            PostgresPartitionMaintenance maintenance = throughProxy(pool);
            maintenance.createAhead(false);
            inTransactionOf(other, () -> {
                assertThat(maintenance.coversNow()).isTrue();
                assertThat(idleInTransaction(database)).as("the look-up's session, left in its transaction").isZero();
                assertThat(maintenance.partitions()).isNotEmpty();
                assertThat(idleInTransaction(database)).as("after a second look-up").isZero();
            });
        }
    }

    /**
     * Partition maintenance run from inside the application's transaction, through a
     * {@link TransactionAwareDataSourceProxy}: it works on a connection of its own, in auto-commit mode (its DDL needs
     * it), not on the transaction's, whose switch to auto-commit would commit the application's work there and then.
     */
    @Test
    void maintenanceInTheApplicationsTransactionLeavesItsWorkAlone() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource pool = database.dataSource(3)) {
            new IdempotencySchemaMigrator(pool, TABLE, true).migrate();
            JdbcTemplate jdbc = new JdbcTemplate(pool);
            jdbc.execute("create table orders (reference text primary key)");
            PostgresPartitionMaintenance maintenance = throughProxy(pool);

            new TransactionTemplate(new DataSourceTransactionManager(pool)).executeWithoutResult(status -> {
                jdbc.update("insert into orders values ('undone')");
                maintenance.createAhead(false);
                status.setRollbackOnly();
            });

            assertThat(jdbc.queryForList("select reference from orders", String.class))
                    .as("the application's write, rolled back with its transaction").isEmpty();
            assertThat(maintenance.coversNow()).isTrue();
        }
    }

    /**
     * Partition maintenance run while the application's transaction on another DataSource is open leaves nothing bound
     * to it either: the look-ups after it still get connections of their own, and roll them back.
     */
    @Test
    void maintenanceInAnotherDataSourcesTransactionLeavesNoConnectionBehind() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        TestPostgres.Database elsewhere = TestPostgres.newDatabase();
        try (HikariDataSource pool = database.dataSource(2, config -> config.setAutoCommit(false));
             HikariDataSource other = elsewhere.dataSource(1)) {
            new IdempotencySchemaMigrator(pool, TABLE, true).migrate();
            PostgresPartitionMaintenance maintenance = throughProxy(pool);
            inTransactionOf(other, () -> {
                maintenance.createAhead(false);
                assertThat(maintenance.coversNow()).isTrue();
                assertThat(idleInTransaction(database)).as("the look-up's session, left in its transaction").isZero();
            });
        }
    }

    /**
     * Inside the application's transaction, a connection borrowed through a {@link TransactionAwareDataSourceProxy} is
     * the transaction's own — not a second one of the pool, which a pool the requests hold whole would make the
     * look-up wait for — and giving it back leaves the transaction's work to it.
     */
    @Test
    void aConnectionBorrowedThroughTheProxyInTheApplicationsTransactionIsTheTransactions() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource pool = database.dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(pool);
            jdbc.execute("create table orders (reference text primary key)");
            DataSource proxy = new TransactionAwareDataSourceProxy(pool);

            new TransactionTemplate(new DataSourceTransactionManager(pool)).executeWithoutResult(status -> {
                jdbc.update("insert into orders values ('kept')");
                long transactions = jdbc.queryForObject("select pg_backend_pid()", Long.class);
                try (Connection connection = ReadConnections.borrow(proxy);
                     Statement statement = connection.createStatement();
                     ResultSet rs = statement.executeQuery("select pg_backend_pid()")) {
                    rs.next();
                    assertThat(rs.getLong(1)).as("the transaction's backend process").isEqualTo(transactions);
                } catch (SQLException e) {
                    throw new IllegalStateException(e);
                }
            });

            assertThat(jdbc.queryForList("select reference from orders", String.class))
                    .as("the application's write, committed").containsExactly("kept");
        }
    }

    /**
     * A connection that refuses both the rollback and the abort is still closed, and the rollback's failure is thrown
     * (the abort's suppressed in it): given back silently, it would go to the pool inside its transaction.
     */
    @Test
    void aConnectionThatCanBeNeitherRolledBackNorAbortedIsClosedAndTheFailureThrown() throws SQLException {
        TestPostgres.Database database = TestPostgres.newDatabase();
        SQLException rollbackRefused = new SQLException("rollback refused", "XX000");
        SQLException abortRefused = new SQLException("abort refused", "XX000");
        try (Connection real = DriverManager.getConnection(database.url(), database.user(), database.password())) {
            real.setAutoCommit(false);
            Connection refusing = failing(real, "rollback", rollbackRefused, "abort", abortRefused);

            Connection borrowed = ReadConnections.borrow(new SingleConnection(refusing));
            try (Statement statement = borrowed.createStatement()) {
                statement.executeQuery("select 1").close();
            }
            Throwable thrown = catchThrowable(borrowed::close);

            assertThat(thrown).isSameAs(rollbackRefused);
            assertThat(thrown.getSuppressed()).containsExactly(abortRefused);
            assertThat(real.isClosed()).as("closed all the same").isTrue();
        }
    }

    /** A connection rolled back whose close then fails: the close's failure is thrown, not swallowed. */
    @Test
    void aFailedCloseAfterTheRollbackIsThrown() throws SQLException {
        TestPostgres.Database database = TestPostgres.newDatabase();
        SQLException closeRefused = new SQLException("close refused", "08006");
        try (Connection real = DriverManager.getConnection(database.url(), database.user(), database.password())) {
            real.setAutoCommit(false);
            Connection refusing = failing(real, "close", closeRefused, "none", null);

            Connection borrowed = ReadConnections.borrow(new SingleConnection(refusing));
            long read;
            try (Statement statement = borrowed.createStatement();
                 ResultSet rs = statement.executeQuery("select txid_current()")) {
                rs.next();
                read = rs.getLong(1);
            }

            assertThat(catchThrowable(borrowed::close)).isSameAs(closeRefused);
            try (Statement statement = real.createStatement();
                 ResultSet rs = statement.executeQuery("select txid_current()")) {
                rs.next();
                assertThat(rs.getLong(1)).as("the read's transaction was rolled back: another one began")
                        .isNotEqualTo(read);
            }
        }
    }

    /** {@code connection}, whose methods named {@code first} and {@code second} (without arguments) throw. */
    private static Connection failing(Connection connection, String first, SQLException firstFailure, String second,
                                      SQLException secondFailure) {
        return (Connection) Proxy.newProxyInstance(ReadConnectionsIntegrationTest.class.getClassLoader(),
                new Class<?>[] {Connection.class}, (proxy, method, args) -> {
                    if (method.getName().equals(first) && method.getParameterCount() == 0) {
                        throw firstFailure;
                    }
                    if (method.getName().equals(second)) {
                        throw secondFailure;
                    }
                    try {
                        return method.invoke(connection, args);
                    } catch (InvocationTargetException e) {
                        throw e.getCause();
                    }
                });
    }

    /** A DataSource that hands out one connection. */
    private static final class SingleConnection extends DelegatingDataSource {

        private final Connection connection;

        SingleConnection(Connection connection) {
            super(new PGSimpleDataSource());
            this.connection = connection;
        }

        @Override
        public Connection getConnection() {
            return connection;
        }
    }

    /** Hourly partitions of {@link #TABLE} kept through a {@link TransactionAwareDataSourceProxy} of {@code pool}. */
    private static PostgresPartitionMaintenance throughProxy(DataSource pool) {
        return new PostgresPartitionMaintenance(new TransactionAwareDataSourceProxy(pool), TABLE, Duration.ofHours(1),
                1, Duration.ofSeconds(5));
    }

    /** Runs {@code work} in a transaction on {@code other}, which has used its connection already. */
    private static void inTransactionOf(DataSource other, Runnable work) {
        new TransactionTemplate(new DataSourceTransactionManager(other)).executeWithoutResult(status -> {
            new JdbcTemplate(other).queryForObject("select 1", Integer.class);
            work.run();
        });
    }

    /** Sessions of {@code database} that sit idle inside a transaction. */
    private static long idleInTransaction(TestPostgres.Database database) {
        return database.queryLong("select count(*) from pg_stat_activity where application_name = '"
                + database.schema() + "' and state like 'idle in transaction%'");
    }

    /**
     * A HikariCP pool of one connection without auto-commit, whose rollbacks (HikariCP's own on return too) fail while
     * {@code refuseRollbacks} is set.
     */
    private static HikariDataSource refusingPool(TestPostgres.Database database, AtomicBoolean refuseRollbacks) {
        PGSimpleDataSource driver = new PGSimpleDataSource();
        driver.setURL(database.url());
        driver.setUser(database.user());
        driver.setPassword(database.password());
        DataSource refusing = new DelegatingDataSource(driver) {
            @Override
            public Connection getConnection() throws SQLException {
                return refusingRollbacks(super.getConnection(), refuseRollbacks);
            }
        };
        HikariConfig config = new HikariConfig();
        config.setDataSource(refusing);
        config.setAutoCommit(false);
        config.setMaximumPoolSize(1);
        return new HikariDataSource(config);
    }

    /** {@code connection}, whose rollbacks fail while {@code refuse} is set and the connection is open. */
    private static Connection refusingRollbacks(Connection connection, AtomicBoolean refuse) {
        return (Connection) Proxy.newProxyInstance(ReadConnectionsIntegrationTest.class.getClassLoader(),
                new Class<?>[] {Connection.class}, (proxy, method, args) -> {
                    if (method.getName().equals("rollback") && method.getParameterCount() == 0 && refuse.get()
                            && !connection.isClosed()) {
                        throw new SQLException("rollback refused", "XX000");
                    }
                    try {
                        return method.invoke(connection, args);
                    } catch (InvocationTargetException e) {
                        throw e.getCause();
                    }
                });
    }
}
