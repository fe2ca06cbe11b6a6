package io.idempotency.mariadb;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StoredResponse;
import io.idempotency.spring.IdempotencyAutoConfiguration;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIf;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.assertj.AssertableApplicationContext;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.AbstractDataSource;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.jdbc.datasource.SingleConnectionDataSource;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.transaction.support.TransactionTemplate;

import javax.sql.DataSource;
import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The MariaDB store's table comes from the application's own migrations, so it is whatever they made: the starter
 * checks it once they have run, and an application whose table cannot keep the store's promises does not start —
 * above all one whose key columns do not compare text byte for byte (a migration that leaves out the collation gets
 * the database's default, {@code utf8mb4_general_ci}), where "Alice" and "alice" would be one caller and each be
 * answered with the other's stored answers.
 */
@EnabledIf("io.idempotency.mariadb.TestMariaDb#available")
class MariaDbTableCheckTest {

    private static final String SCRIPT = MariaDbIdempotencyStore.schema("api_requests");

    @Test
    void keyColumnsComparedWithoutRegardToCaseAreRefusedAtStartup() {
        // named, not the server's default: that is latin1_swedish_ci on a server built without configuration
        String table = SCRIPT.replace("caller           varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin",
                "caller           varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci");
        HikariDataSource dataSource = databaseWith(table);
        ClaimResult alice = claim(dataSource, "api_requests", new ScopedKey("Alice", "POST /payments", "k-1"));
        ClaimResult otherAlice = claim(dataSource, "api_requests", new ScopedKey("alice", "POST /payments", "k-1"));
        assertThat(alice).isInstanceOf(ClaimResult.Claimed.class);
        assertThat(otherAlice).as("what the check prevents: another caller's record")
                .isInstanceOf(ClaimResult.Existing.class);

        refused(dataSource, "api_requests", "table api_requests", "caller", "utf8mb4_general_ci",
                "utf8mb4_nopad_bin", MariaDbIdempotencyStore.SCHEMA_SCRIPT.substring(1));
    }

    @Test
    void keyColumnsThatPadSpacesAreRefusedAtStartup() {
        refused(SCRIPT.replace("idempotency_key  varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin",
                        "idempotency_key  varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"),
                "idempotency_key", "utf8mb4_bin", "utf8mb4_nopad_bin");
    }

    @Test
    void keyColumnsTooShortForTheLongestKeyAreRefusedAtStartup() {
        refused(SCRIPT.replace("scope            varchar(255)", "scope            varchar(100)"),
                "scope", "varchar(100)", "255");
    }

    @Test
    void aTableWithoutAUniqueKeyOnCallerScopeAndKeyIsRefusedAtStartup() {
        refused(SCRIPT.replace("PRIMARY KEY (caller, scope, idempotency_key),", ""),
                "no unique key on (caller, scope, idempotency_key)");
        refused(SCRIPT.replace("PRIMARY KEY (caller, scope, idempotency_key),",
                        "PRIMARY KEY (caller, scope, idempotency_key(100)),"),
                "no unique key on (caller, scope, idempotency_key)");
        refused(SCRIPT.replace("PRIMARY KEY (caller, scope, idempotency_key),",
                        "PRIMARY KEY (caller, scope, idempotency_key), UNIQUE KEY key_only (idempotency_key),"),
                "key_only", "idempotency_key");
    }

    /**
     * A unique key on a column generated from the key columns (lower(caller), for names that should not differ in
     * case) makes distinct callers' keys collide as one on some of the key columns does: "alice" cannot claim the key
     * "Alice" holds. Such a table is refused too.
     */
    @Test
    void aUniqueKeyOnAColumnGeneratedFromTheKeyColumnsIsRefusedAtStartup() {
        String table = SCRIPT.replace("PRIMARY KEY (caller, scope, idempotency_key),",
                "folded_caller varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin AS (lower(caller)) VIRTUAL,"
                        + " PRIMARY KEY (caller, scope, idempotency_key),"
                        + " UNIQUE KEY callers_folded (folded_caller, scope, idempotency_key),");
        HikariDataSource dataSource = databaseWith(table);
        ClaimResult alice = claim(dataSource, "api_requests", new ScopedKey("Alice", "POST /payments", "k-1"));
        assertThat(alice).isInstanceOf(ClaimResult.Claimed.class);
        assertThatThrownBy(() -> claim(dataSource, "api_requests", new ScopedKey("alice", "POST /payments", "k-1")))
                .as("what the check prevents: another caller's record in the way")
                .hasMessageContaining("could not claim");

        refused(dataSource, "api_requests", "callers_folded", "folded_caller");
    }

    @Test
    void timesInSessionTimeZonesOrWithoutFractionsAreRefusedAtStartup() {
        refused(SCRIPT.replace("expires_at       datetime(6)", "expires_at       timestamp(6)"),
                "expires_at", "timestamp", "datetime(6)");
        refused(SCRIPT.replace("locked_until     datetime(6)", "locked_until     datetime"),
                "locked_until", "datetime(0)", "datetime(6)");
    }

    /**
     * A time the claim writes once, declared {@code ON UPDATE CURRENT_TIMESTAMP} (as an ORM or a habit of
     * {@code updated_at} columns may make it), is rewritten by the database at every change that does not set it: the
     * answer's write makes the record expire at once, cleanup deletes it, and a retry runs the request again.
     */
    @Test
    void timesRewrittenOnEveryUpdateAreRefusedAtStartup() {
        String table = SCRIPT.replace("expires_at       datetime(6)  NOT NULL,",
                "expires_at       datetime(6)  NOT NULL ON UPDATE CURRENT_TIMESTAMP(6),");
        HikariDataSource dataSource = databaseWith(table);
        MariaDbIdempotencyStore store = new MariaDbIdempotencyStore(dataSource, "api_requests");
        ScopedKey key = new ScopedKey("", "POST /payments", "k-1");
        readCommitted(dataSource).executeWithoutResult(status -> {
            ClaimResult claimed = store.claim(claimOf(key));
            assertThat(store.complete(key, ((ClaimResult.Claimed) claimed).fencingToken(),
                    new StoredResponse(201, List.of(), "charged".getBytes()))).isTrue();
        });
        assertThat(store.find(key).orElseThrow().expiresAt()).as("what the check prevents: kept a day no more")
                .isBefore(Instant.now().plus(Duration.ofHours(20)));

        refused(dataSource, "api_requests", "expires_at", "ON UPDATE");
        refused(SCRIPT.replace("created_at       datetime(6)  NOT NULL,",
                "created_at       datetime(6)  NOT NULL ON UPDATE CURRENT_TIMESTAMP(6),"), "created_at", "ON UPDATE");
        HikariDataSource updatedAt = databaseWith(SCRIPT.replace("updated_at       datetime(6)  NOT NULL,",
                "updated_at       datetime(6)  NOT NULL ON UPDATE CURRENT_TIMESTAMP(6),"));
        run(updatedAt, "api_requests", context -> assertThat(context).hasNotFailed());
    }

    /**
     * A claim has no answer yet, and a claim of the default mode no lease: it leaves those columns empty. Made
     * {@code NOT NULL} by another tool (an ORM's DDL for a primitive {@code int} status), they fail every claim, each
     * request answered 503.
     */
    @Test
    void columnsAClaimLeavesEmptyMustTakeNoValue() {
        String table = SCRIPT.replace("response_status  int,", "response_status  int NOT NULL,")
                .replace("locked_until     datetime(6),", "locked_until     datetime(6) NOT NULL,")
                .replace("CONSTRAINT response_check CHECK ((status = 'SUCCEEDED') = (response_status IS NOT NULL))",
                        "CONSTRAINT response_check CHECK (1 = 1)");
        HikariDataSource dataSource = databaseWith(table);
        assertThatThrownBy(() -> claim(dataSource, "api_requests", new ScopedKey("", "POST /payments", "k-1")))
                .as("what the check prevents").hasStackTraceContaining("response_status");

        refused(dataSource, "api_requests", "response_status", "locked_until", "NOT NULL");
    }

    /**
     * A table made by another tool may have columns of its own (a surrogate id from a sequence, a version), which the
     * claim writes nothing in: one that is {@code NOT NULL} with no default fails every claim, each request answered
     * 503. Extra columns that fill themselves (a default, {@code AUTO_INCREMENT}, generated) or may stay empty pass.
     */
    @Test
    void columnsOfTheTablesOwnThatAClaimCannotLeaveEmptyAreRefused() {
        String table = SCRIPT.replace("locked_until     datetime(6),",
                "locked_until     datetime(6), id bigint NOT NULL,");
        HikariDataSource dataSource = databaseWith(table);
        assertThatThrownBy(() -> claim(dataSource, "api_requests", new ScopedKey("", "POST /payments", "k-1")))
                .as("what the check prevents").hasStackTraceContaining("'id'");

        refused(dataSource, "api_requests", "id", "NOT NULL");

        HikariDataSource filled = databaseWith(SCRIPT.replace("locked_until     datetime(6),", "locked_until     datetime(6),"
                + " id bigint NOT NULL AUTO_INCREMENT UNIQUE, version int NOT NULL DEFAULT 0, note text,"
                + " key_length int AS (length(idempotency_key)) STORED,"));
        run(filled, "api_requests", context -> assertThat(context).hasNotFailed());
    }

    /**
     * The store writes its table's name unquoted in its statements. A word MariaDB reserves ({@code keys}) names a
     * table only quoted, as a migration may have made it: every claim would be refused as a syntax error, each
     * request answered 503.
     */
    @Test
    void aTableNamedByAWordMariaDbReservesIsRefusedAtStartup() {
        HikariDataSource dataSource = databaseWith(MariaDbIdempotencyStore.schema("keys")
                .replace("CREATE TABLE keys (", "CREATE TABLE `keys` ("));
        assertThatThrownBy(() -> claim(dataSource, "keys", new ScopedKey("", "POST /payments", "k-1")))
                .as("what the check prevents").hasStackTraceContaining("syntax");

        refused(dataSource, "keys", "table keys", "unquoted", "reserves");
    }

    @Test
    void columnsMissingOrAnotherEngineAreRefusedAtStartup() {
        refused("CREATE TABLE api_requests (idempotency_key varchar(255) PRIMARY KEY, response text)",
                "lacks columns", "caller", "fencing_token");
        // MyISAM keys hold 1,000 bytes: shorter key columns, which are refused as well
        refused(SCRIPT.replace("ENGINE = InnoDB", "ENGINE = MyISAM").replace("varchar(255)", "varchar(80)"),
                "MyISAM", "InnoDB");
    }

    @Test
    void aMissingTableIsRefusedAtStartup() {
        HikariDataSource dataSource = TestMariaDb.newDatabase().dataSource(4);
        refused(dataSource, "api_requests", "table api_requests does not exist",
                MariaDbIdempotencyStore.SCHEMA_SCRIPT.substring(1));
    }

    /**
     * Table names are case-sensitive on a server that keeps them as written (lower_case_table_names=0, Linux's
     * default): the store's statements would not find a table named in another case, and the check must not either.
     */
    @Test
    void aTableNamedInAnotherCaseIsMissingWhereNamesAreCaseSensitive() {
        HikariDataSource dataSource = TestMariaDb.newDatabase().dataSource(4);
        JdbcTemplate jdbc = new JdbcTemplate(dataSource);
        jdbc.execute(MariaDbIdempotencyStore.schema("ApiRequests"));
        if (jdbc.queryForObject("SELECT @@lower_case_table_names", Integer.class) == 0) {
            refused(dataSource, "apirequests", "table apirequests does not exist");
        } else {
            run(dataSource, "apirequests", context -> assertThat(context).hasNotFailed());
        }
    }

    /**
     * The table is right, but the application's database user was granted too little on it (SELECT and INSERT, by a
     * DBA who did not know a claim updates): the application started, and every claim then failed. Without DELETE,
     * no intent-first claim could be released, and every cleanup run failed. A grant of what the store reads and
     * writes, column by column too, starts.
     */
    @Test
    void aUserThatMayNotReadInsertUpdateAndDeleteTheTableIsRefusedAtStartup() {
        TestMariaDb.Database database = TestMariaDb.newDatabase();
        String user = "app_" + UUID.randomUUID().toString().substring(0, 8);
        try (HikariDataSource admin = database.dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(admin);
            jdbc.execute(SCRIPT);
            jdbc.execute("CREATE USER '" + user + "'@'%' IDENTIFIED BY 'secret'");
            try {
                jdbc.execute("GRANT SELECT, INSERT ON " + database.name() + ".api_requests TO '" + user + "'@'%'");
                HikariDataSource limited = as(database, user);
                assertThatThrownBy(() -> claim(limited, "api_requests", new ScopedKey("", "POST /payments", "k-1")))
                        .as("what the check prevents: every claim refused")
                        .hasStackTraceContaining("UPDATE command denied");
                refused(limited, "api_requests", "table api_requests may not be used by the application's database"
                        + " user " + user, "UPDATE command denied");

                // column by column: the claim's INSERT … ON DUPLICATE KEY UPDATE needs UPDATE on what it inserts
                jdbc.execute("GRANT UPDATE (caller, scope, idempotency_key, status, request_hash, fencing_token,"
                        + " response_status, response_headers, response_body, created_at, updated_at, expires_at,"
                        + " locked_until) ON " + database.name() + ".api_requests TO '" + user + "'@'%'");
                HikariDataSource updating = as(database, user);
                ClaimResult claimed = claim(updating, "api_requests", new ScopedKey("", "POST /payments", "k-2"));
                assertThat(claimed).isInstanceOf(ClaimResult.Claimed.class);
                // a committed claim released, and a record the cleanup removes, are deleted
                refused(updating, "api_requests", "DELETE command denied");

                jdbc.execute("GRANT DELETE ON " + database.name() + ".api_requests TO '" + user + "'@'%'");
                HikariDataSource granted = as(database, user);
                run(granted, "api_requests", context -> assertThat(context).hasNotFailed());
            } finally {
                jdbc.execute("DROP USER '" + user + "'@'%'");
            }
        }
    }

    /**
     * Every claim writes at READ COMMITTED, where InnoDB can only be logged row by row: a server that keeps a binary
     * log with {@code binlog_format=STATEMENT} refuses each such write (error 1665). The table and the user were
     * right, so the application started, and then answered every idempotent request 503. It does not start; on the
     * same server, an application whose sessions log in MariaDB's default format, {@code MIXED}, starts and claims.
     */
    @Test
    void aServerThatLogsStatementsWhichRefuseEveryClaimIsRefusedAtStartup() {
        assumeTrue(TestMariaDb.serversCanBeStarted(), "a server with a binary log is started for this test");
        TestMariaDb.Database database = TestMariaDb.newDatabaseOnServerStartedWith("--log-bin",
                "--binlog-format=STATEMENT");
        try (HikariDataSource admin = database.dataSource(2)) {
            new JdbcTemplate(admin).execute(SCRIPT);
        }
        HikariDataSource statements = database.dataSource(4);
        assertThatThrownBy(() -> claim(statements, "api_requests", new ScopedKey("", "POST /payments", "k-1")))
                .as("what the check prevents: every claim refused")
                .hasStackTraceContaining("BINLOG_FORMAT = STATEMENT");
        refused(statements, "api_requests", "table api_requests cannot be written at READ COMMITTED",
                "binlog_format=STATEMENT", "MIXED");

        HikariDataSource mixed = database.dataSource(4, config -> config.setConnectionInitSql(
                "SET SESSION binlog_format = 'MIXED'"));
        assertThat(claim(mixed, "api_requests", new ScopedKey("", "POST /payments", "k-2")))
                .isInstanceOf(ClaimResult.Claimed.class);
        run(mixed, "api_requests", context -> assertThat(context).hasNotFailed());
    }

    /**
     * Where the SQL mode has {@code EMPTY_STRING_IS_NULL}, an empty string in a statement's text is NULL, and
     * Connector/J writes the store's parameters into the text: the anonymous caller ({@code ""}) of every claim is
     * refused (the column takes no NULL), and an empty answer body would be stored as NULL. The table and the user are
     * right, so the application started, and then failed every anonymous request. It does not start; the same pool
     * without that mode starts and claims.
     */
    @Test
    void aSessionThatTakesEmptyStringsForNullIsRefusedAtStartup() {
        TestMariaDb.Database database = TestMariaDb.newDatabase();
        try (HikariDataSource admin = database.dataSource(2)) {
            new JdbcTemplate(admin).execute(SCRIPT);
        }
        HikariDataSource emptyIsNull = database.dataSource(4, config -> config.setConnectionInitSql(
                "SET SESSION sql_mode = CONCAT(@@sql_mode, ',EMPTY_STRING_IS_NULL')"));
        assertThatThrownBy(() -> claim(emptyIsNull, "api_requests", new ScopedKey("", "POST /payments", "k-1")))
                .as("what the check prevents: every anonymous claim refused")
                .hasStackTraceContaining("caller");
        refused(emptyIsNull, "api_requests", "EMPTY_STRING_IS_NULL", "sql_mode");

        HikariDataSource plain = database.dataSource(4);
        assertThat(claim(plain, "api_requests", new ScopedKey("", "POST /payments", "k-2")))
                .isInstanceOf(ClaimResult.Claimed.class);
        run(plain, "api_requests", context -> assertThat(context).hasNotFailed());
    }

    /** A pool on {@code database} as {@code user}. */
    private static HikariDataSource as(TestMariaDb.Database database, String user) {
        return database.dataSource(2, config -> {
            config.setJdbcUrl(database.url().replaceAll("([?&])(user|password)=[^&]*&?", "$1")
                    .replaceAll("[?&]$", ""));
            config.setUsername(user);
            config.setPassword("secret");
        });
    }

    /**
     * {@code idempotency.jdbc.table-name} names the table the library creates, checks and cleans up; the MariaDB
     * store's table is the one it is given. Set to another, the property says something untrue of the application.
     */
    @Test
    void aConfiguredTableNameThatIsNotTheStoresIsRefusedAtStartup() {
        TestMariaDb.Database database = TestMariaDb.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(4)) {
            new JdbcTemplate(dataSource).execute(SCRIPT);
            contextRunner(dataSource, "api_requests").withPropertyValues("idempotency.jdbc.table-name=payments_keys")
                    .run(context -> assertThat(context).getFailure().hasStackTraceContaining(
                            "idempotency.jdbc.table-name (payments_keys) names another table than the application's"
                                    + " IdempotencyStore, which keeps its records in api_requests: the setting says"
                                    + " the application uses a table it does not use"));
        }
        try (HikariDataSource dataSource = database.dataSource(4)) { // the context closed the one before
            contextRunner(dataSource, "api_requests").withPropertyValues("idempotency.jdbc.table-name=API_REQUESTS")
                    .run(context -> assertThat(context).hasNotFailed());
        }
    }

    @Test
    void theShippedScriptUnderTheStoresTableNameStarts() {
        HikariDataSource dataSource = databaseWith(SCRIPT);
        // the store's table name, not the property's: the starter does not know the MariaDB store's table
        run(dataSource, "api_requests", context -> assertThat(context).hasNotFailed());
    }

    /**
     * A pool that hands out connections without auto-commit and does not roll back those given back (Tomcat JDBC's
     * default, {@code rollbackOnReturn=false}, or a pool of one's own) gets the connections the checks read on back
     * outside a transaction: here one that hands out its two connections in turn.
     */
    @Test
    void theChecksGiveTheirConnectionsBackOutsideATransaction() throws Exception {
        TestMariaDb.Database database = TestMariaDb.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(1)) {
            new JdbcTemplate(dataSource).execute(SCRIPT);
        }
        List<SingleConnectionDataSource> connections = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            SingleConnectionDataSource connection = new SingleConnectionDataSource(database.url(), true);
            connection.setUsername(database.user());
            connection.setPassword(database.password());
            connection.setAutoCommit(false);
            connections.add(connection);
        }
        AtomicInteger handedOut = new AtomicInteger();
        DataSource inTurn = new AbstractDataSource() {
            @Override
            public Connection getConnection() throws SQLException {
                return connections.get(handedOut.getAndIncrement() % connections.size()).getConnection();
            }

            @Override
            public Connection getConnection(String username, String password) {
                throw new UnsupportedOperationException();
            }
        };
        try {
            MariaDbIdempotencyStore store = new MariaDbIdempotencyStore(inTurn, "api_requests");
            store.checkTable();
            store.checkStoredBodySize(1024 * 1024);

            for (SingleConnectionDataSource connection : connections) {
                assertThat(new JdbcTemplate(connection).queryForObject("SELECT @@in_transaction", Integer.class))
                        .as("given back inside a transaction").isZero();
            }
        } finally {
            connections.forEach(SingleConnectionDataSource::destroy);
        }
    }

    /** Transactions at READ COMMITTED, the level the claim runs at, on {@code dataSource}. */
    private static TransactionTemplate readCommitted(DataSource dataSource) {
        TransactionTemplate transaction = new TransactionTemplate(new DataSourceTransactionManager(dataSource));
        transaction.setIsolationLevel(TransactionTemplate.ISOLATION_READ_COMMITTED);
        return transaction;
    }

    /** A pool on a new database in which {@code ddl} has made the table. */
    private static HikariDataSource databaseWith(String ddl) {
        HikariDataSource dataSource = TestMariaDb.newDatabase().dataSource(4);
        new JdbcTemplate(dataSource).execute(ddl);
        return dataSource;
    }

    /** A first claim of {@code key} in {@code table}, as the engine makes it: in a transaction at READ COMMITTED. */
    private static ClaimResult claim(DataSource dataSource, String table, ScopedKey key) {
        MariaDbIdempotencyStore store = new MariaDbIdempotencyStore(dataSource, table);
        return readCommitted(dataSource).execute(status -> store.claim(claimOf(key)));
    }

    private static ClaimRequest claimOf(ScopedKey key) {
        return new ClaimRequest(key, "a".repeat(64), Duration.ofDays(1), Duration.ofSeconds(1));
    }

    private static void refused(String table, String... said) {
        refused(databaseWith(table), "api_requests", said);
    }

    private static void refused(DataSource dataSource, String table, String... said) {
        run(dataSource, table, context -> {
            assertThat(context).hasFailed();
            for (String part : said) {
                assertThat(context).getFailure().hasStackTraceContaining(part);
            }
        });
    }

    private static void run(DataSource dataSource, String table, Consumer<AssertableApplicationContext> check) {
        try {
            contextRunner(dataSource, table).run(check::accept);
        } finally {
            ((HikariDataSource) dataSource).close();
        }
    }

    /** An application on {@code dataSource} whose store is the MariaDB one on {@code table}. */
    private static ApplicationContextRunner contextRunner(DataSource dataSource, String table) {
        return new ApplicationContextRunner().withConfiguration(AutoConfigurations.of(IdempotencyAutoConfiguration.class))
                .withBean(DataSource.class, () -> dataSource)
                .withBean(PlatformTransactionManager.class, () -> new DataSourceTransactionManager(dataSource))
                .withBean(IdempotencyStore.class, () -> new MariaDbIdempotencyStore(dataSource, table));
    }
}
