package io.idempotency.benchmarks.harness;

import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;

import java.io.IOException;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.LocalDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;

/**
 * The PostgreSQL server of a run, chosen in this order: {@code BENCH_JDBC_URL} (user and password in the URL or in
 * {@code BENCH_JDBC_USER} / {@code BENCH_JDBC_PASSWORD}); {@code jdbc:postgresql://localhost:5432/postgres} as user
 * {@code postgres} when it answers; an embedded PostgreSQL (zonky) started for the run. Each run works in a fresh
 * schema {@code bench_<timestamp>}, dropped at the end.
 */
final class BenchDatabase implements AutoCloseable {

    static final String LOCAL_URL = "jdbc:postgresql://localhost:5432/postgres";
    /**
     * The start of the {@code application_name} of the application under test's connections, followed by the run's
     * schema: another run on the same server (and database) must not have its backends counted as this run's.
     */
    static final String APPLICATION_NAME = "idempotency-bench-app";

    private final String serverUrl;
    private final String user;
    private final String password;
    private final String description;
    private final EmbeddedPostgres embedded;
    private final String schema;
    private Connection admin;
    private boolean closed;

    BenchDatabase(String serverUrl, String user, String password, String description,
                  EmbeddedPostgres embedded) throws SQLException {
        this.serverUrl = serverUrl;
        this.user = user;
        this.password = password;
        this.description = description;
        this.embedded = embedded;
        this.schema = "bench_" + LocalDateTime.now().format(DateTimeFormatter.ofPattern("yyyyMMdd_HHmmss"));
        this.admin = connect(serverUrl);
        try (Statement statement = admin.createStatement()) {
            statement.execute("CREATE SCHEMA " + schema);
            statement.execute("SET search_path TO " + schema);
        }
    }

    static BenchDatabase choose() throws SQLException, IOException {
        String url = System.getenv("BENCH_JDBC_URL");
        if (url != null && !url.isBlank()) {
            return new BenchDatabase(url, System.getenv("BENCH_JDBC_USER"), System.getenv("BENCH_JDBC_PASSWORD"),
                    "BENCH_JDBC_URL " + shown(url), null);
        }
        Properties probe = new Properties();
        probe.setProperty("user", "postgres");
        probe.setProperty("connectTimeout", "3");
        try (Connection ignored = DriverManager.getConnection(LOCAL_URL, probe)) {
            return new BenchDatabase(LOCAL_URL, "postgres", null, LOCAL_URL + " as postgres", null);
        } catch (SQLException unreachable) {
            System.out.println("(" + LOCAL_URL + " is not reachable: " + unreachable.getMessage()
                    + "; starting an embedded PostgreSQL)");
        }
        // zonky's builder sets synchronous_commit=off, which spares every commit its wait for the WAL flush: the
        // figures would then not compare with the documented runs', made with PostgreSQL's defaults
        // (synchronous_commit=on, fsync=on; the run's "PostgreSQL:" line shows them). Both are set, so that no
        // builder default decides them.
        EmbeddedPostgres embedded = EmbeddedPostgres.builder()
                .setServerConfig("synchronous_commit", "on")
                .setServerConfig("fsync", "on")
                .start();
        return new BenchDatabase(embedded.getJdbcUrl("postgres", "postgres"), "postgres", null,
                "embedded PostgreSQL on port " + embedded.getPort(), embedded);
    }

    /** {@code url} as printed: a password in it (which {@code BENCH_JDBC_URL} may carry) is masked. */
    static String shown(String url) {
        return url.replaceAll("(?i)([?&]password=)[^&]*", "$1***");
    }

    String description() {
        return description;
    }

    String schema() {
        return schema;
    }

    String user() {
        return user;
    }

    String password() {
        return password;
    }

    /** The URL the application under test uses: this run's schema, unencrypted, through the counting sockets. */
    String applicationUrl(String socketFactory) {
        return withParameters(serverUrl, "currentSchema=" + schema + "&sslmode=disable&gssEncMode=disable"
                + "&ApplicationName=" + applicationName() + "&socketFactory=" + socketFactory);
    }

    /** The {@code application_name} of this run's application under test: one of its own (at most 63 bytes). */
    String applicationName() {
        return APPLICATION_NAME + "-" + schema; // no character a URL would need to escape
    }

    private static String withParameters(String url, String parameters) {
        return url + (url.contains("?") ? "&" : "?") + parameters;
    }

    private Connection connect(String url) throws SQLException {
        Properties properties = new Properties();
        if (user != null) {
            properties.setProperty("user", user);
        }
        if (password != null) {
            properties.setProperty("password", password);
        }
        return DriverManager.getConnection(url, properties);
    }

    String queryString(String sql) throws SQLException {
        try (Statement statement = admin.createStatement(); ResultSet rs = statement.executeQuery(sql)) {
            return rs.next() ? rs.getString(1) : null;
        }
    }

