package io.idempotency.sample.payment;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.TimeUnit;

/**
 * Finds and stops a PostgreSQL server left running on a data directory by a process that died without stopping it.
 *
 * <p>PostgreSQL records its postmaster's process id in the first line of {@code postmaster.pid} and removes the file
 * when it shuts down. A file whose process is alive therefore means a running server; when its owner is gone, that
 * server is an orphan and blocks a new one on the same directory. Stopping it uses SIGTERM (PostgreSQL's "smart"
 * shutdown, which completes at once because a dead owner holds no connections), then SIGKILL if it does not end in
 * time.
 */
public final class PostgresOrphans {

    /** How long a server gets to shut down on SIGTERM before it is killed. */
    public static final Duration DEFAULT_STOP_TIMEOUT = Duration.ofSeconds(10);

    /** PostgreSQL's lock file in the data directory. */
    public static final String PID_FILE = "postmaster.pid";

    private static final Logger log = LoggerFactory.getLogger(PostgresOrphans.class);

    private PostgresOrphans() {
    }

    /**
     * The postmaster process running on {@code dataDir}, if any, according to its {@code postmaster.pid}.
     * A process id that now belongs to another program, or to a PostgreSQL server of another data directory (the id
     * was reused), does not count.
     */
    public static Optional<ProcessHandle> runningServer(Path dataDir) {
        return readPid(dataDir)
                .flatMap(ProcessHandle::of)
                .filter(PostgresOrphans::isRunning)
                .filter(PostgresOrphans::mayBePostgres)
                .filter(process -> mayRunOn(process, dataDir));
    }

    /**
     * Stops the server running on {@code dataDir}, if there is one, and waits until it is gone. The caller must make
     * sure that the server is really an orphan, i.e. that no live application uses it.
     *
     * @param timeout how long to wait after SIGTERM before sending SIGKILL
     * @return whether a server was found and stopped
     * @throws IllegalStateException if the server could not be stopped
     */
    public static boolean stopOrphan(Path dataDir, Duration timeout) throws IOException {
        Optional<Long> pid = readPid(dataDir);
        if (pid.isEmpty()) {
            return false;
        }
        Optional<ProcessHandle> process = ProcessHandle.of(pid.get()).filter(PostgresOrphans::isRunning);
        if (process.isEmpty()) {
            // PostgreSQL itself recognises and replaces a lock file whose process is gone.
            return false;
        }
        if (!mayBePostgres(process.get())) {
            // The id was reused by an unrelated program: PostgreSQL would take it for a running server and refuse
            // to start, so the stale file is removed instead.
            log.warn("{} names process {}, which is not PostgreSQL ({}); removing the stale file",
                    dataDir.resolve(PID_FILE), pid.get(), process.get().info().command().orElse("?"));
            Files.deleteIfExists(dataDir.resolve(PID_FILE));
            return false;
        }
        if (!mayRunOn(process.get(), dataDir)) {
            // The id was reused by the server of another data directory (another instance's, after a reboot): it is
            // not ours to stop, and the stale file is removed as above.
            log.warn("{} names process {}, a PostgreSQL server of another data directory; removing the stale file",
                    dataDir.resolve(PID_FILE), pid.get());
            Files.deleteIfExists(dataDir.resolve(PID_FILE));
            return false;
        }
        ProcessHandle postmaster = process.get();
        log.warn("stopping orphaned PostgreSQL server (pid {}) left running on {}", postmaster.pid(), dataDir);
        postmaster.destroy();
        if (!awaitExit(postmaster, dataDir, timeout)) {
            log.warn("PostgreSQL (pid {}) did not stop within {}; killing it", postmaster.pid(), timeout);
            postmaster.destroyForcibly();
            if (!awaitExit(postmaster, dataDir, timeout)) {
                throw new IllegalStateException("could not stop the orphaned PostgreSQL server (pid "
                        + postmaster.pid() + ") on " + dataDir);
            }
        }
        log.info("orphaned PostgreSQL server (pid {}) stopped", postmaster.pid());
        return true;
    }

    private static Optional<Long> readPid(Path dataDir) {
        try {
            List<String> lines = Files.readAllLines(dataDir.resolve(PID_FILE), StandardCharsets.UTF_8);
            if (lines.isEmpty() || lines.get(0).isBlank()) {
                return Optional.empty(); // being written by a server that is starting right now
            }
            return Optional.of(Long.parseLong(lines.get(0).trim()));
        } catch (NoSuchFileException e) {
            return Optional.empty();
        } catch (IOException | NumberFormatException e) {
            log.warn("cannot read {}: {}", dataDir.resolve(PID_FILE), e.toString());
            return Optional.empty();
        }
    }

    private static boolean awaitExit(ProcessHandle process, Path dataDir, Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (System.nanoTime() < deadline) {
            if (!isRunning(process)) {
                return true;
            }
            try {
                // onExit() of a process that is not our child is itself a polling loop; poll directly so that a
                // zombie (an exited process nobody has reaped yet) counts as gone.
                TimeUnit.MILLISECONDS.sleep(50);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return false;
            }
        }
        return !isRunning(process);
    }

    /** Alive and not a zombie: a process that exited but was not reaped still shows up as alive. */
    private static boolean isRunning(ProcessHandle process) {
        if (!process.isAlive()) {
            return false;
        }
        Path stat = Path.of("/proc", Long.toString(process.pid()), "stat");
        try {
            String content = Files.readString(stat, StandardCharsets.UTF_8);
            // Format: "pid (comm) S ...": the state follows the last ')', since comm may contain parentheses.
            int close = content.lastIndexOf(')');
            return close < 0 || close + 2 >= content.length() || content.charAt(close + 2) != 'Z';
        } catch (NoSuchFileException e) {
            return !Files.isDirectory(Path.of("/proc")) && process.isAlive(); // no procfs: trust isAlive
        } catch (IOException e) {
            return process.isAlive();
        }
    }

    /**
     * True unless the process is known to work in another directory: a postmaster changes into its data directory at
     * start, so its working directory tells which one it serves. One that cannot be read counts as this one.
     */
    private static boolean mayRunOn(ProcessHandle process, Path dataDir) {
        try {
            Path cwd = Files.readSymbolicLink(Path.of("/proc", Long.toString(process.pid()), "cwd"));
            return !Files.exists(cwd) || Files.isSameFile(cwd, dataDir);
        } catch (IOException | UnsupportedOperationException | SecurityException e) {
            return true;
        }
    }

    /** True unless the process is known to run some other program; an unknown command counts as PostgreSQL. */
    private static boolean mayBePostgres(ProcessHandle process) {
        return process.info().command()
                .map(command -> Path.of(command).getFileName().toString().startsWith("postgres"))
                .orElse(true);
    }
}
