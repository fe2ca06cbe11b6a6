package io.idempotency.sample.payment;

import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.channels.OverlappingFileLockException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;

/**
 * The zero-configuration database: a PostgreSQL server run from the binaries packaged in the application, on a data
 * directory that survives restarts.
 *
 * <p>The server is a separate operating-system process. When the JVM ends normally it is stopped; when the JVM is
 * killed ({@code kill -9}, {@link Runtime#halt(int)}) it keeps running on the data directory, and its
 * {@code postmaster.pid} would make the next start fail. {@link #start(Path, int)} therefore stops such an orphan
 * first ({@link PostgresOrphans}), unless another live instance of the application still owns the directory.
 */
public final class EmbeddedPostgresServer implements AutoCloseable {

    private static final Logger log = LoggerFactory.getLogger(EmbeddedPostgresServer.class);

    /** The file the embedded PostgreSQL library locks while an application instance owns the data directory. */
    static final String OWNER_LOCK_FILE = "epg-lock";
    /** The end of the name of the instance's own lock file ({@link #instanceLockFile}). */
    static final String INSTANCE_LOCK_SUFFIX = ".instance-lock";
    /** The instance lock files this JVM holds (see {@link #lockInstance}). */
    private static final java.util.Set<Path> LOCKED = new java.util.HashSet<>();

    private static final String DATABASE = "postgres";
    private static final String USER = "postgres";

    // Crash recovery after a hard stop can take longer than the library's 10 s default.
    private static final Duration STARTUP_WAIT = Duration.ofSeconds(60);

    private final EmbeddedPostgres postgres;
    private final Path dataDir;
    /** Held for as long as this instance runs the server: see {@link #lockInstance}. */
    private final InstanceLock instanceLock;

    private EmbeddedPostgresServer(EmbeddedPostgres postgres, Path dataDir, InstanceLock instanceLock) {
        this.postgres = postgres;
        this.dataDir = dataDir;
        this.instanceLock = instanceLock;
    }

    /**
     * Starts the server on {@code dataDir} (created and initialised when empty), after stopping a server orphaned
     * there by a JVM that was killed.
     *
     * @param dataDir the data directory; relative paths resolve against the working directory
     * @param port    the port to listen on, or 0 for a free one
     * @throws IllegalStateException if another running application instance owns the data directory
     * @throws IOException           if the server does not start
     */
    public static EmbeddedPostgresServer start(Path dataDir, int port) throws IOException {
        return start(dataDir, port, STARTUP_WAIT);
    }

    static EmbeddedPostgresServer start(Path dataDir, int port, Duration startupWait) throws IOException {
        Path dir = dataDir.toAbsolutePath().normalize();
        Files.createDirectories(dir);
        // Taken before anything is done to the directory and held until close(): an instance starting at the same
        // moment is refused here, before it could take the server this one starts for an orphan, or stop it after its
        // own start failed.
        InstanceLock instanceLock = lockInstance(dir);
        try {
            return start(dir, port, startupWait, instanceLock);
        } catch (IOException | RuntimeException e) {
            instanceLock.close();
            throw e;
        }
    }

    private static EmbeddedPostgresServer start(Path dir, int port, Duration startupWait, InstanceLock instanceLock)
            throws IOException {
        // Only an initialised directory can have a server running on it; an empty one must stay empty for initdb.
        if (Files.exists(dir.resolve("PG_VERSION"))) {
            checkNotOwnedByAnotherInstance(dir);
            PostgresOrphans.stopOrphan(dir, PostgresOrphans.DEFAULT_STOP_TIMEOUT);
        }
        log.info("starting embedded PostgreSQL on data directory {}", dir);
        EmbeddedPostgres postgres;
        try {
            postgres = EmbeddedPostgres.builder()
                    .setDataDirectory(dir.toFile())
                    .setCleanDataDirectory(false)
                    .setPort(port)
                    .setPGStartupWait(startupWait)
                    // The library turns this off for speed; a payment sample keeps every committed row on disk.
                    .setServerConfig("synchronous_commit", "on")
                    // The library's own JVM shutdown hook would stop the server as soon as the JVM is asked to stop,
                    // while the web server still finishes the requests in flight (graceful shutdown); the application
                    // context stops it instead, after the connection pool (close()).
                    .setRegisterShutdownHook(false)
                    .start();
        } catch (IOException | RuntimeException e) {
            stopAfterFailedStart(dir, e);
            throw e;
        }
        log.info("embedded PostgreSQL listens on port {}", postgres.getPort());
        return new EmbeddedPostgresServer(postgres, dir, instanceLock);
    }

    /** The JDBC URL of the server's {@code postgres} database (user {@code postgres}, no password). */
    public String jdbcUrl() {
        return postgres.getJdbcUrl(USER, DATABASE);
    }

