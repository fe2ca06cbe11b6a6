package io.idempotency.spring;

import io.idempotency.testkit.FreePorts;
import io.idempotency.testkit.TestPostgres;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * A PgBouncer in transaction pooling mode in front of one test database, started as a child process with a
 * configuration of its own in a temporary directory.
 * <p>
 * The binary is the one named by system property {@value #PROPERTY} (or environment variable {@value #ENV}): named so,
 * it must be there, or the tests fail (the build's CI names it). Else it is {@code pgbouncer} on the {@code PATH} or in
 * {@code /usr/sbin} (where Debian installs it); a machine with none, a developer's laptop say, reports the tests that
 * need it as skipped, saying how to install it, as the MariaDB tests do where they cannot run. Setting the property to
 * {@code off} leaves those tests out on purpose (also reported as skipped, with the reason).
 * <p>
 * The test database's schema reaches the server connections through the pooler's {@code connect_query}: PgBouncer
 * 1.18 does not pass the {@code search_path} a client asks for at connection time (the JDBC URL's
 * {@code currentSchema}) on to the server, and a server connection serves any client of the pool.
 */
final class PgBouncer implements AutoCloseable {

    static final String PROPERTY = "idempotency.test.pgbouncer";
    static final String ENV = "IDEMPOTENCY_TEST_PGBOUNCER";
    private static final String DATABASE_ALIAS = "idem";

    private final Process process;
    private final Path directory;
    private final int port;
    private final TestPostgres.Database database;
    private final int serverConnections;

    private PgBouncer(Process process, Path directory, int port, TestPostgres.Database database,
                      int serverConnections) {
        this.serverConnections = serverConnections;
        this.process = process;
        this.directory = directory;
        this.port = port;
        this.database = database;
    }

    /**
     * Why the pooler tests cannot run here, if they cannot: left out on purpose ({@value #PROPERTY}{@code =off}), or
     * no binary named and none found. Empty when they run (a binary named that is not there fails them).
     */
    static Optional<String> skipReason() {
        if ("off".equalsIgnoreCase(setting().orElse(""))) {
            return Optional.of(PROPERTY + "=off: the tests behind PgBouncer are left out");
        }
        if (setting().isEmpty() && found().isEmpty()) {
            return Optional.of("the tests through a transaction-mode pooler need PgBouncer, and none was found on the"
                    + " PATH or in /usr/sbin: install it (Debian, Ubuntu: apt-get install pgbouncer; macOS: brew"
                    + " install pgbouncer) or name its binary with -D" + PROPERTY + "=/path/to/pgbouncer (then it must"
                    + " be there)");
        }
        return Optional.empty();
    }

    private static Optional<String> setting() {
        String value = System.getProperty(PROPERTY, System.getenv(ENV));
        return value == null || value.isBlank() ? Optional.empty() : Optional.of(value.strip());
    }

    /**
     * The pgbouncer binary: the one named, else the one found.
     *
     * @throws IllegalStateException if the one named is not there, or none was named and none found
     */
    static Path binary() {
        Optional<String> configured = setting();
        if (configured.isPresent()) {
            Path path = Path.of(configured.get());
            if (!Files.isExecutable(path)) {
                throw new IllegalStateException(PROPERTY + " (or " + ENV + ") names no executable: "
                        + path.toAbsolutePath());
            }
            return path;
        }
        return found().orElseThrow(() -> new IllegalStateException(skipReason().orElse("no pgbouncer found")));
    }

    /** {@code pgbouncer} on the {@code PATH}, in {@code /usr/sbin} or in {@code /usr/local/sbin}. */
    private static Optional<Path> found() {
        List<Path> candidates = new ArrayList<>();
        String pathVariable = System.getenv("PATH");
        if (pathVariable != null) {
            for (String dir : pathVariable.split(java.io.File.pathSeparator)) {
                if (!dir.isBlank()) {
                    candidates.add(Path.of(dir, "pgbouncer"));
                }
            }
        }
        candidates.add(Path.of("/usr/sbin/pgbouncer"));
        candidates.add(Path.of("/usr/local/sbin/pgbouncer"));
        return candidates.stream().filter(Files::isExecutable).findFirst();
    }

    /**
     * Starts a PgBouncer in transaction mode in front of {@code database}, with at most {@code serverConnections}
     * connections to the server, shared by all its clients.
     */
    static PgBouncer start(TestPostgres.Database database, int serverConnections) {
        return start(database, serverConnections, null);
    }

    /**
     * As {@link #start(TestPostgres.Database, int)}, each server connection starting with {@code serverSetting} (say
     * {@code default_transaction_isolation TO serializable}) as its session's default, as a database or a role
     * configured with {@code ALTER DATABASE … SET} would give it, without changing the shared test server's.
     */
    static PgBouncer start(TestPostgres.Database database, int serverConnections, String serverSetting) {
        Path binary = binary();
        URI upstream = URI.create(database.url().substring("jdbc:".length()));
        String upstreamDb = upstream.getPath().substring(1);
        String user = database.user() != null ? database.user() : queryParameter(upstream, "user");
        String password = database.password() != null ? database.password() : queryParameter(upstream, "password");
        try {
            Path directory = Files.createTempDirectory("pgbouncer");
            int port = FreePorts.outsideEphemeralRange();
            StringBuilder target = new StringBuilder("host=").append(upstream.getHost())
                    .append(" port=").append(upstream.getPort() < 0 ? 5432 : upstream.getPort())
                    .append(" dbname=").append(upstreamDb)
                    .append(" pool_size=").append(serverConnections)
                    .append(" connect_query='SET search_path TO ").append(database.schema())
                    .append(serverSetting == null ? "" : "; SET " + serverSetting).append("'");
            if (user != null) {
                target.append(" user=").append(user);
            }
            if (password != null) {
                target.append(" password=").append(password);
            }
            Files.writeString(directory.resolve("pgbouncer.ini"), """
                    [databases]
                    %s = %s

                    [pgbouncer]
                    listen_addr = 127.0.0.1
                    listen_port = %d
                    unix_socket_dir =
                    auth_type = any
                    pool_mode = transaction
                    max_client_conn = 200
                    default_pool_size = %d
                    min_pool_size = 0
                    reserve_pool_size = 0
                    server_reset_query =
                    ignore_startup_parameters = extra_float_digits,search_path,options
                    logfile = %s
                    pidfile = %s
                    """.formatted(DATABASE_ALIAS, target, port, serverConnections,
                    directory.resolve("pgbouncer.log"), directory.resolve("pgbouncer.pid")));
            List<String> command = new ArrayList<>(List.of(binary.toString()));
            if ("root".equals(System.getProperty("user.name"))) {
                // PgBouncer refuses to run as root: let it switch to an unprivileged user, who must reach its files
                Files.setPosixFilePermissions(directory, PosixFilePermissions.fromString("rwxrwxrwx"));
                command.addAll(List.of("-u", "nobody"));
            }
            command.add(directory.resolve("pgbouncer.ini").toString());
            Process process = new ProcessBuilder(command).redirectErrorStream(true)
                    .redirectOutput(directory.resolve("pgbouncer.out").toFile()).start();
            PgBouncer pgBouncer = new PgBouncer(process, directory, port, database, serverConnections);
            pgBouncer.awaitListening(Duration.ofSeconds(10));
            return pgBouncer;
        } catch (IOException e) {
            throw new UncheckedIOException("PgBouncer (" + binary + ") did not start", e);
        }
    }

    private static String queryParameter(URI uri, String name) {
        if (uri.getQuery() == null) {
            return null;
        }
        for (String pair : uri.getQuery().split("&")) {
            if (pair.startsWith(name + "=")) {
                return pair.substring(name.length() + 1);
            }
        }
        return null;
    }

    private void awaitListening(Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (System.nanoTime() < deadline) {
            if (!process.isAlive()) {
                throw new IllegalStateException("PgBouncer exited with " + process.exitValue() + ": " + log());
            }
            try (Socket socket = new Socket()) {
                socket.connect(new InetSocketAddress("127.0.0.1", port), 200);
                return;
            } catch (IOException notYet) {
                try {
                    Thread.sleep(50);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new IllegalStateException(e);
                }
            }
        }
        close();
        throw new IllegalStateException("PgBouncer did not listen on port " + port + " within " + timeout + ": " + log());
    }

    /** What PgBouncer wrote to its log and its output so far, for a failure's message. */
    String log() {
        StringBuilder text = new StringBuilder();
        for (String file : List.of("pgbouncer.out", "pgbouncer.log")) {
            try {
                Path path = directory.resolve(file);
                if (Files.exists(path)) {
                    text.append(Files.readString(path));
                }
            } catch (IOException e) {
                text.append("(").append(file).append(" unreadable: ").append(e.getMessage()).append(")");
            }
        }
        return text.toString();
    }

    /**
     * The JDBC URL of the test database through the pooler: no server-side prepared statements (PgBouncer 1.18 keeps
     * none across transactions), and the test's application name, which PgBouncer sets on the server connection each
     * transaction runs on.
     */
    String jdbcUrl() {
        return "jdbc:postgresql://127.0.0.1:" + port + "/" + DATABASE_ALIAS + "?prepareThreshold=0&ApplicationName="
                + database.schema();
    }

    /** The database the pooler is in front of. */
    TestPostgres.Database database() {
        return database;
    }

    /** How many server connections the pooler keeps at most. */
    int serverConnections() {
        return serverConnections;
    }

    /** The Spring Boot properties of an application on the test database through the pooler. */
    List<String> springPropertyValues(int maxPoolSize) {
        List<String> properties = new ArrayList<>(List.of(
                "spring.datasource.url=" + jdbcUrl(),
                "spring.datasource.hikari.maximum-pool-size=" + maxPoolSize,
                "spring.datasource.hikari.minimum-idle=1"));
        if (database.user() != null) {
            properties.add("spring.datasource.username=" + database.user());
        }
        return properties;
    }

    @Override
    public void close() {
        process.destroy();
        try {
            if (!process.waitFor(5, TimeUnit.SECONDS)) {
                process.destroyForcibly().waitFor(5, TimeUnit.SECONDS);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        try (Stream<Path> files = Files.walk(directory)) {
            files.sorted(java.util.Comparator.reverseOrder()).forEach(path -> path.toFile().delete());
        } catch (IOException ignored) {
            // a temporary directory left behind
        }
    }
}