    long queryLong(String sql) throws SQLException {
        String value = queryString(sql);
        return value == null ? 0 : Long.parseLong(value);
    }

    void execute(String sql) throws SQLException {
        try (Statement statement = admin.createStatement()) {
            statement.execute(sql);
        }
    }

    /**
     * The server pids of this run's application's connections (not of another run's on the same server), if the server
     * runs on this machine (else none).
     */
    List<Long> applicationBackends() {
        List<Long> pids = new ArrayList<>();
        try (PreparedStatement statement = admin.prepareStatement("SELECT pid FROM pg_stat_activity"
                + " WHERE application_name = ? AND datname = current_database()")) {
            statement.setString(1, applicationName());
            try (ResultSet rs = statement.executeQuery()) {
                while (rs.next()) {
                    pids.add(rs.getLong(1));
                }
            }
        } catch (SQLException e) {
            // no pids: the CPU table then shows no database column
        }
        return pids;
    }

    /** The server's WAL position in bytes (cluster-wide: every database of the server writes to it). */
    long walPosition() {
        try {
            return queryLong("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint");
        } catch (SQLException e) {
            return 0;
        }
    }

    /** Inserts, updates and HOT updates of the idempotency table, from pg_stat_user_tables. */
    String idempotencyTableWrites() throws SQLException {
        try (Statement statement = admin.createStatement();
             ResultSet rs = statement.executeQuery("SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
                     + " WHERE schemaname = current_schema() AND relname = 'idempotency_keys'")) {
            if (!rs.next()) {
                return "no statistics";
            }
            long updates = rs.getLong(2);
            long hot = rs.getLong(3);
            return String.format(java.util.Locale.ROOT, "%,d inserts, %,d updates of which %,d (%.0f%%) HOT",
                    rs.getLong(1), updates, hot, updates == 0 ? 0.0 : 100.0 * hot / updates);
        }
    }

    /** Empties both tables (the application is idle). */
    void truncate() throws SQLException {
        execute("TRUNCATE idempotency_keys, bench_orders");
    }

    /**
     * Adds SUCCEEDED records numbered {@code from + 1 … to} for the idempotent endpoint's scope, with random-looking
     * keys (md5 as a UUID) and an answer like the endpoint's, in batches of a million rows; then VACUUM and ANALYZE.
     * The vacuum is what a table of that size in use has had, and it must not come later: the inserts make the table
     * due for autovacuum (autovacuum_vacuum_insert_threshold), which would then scan the whole table while the growth
     * case measures it, on the cores the measurement uses.
     */
    void fillIdempotencyKeys(long from, long to, String scope) throws SQLException {
        String body = "{\"id\":0,\"reference\":\"filler\",\"customer\":\"customer-0042\",\"amount\":12.50,"
                + "\"currency\":\"EUR\",\"status\":\"ACCEPTED\",\"description\":\"a benchmark order of the growth"
                + " fill, about as long as a real one\",\"createdAt\":\"2025-01-01T00:00:00.000000Z\","
                + "\"self\":\"/orders/0\"}";
        String sql = """
                INSERT INTO idempotency_keys (caller, scope, idempotency_key, status, request_hash, fencing_token,
                    response_status, response_headers, response_body, created_at, updated_at, expires_at, locked_until)
                SELECT '', ?, md5(g::text)::uuid::text, 'SUCCEEDED', encode(sha256(g::text::bytea), 'hex'),
                    gen_random_uuid(), 201, E'Content-Type: application/json\\nLocation: /orders/0',
                    convert_to(?, 'UTF8'), now(), now(), now() + interval '30 days', NULL
                FROM generate_series(?::bigint, ?::bigint) AS g""";
        final long batch = 1_000_000;
        for (long start = from + 1; start <= to; start += batch) {
            long end = Math.min(to, start + batch - 1);
            try (var statement = admin.prepareStatement(sql)) {
                statement.setString(1, scope);
                statement.setString(2, body);
                statement.setLong(3, start);
                statement.setLong(4, end);
                statement.executeUpdate();
            }
        }
        execute("VACUUM (ANALYZE) idempotency_keys");
    }

    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        try {
            if (admin != null) {
                try (Statement statement = admin.createStatement()) {
                    statement.execute("DROP SCHEMA IF EXISTS " + schema + " CASCADE");
                }
                admin.close();
                admin = null;
            }
        } catch (SQLException e) {
            System.err.println("could not drop schema " + schema + ": " + e.getMessage());
        } finally {
            if (embedded != null) {
                try {
                    embedded.close();
                } catch (IOException e) {
                    System.err.println("could not stop the embedded PostgreSQL: " + e.getMessage());
                }
            }
        }
    }
}