    /** The user to connect as. */
    public String username() {
        return USER;
    }

    /** The port the server listens on. */
    public int port() {
        return postgres.getPort();
    }

    /** The absolute data directory. */
    public Path dataDir() {
        return dataDir;
    }

    /** Stops the server (fast shutdown); the data directory is kept. */
    @Override
    public void close() throws IOException {
        log.info("stopping embedded PostgreSQL on data directory {}", dataDir);
        try {
            postgres.close();
        } finally {
            instanceLock.close();
        }
    }

    /**
     * A server that was launched but did not become ready in time (a long crash recovery, say) keeps running once the
     * start has failed: no context will close it, and the library's shutdown hook is off, so it is stopped here.
     */
    private static void stopAfterFailedStart(Path dir, Exception failure) {
        try {
            PostgresOrphans.stopOrphan(dir, PostgresOrphans.DEFAULT_STOP_TIMEOUT);
        } catch (IOException | RuntimeException e) {
            failure.addSuppressed(e);
        }
    }

    /**
     * Takes the lock of the instance that runs the server of {@code dir}: held until the server is closed, and let go
     * by the operating system when the process dies, so a lock that cannot be taken means another instance, in this
     * process or another, starts or runs a server there. Its file is named after the directory's real path (two paths
     * to one directory through a link share it) and kept in the temporary directory, not beside the data directory,
     * whose parent may not be writable (a volume mounted at its place). One channel per file in this JVM: closing
     * another one on the same file, after a refused attempt, would let go of the lock held by the first.
     */
    private static InstanceLock lockInstance(Path dir) throws IOException {
        Path lockFile = instanceLockFile(dir);
        synchronized (LOCKED) {
            if (LOCKED.contains(lockFile)) {
                throw inUse(dir);
            }
            FileChannel channel = FileChannel.open(lockFile, StandardOpenOption.CREATE, StandardOpenOption.WRITE);
            FileLock lock;
            try {
                lock = channel.tryLock();
            } catch (IOException | RuntimeException e) {
                channel.close();
                throw e;
            }
            if (lock == null) {
                channel.close();
                throw inUse(dir);
            }
            LOCKED.add(lockFile);
            return new InstanceLock(channel, lockFile);
        }
    }

    /** The lock {@link #lockInstance} took: closed, it lets go of it. */
    private record InstanceLock(FileChannel channel, Path file) implements java.io.Closeable {
        @Override
        public void close() throws IOException {
            synchronized (LOCKED) {
                try {
                    channel.close();
                } finally {
                    LOCKED.remove(file);
                }
            }
        }
    }

    /** Where the instance lock of the data directory {@code dir} (which exists) is kept. */
    static Path instanceLockFile(Path dir) throws IOException {
        String realPath = dir.toRealPath().toString();
        try {
            byte[] digest = java.security.MessageDigest.getInstance("SHA-256")
                    .digest(realPath.getBytes(java.nio.charset.StandardCharsets.UTF_8));
            return Path.of(System.getProperty("java.io.tmpdir")).resolve("sample-embedded-postgres-"
                    + java.util.HexFormat.of().formatHex(digest, 0, 16) + INSTANCE_LOCK_SUFFIX);
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    private static DataDirectoryInUseException inUse(Path dir) {
        return new DataDirectoryInUseException("the embedded PostgreSQL data directory " + dir + " is in use by another"
                + " running instance; stop it, or give this instance another sample.embedded.data-dir, or configure"
                + " spring.datasource.url");
    }

    /**
     * Another running instance has the data directory: this one does not start. Spring Boot reports it in its
     * "APPLICATION FAILED TO START" report ({@link DataDirectoryInUseFailureAnalyzer}), not as a stack trace.
     */
    public static final class DataDirectoryInUseException extends IllegalStateException {

        DataDirectoryInUseException(String message) {
            super(message);
        }
    }

    /**
     * A running instance holds the library's lock file for as long as it lives; the lock goes away with its process.
     * So a lock we can take means that any server still running on the directory is an orphan.
     */
    private static void checkNotOwnedByAnotherInstance(Path dir) throws IOException {
        Path lockFile = dir.resolve(OWNER_LOCK_FILE);
        if (!Files.exists(lockFile)) {
            return; // never started by the library, so no instance can own it
        }
        try (FileChannel channel = FileChannel.open(lockFile, StandardOpenOption.WRITE)) {
            FileLock lock;
            try {
                lock = channel.tryLock();
            } catch (OverlappingFileLockException e) {
                lock = null; // held by this very JVM
            }
            if (lock == null) {
                throw inUse(dir);
            }
            lock.release();
        }
    }
}
