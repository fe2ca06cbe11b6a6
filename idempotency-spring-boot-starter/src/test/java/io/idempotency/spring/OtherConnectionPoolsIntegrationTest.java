package io.idempotency.spring;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.core.ScopedKey;
import io.idempotency.jdbc.PostgresPartitionMaintenance;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.spring.app.TestApplication;
import io.idempotency.testkit.TestPostgres;
import org.apache.commons.dbcp2.BasicDataSource;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.web.server.context.WebServerApplicationContext;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.transaction.TransactionDefinition;
import org.springframework.transaction.support.TransactionTemplate;

import javax.sql.DataSource;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.function.ToIntFunction;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The starter on the connection pools other than HikariCP that Spring Boot supports ({@code spring.datasource.type}):
 * Apache Commons DBCP2 and Tomcat JDBC, configured the ways applications configure them, and on no pool at all
 * ({@code SimpleDriverDataSource}, a new connection per checkout). Over real HTTP on real PostgreSQL: a first request,
 * its replay, another body under its key (422), a failure, concurrent duplicates on a small pool; and afterwards no
 * connection still borrowed, none left in a transaction, none with a setting the library made.
 */
class OtherConnectionPoolsIntegrationTest {

    private final HttpClient http = HttpClient.newHttpClient();

    private static final String DBCP2 = "org.apache.commons.dbcp2.BasicDataSource";
    private static final String TOMCAT = "org.apache.tomcat.jdbc.pool.DataSource";

    @Test
    void dbcp2WithItsDefaults() throws Exception {
        exercise(DBCP2, List.of("spring.datasource.dbcp2.max-total=3"), OtherConnectionPoolsIntegrationTest::dbcp2Active);
    }

    @Test
    void dbcp2WithoutAutoCommitAtRepeatableRead() throws Exception {
        exercise(DBCP2, List.of("spring.datasource.dbcp2.max-total=2",
                "spring.datasource.dbcp2.default-auto-commit=false",
                "spring.datasource.dbcp2.default-transaction-isolation=4", // REPEATABLE READ
                "spring.datasource.dbcp2.rollback-on-return=false",
                "spring.datasource.dbcp2.enable-auto-commit-on-return=false",
                "spring.datasource.dbcp2.connection-init-sqls=SET statement_timeout = '5s'"),
                OtherConnectionPoolsIntegrationTest::dbcp2Active);
    }

    @Test
    void tomcatJdbcWithItsDefaults() throws Exception {
        exercise(TOMCAT, List.of("spring.datasource.tomcat.max-active=3"), OtherConnectionPoolsIntegrationTest::tomcatActive);
    }

    @Test
    void tomcatJdbcWithoutAutoCommitAtSerializable() throws Exception {
        exercise(TOMCAT, List.of("spring.datasource.tomcat.max-active=2",
                "spring.datasource.tomcat.default-auto-commit=false",
                "spring.datasource.tomcat.default-transaction-isolation=8", // SERIALIZABLE
                "spring.datasource.tomcat.jdbc-interceptors=ConnectionState;StatementFinalizer",
                "spring.datasource.tomcat.init-s-q-l=SET statement_timeout = '5s'"),
                OtherConnectionPoolsIntegrationTest::tomcatActive);
    }

    @Test
    void noPool() throws Exception {
        exercise("org.springframework.jdbc.datasource.SimpleDriverDataSource", List.of(), dataSource -> 0);
    }

