package io.idempotency.benchmarks.harness;

import io.idempotency.benchmarks.instrument.CountingSocketFactory;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Properties;
import java.util.concurrent.Callable;

import static org.assertj.core.api.Assertions.assertThat;

class BenchDatabaseTest {

    @Test
    void aPasswordInTheUrlIsNotPrinted() {
        // the report's header names the server by its URL, and the docs allow the password in it
        assertThat(BenchDatabase.shown("jdbc:postgresql://db:5432/bench?user=bench&password=s3cr%26t!&ssl=false"))
                .isEqualTo("jdbc:postgresql://db:5432/bench?user=bench&password=***&ssl=false");
        assertThat(BenchDatabase.shown("jdbc:postgresql://db/bench?PASSWORD=x"))
                .isEqualTo("jdbc:postgresql://db/bench?PASSWORD=***");
        assertThat(BenchDatabase.shown("jdbc:postgresql://db/bench?user=bench"))
                .isEqualTo("jdbc:postgresql://db/bench?user=bench");
    }

    @Test
    void theGrowthCaseFillLeavesNoWorkForAutovacuumInTheMeasurement() throws Exception {
        // A freshly inserted table is due for autovacuum (its inserts pass autovacuum_vacuum_insert_threshold): left
        // to autovacuum, a vacuum of 1M or 10M rows would start while the growth case measures that size, on the
        // cores the measurement uses, and show up as the claim's cost. A table of that size in use is vacuumed.
        TestPostgres.Database test = TestPostgres.newDatabase();
        try (BenchDatabase database = new BenchDatabase(test.url(), test.user(), test.password(), "test", null)) {
            database.execute(idempotencySchema());

            database.fillIdempotencyKeys(0, 5_000, "POST /idempotent");
            database.fillIdempotencyKeys(5_000, 12_000, "POST /idempotent");

            assertThat(database.queryLong("SELECT count(*) FROM idempotency_keys")).isEqualTo(12_000);
            assertThat(database.queryLong("SELECT count(DISTINCT idempotency_key) FROM idempotency_keys"))
                    .isEqualTo(12_000);
            // VACUUM reports itself to the statistics at once from PostgreSQL 15 on, within a second before
            assertThat(vacuums(database)).isEqualTo(2);
        }
    }

    @Test
    void theCpuOfTheDatabaseIsThatOfThisRunsApplicationNotOfAnotherRunOnTheSameServer() throws Exception {
        // two runs on one server and database (both on localhost:5432/postgres, say, on a shared machine): each must
        // find the backends of its own application under test only, or its "PG backends" column adds the other's
        TestPostgres.Database test = TestPostgres.newDatabase();
        try (BenchDatabase mine = new BenchDatabase(test.url(), test.user(), test.password(), "test", null);
             BenchDatabase other = nextSecond(() -> new BenchDatabase(test.url(), test.user(), test.password(),
                     "test", null));
             Connection myApplication = connect(mine, test);
             Connection otherApplication = connect(other, test)) {
            long myBackend = backendPid(myApplication);
            long otherBackend = backendPid(otherApplication);

            assertThat(mine.applicationBackends()).contains(myBackend).doesNotContain(otherBackend);
            assertThat(other.applicationBackends()).contains(otherBackend).doesNotContain(myBackend);
        }
    }

    /** A connection as the application under test of {@code run} makes it. */
    private static Connection connect(BenchDatabase run, TestPostgres.Database test) throws SQLException {
        Properties properties = new Properties();
        if (test.user() != null) {
            properties.setProperty("user", test.user());
        }
        if (test.password() != null) {
            properties.setProperty("password", test.password());
        }
        return DriverManager.getConnection(run.applicationUrl(CountingSocketFactory.class.getName()), properties);
    }

    private static long backendPid(Connection connection) throws SQLException {
        try (Statement statement = connection.createStatement();
             ResultSet rs = statement.executeQuery("SELECT pg_backend_pid()")) {
            assertThat(rs.next()).isTrue();
            return rs.getLong(1);
        }
    }

    /** Each run's schema is named by the second it started in: the second run starts in the next second. */
    private static BenchDatabase nextSecond(Callable<BenchDatabase> start) throws Exception {
        long second = System.currentTimeMillis() / 1000;
        while (System.currentTimeMillis() / 1000 == second) {
            Thread.sleep(20);
        }
        return start.call();
    }

    private static long vacuums(BenchDatabase database) throws SQLException, InterruptedException {
        String sql = "SELECT vacuum_count FROM pg_stat_user_tables WHERE schemaname = current_schema()"
                + " AND relname = 'idempotency_keys'";
        long deadline = System.nanoTime() + 5_000_000_000L;
        long vacuums = database.queryLong(sql);
        while (vacuums < 2 && System.nanoTime() < deadline) {
            Thread.sleep(100);
            database.execute("SELECT pg_stat_clear_snapshot()");
            vacuums = database.queryLong(sql);
        }
        return vacuums;
    }

    private static String idempotencySchema() throws IOException {
        try (InputStream in = BenchDatabaseTest.class.getResourceAsStream("/io/idempotency/jdbc/postgresql/schema.sql")) {
            assertThat(in).as("the PostgreSQL store's schema script on the class path").isNotNull();
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        }
    }
}