    /**
     * Tomcat JDBC neither commits nor rolls back a connection given back (rollbackOnReturn is off by default): what the
     * library reads at startup on a connection without auto-commit must not leave it inside a transaction in the pool.
     * There it would sit "idle in transaction" (ended by PostgreSQL's idle_in_transaction_session_timeout), and the
     * application's next transaction on it that asks for an isolation level would fail: PostgreSQL's driver refuses
     * to change the isolation in the middle of a transaction (and Spring drops a read-only flag it cannot set). In both cleanup modes (drop-partitions reads and
     * makes the partitions at startup).
     */
    @ParameterizedTest
    @ValueSource(strings = {"delete", "drop-partitions"})
    void tomcatJdbcWithoutAutoCommitGetsItsConnectionsBackOutsideATransaction(String cleanup) throws Exception {
        TestPostgres.Database database = TestDatabases.withOrders();
        try (ConfigurableApplicationContext context = start(database, TOMCAT, List.of(
                "spring.datasource.tomcat.max-active=2", "spring.datasource.tomcat.default-auto-commit=false",
                "idempotency.retention.cleanup.mode=" + cleanup))) {
            assertThat(database.queryLong("select count(*) from pg_stat_activity where application_name = '"
                    + database.schema() + "' and state like 'idle in transaction%'"))
                    .as("pooled connections left inside a transaction").isZero();
            // a transaction at REPEATABLE READ (a report's) on each of the pool's connections, held at once
            TransactionTemplate report = new TransactionTemplate(context.getBean(PlatformTransactionManager.class));
            report.setIsolationLevel(TransactionDefinition.ISOLATION_REPEATABLE_READ);
            TransactionTemplate other = new TransactionTemplate(context.getBean(PlatformTransactionManager.class));
            other.setPropagationBehavior(TransactionDefinition.PROPAGATION_REQUIRES_NEW);
            other.setIsolationLevel(TransactionDefinition.ISOLATION_REPEATABLE_READ);
            JdbcTemplate jdbc = new JdbcTemplate(context.getBean(DataSource.class));
            Long orders = report.execute(outer -> other.execute(inner -> jdbc.queryForObject(
                    "select count(*) from orders", Long.class)));
            assertThat(orders).isZero();
        }
    }

    /**
     * The store's reads outside any transaction — a replay read from the database, the reads after a failed commit,
     * the stale-claim sweeper's look for expired leases every 30 seconds — give a Tomcat JDBC connection without
     * auto-commit back outside a transaction too: left in one, the next request on it (whose transaction asks for
     * READ COMMITTED on a pool at SERIALIZABLE) would be answered 503.
     */
    @Test
    void theStoresReadsOutsideATransactionGiveTomcatJdbcConnectionsBackOutsideOne() throws Exception {
        TestPostgres.Database database = TestDatabases.withOrders();
        try (ConfigurableApplicationContext context = start(database, TOMCAT, List.of(
                "spring.datasource.tomcat.max-active=2", "spring.datasource.tomcat.default-auto-commit=false",
                "spring.datasource.tomcat.default-transaction-isolation=8"))) { // SERIALIZABLE
            int port = ((WebServerApplicationContext) context).getWebServer().getPort();
            IdempotencyStore store = context.getBean(IdempotencyStore.class);

            assertThat(store.find(new ScopedKey("", "POST /orders", UUID.randomUUID().toString()))).isEmpty();
            assertThat(store.findExpiredLeases(10)).isEmpty();

            assertThat(database.queryLong("select count(*) from pg_stat_activity where application_name = '"
                    + database.schema() + "' and state like 'idle in transaction%'"))
                    .as("pooled connections left inside a transaction").isZero();
            for (int i = 0; i < 2; i++) { // on each of the pool's two connections
                String key = UUID.randomUUID().toString();
                HttpResponse<String> answer = post(port, "/orders", key, "after-read-" + key);
                assertThat(answer.statusCode()).as(answer.body()).isEqualTo(201);
            }
        }
    }

    /**
     * Partition maintenance sets lock_timeout and statement_timeout on its connection and turns auto-commit on (a
     * partition's detach cannot run inside a transaction): the connection goes back with what it came with — the
     * timeout the pool's init SQL set, auto-commit off, the pool's isolation — as a pool need not reset what a
     * borrower changed (neither DBCP2 nor Tomcat JDBC resets a session setting). Every connection of the pool is
     * borrowed at once afterwards, so the one maintenance used is among them.
     */
    @ParameterizedTest
    @ValueSource(strings = {DBCP2, TOMCAT})
    void partitionMaintenanceGivesItsConnectionBackAsItCame(String type) throws Exception {
        String pool = type.equals(DBCP2) ? "dbcp2" : "tomcat";
        TestPostgres.Database database = TestDatabases.withOrders();
        try (ConfigurableApplicationContext context = start(database, type, List.of(
                "idempotency.retention.cleanup.mode=drop-partitions",
                "spring.datasource." + pool + (pool.equals("dbcp2") ? ".max-total=2" : ".max-active=2"),
                "spring.datasource." + pool + ".default-auto-commit=false",
                "spring.datasource." + pool + ".default-transaction-isolation=4", // REPEATABLE READ
                pool.equals("dbcp2") ? "spring.datasource.dbcp2.connection-init-sqls=SET statement_timeout = '7s'"
                        : "spring.datasource.tomcat.init-s-q-l=SET statement_timeout = '7s'"))) {
            DataSource dataSource = context.getBean(DataSource.class);
            new PostgresPartitionMaintenance(dataSource, "idempotency_keys",
                    Duration.ofDays(1), 7, Duration.ofSeconds(2))
                    .run(Duration.ofDays(2));
            try (Connection first = dataSource.getConnection();
                 Connection second = dataSource.getConnection()) {
                for (Connection connection : List.of(first, second)) {
                    assertThat(connection.getAutoCommit()).isFalse();
                    try (Statement statement = connection.createStatement();
                         ResultSet rs = statement.executeQuery("select current_setting('statement_timeout'),"
                                 + " current_setting('lock_timeout'), current_setting('transaction_isolation')")) {
                        rs.next();
                        assertThat(List.of(rs.getString(1), rs.getString(2), rs.getString(3)))
                                .containsExactly("7s", "0", "repeatable read");
                    }
                    connection.rollback();
                }
            }
        }
    }

    /**
     * A pool whose connections are read-only (defaultReadOnly, as one pointed at a replica by mistake, or a database
     * made read-only for maintenance) on a table created beforehand: the application starts, and a request with a
     * key is answered 503 idempotency-store-unavailable before its handler runs — nothing written, the connection back
     * in the pool — so that its client retries it once the store can be written again.
     */
    @Test
    void aReadOnlyPoolAnswersRequestsWithAKey503WithoutRunningThem() throws Exception {
        TestPostgres.Database database = TestDatabases.withOrders();
        try (HikariDataSource writable = database.dataSource(2)) {
            new IdempotencySchemaMigrator(writable, "idempotency_keys", false).migrate();
        }
        try (ConfigurableApplicationContext context = start(database, DBCP2, List.of(
                "spring.datasource.dbcp2.max-total=2", "spring.datasource.dbcp2.default-read-only=true"))) {
            int port = ((WebServerApplicationContext) context).getWebServer().getPort();
            String key = UUID.randomUUID().toString();
            HttpResponse<String> refused = post(port, "/orders", key, "read-only-" + key);
            assertThat(refused.statusCode()).isEqualTo(503);
            assertThat(refused.body()).contains("idempotency-store-unavailable");
            assertThat(TestDatabases.rows(database, "read-only-" + key)).isZero();
            assertThat(TestDatabases.keyRows(database, key)).isZero();
            assertThat(dbcp2Active(context.getBean(DataSource.class))).isZero();
        }
    }

    private void exercise(String type, List<String> settings, ToIntFunction<DataSource> active) throws Exception {
        TestPostgres.Database database = TestDatabases.withOrders();
        try (ConfigurableApplicationContext context = start(database, type, settings)) {
            exercise(context, database, type, active);
        }
    }

    private static ConfigurableApplicationContext start(TestPostgres.Database database, String type,
                                                        List<String> settings) {
        List<String> args = new ArrayList<>(List.of("--server.port=0", "--spring.datasource.url=" + database.url(),
                "--spring.datasource.type=" + type, "--idempotency.in-flight-wait=300ms"));
        if (database.user() != null) {
            args.add("--spring.datasource.username=" + database.user());
        }
        if (database.password() != null) {
            args.add("--spring.datasource.password=" + database.password());
        }
        settings.forEach(setting -> args.add("--" + setting));
        return new SpringApplicationBuilder(TestApplication.class).run(args.toArray(String[]::new));
    }

    private void exercise(ConfigurableApplicationContext context, TestPostgres.Database database, String type,
                          ToIntFunction<DataSource> active) throws Exception {
        DataSource dataSource = context.getBean(DataSource.class);
        assertThat(dataSource.getClass().getName()).isEqualTo(type);
        int port = ((WebServerApplicationContext) context).getWebServer().getPort();

        String key = UUID.randomUUID().toString();
        String note = "pool-" + key;
        HttpResponse<String> first = post(port, "/orders", key, note);
        assertThat(first.statusCode()).as(first.body()).isEqualTo(201);
        HttpResponse<String> replay = post(port, "/orders", key, note);
        assertThat(replay.statusCode()).isEqualTo(201);
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(post(port, "/orders", key, "other-" + note).statusCode()).isEqualTo(422);
        assertThat(TestDatabases.rows(database, note)).isOne();

        String failingKey = UUID.randomUUID().toString();
        assertThat(post(port, "/orders/fail/503", failingKey, "fail-" + failingKey).statusCode()).isEqualTo(503);
        assertThat(TestDatabases.rows(database, "fail-" + failingKey)).isZero();

        // concurrent duplicates on a pool of two or three connections: the handler runs once
        String concurrentKey = UUID.randomUUID().toString();
        String concurrentNote = "concurrent-" + concurrentKey;
        List<CompletableFuture<HttpResponse<String>>> duplicates = new ArrayList<>();
        for (int i = 0; i < 6; i++) {
            duplicates.add(http.sendAsync(request(port, "/orders/slow?millis=200", concurrentKey, concurrentNote),
                    HttpResponse.BodyHandlers.ofString()));
        }
        List<HttpResponse<String>> executed = new ArrayList<>();
        for (CompletableFuture<HttpResponse<String>> duplicate : duplicates) {
            HttpResponse<String> response = duplicate.get();
            assertThat(response.statusCode()).as(response.body()).isIn(201, 409);
            if (response.statusCode() == 201 && response.headers().firstValue("Idempotent-Replayed").isEmpty()) {
                executed.add(response);
            }
        }
        assertThat(executed).as("answers of a run of the handler").hasSize(1);
        assertThat(TestDatabases.rows(database, concurrentNote)).isOne();
        // the key was left completed, not claimed: a later duplicate is the stored answer's replay
        HttpResponse<String> later = post(port, "/orders/slow?millis=200", concurrentKey, concurrentNote);
        assertThat(later.statusCode()).as(later.body()).isEqualTo(201);
        assertThat(later.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(later.body()).isEqualTo(executed.get(0).body());
        assertThat(TestDatabases.rows(database, concurrentNote)).isOne();

        assertThat(active.applyAsInt(dataSource)).as("connections still borrowed").isZero();
        assertThat(database.queryLong("select count(*) from pg_stat_activity where application_name = '"
                + database.schema() + "' and state like 'idle in transaction%'"))
                .as("pooled connections left inside a transaction").isZero();
    }

    private HttpResponse<String> post(int port, String path, String key, String note) throws Exception {
        return http.send(request(port, path, key, note), HttpResponse.BodyHandlers.ofString());
    }

    private static HttpRequest request(int port, String path, String key, String note) {
        return HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                .header("Content-Type", "application/json").header("Idempotency-Key", key)
                .POST(HttpRequest.BodyPublishers.ofString("{\"note\":\"" + note + "\"}")).build();
    }

    private static int dbcp2Active(DataSource dataSource) {
        return ((BasicDataSource) dataSource).getNumActive();
    }

    private static int tomcatActive(DataSource dataSource) {
        return ((org.apache.tomcat.jdbc.pool.DataSource) dataSource).getActive();
    }
}
