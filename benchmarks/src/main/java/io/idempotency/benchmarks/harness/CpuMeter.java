package io.idempotency.benchmarks.harness;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Collection;
import java.util.HashMap;
import java.util.Map;
import java.util.function.Supplier;

/**
 * CPU time of the machine and of the three parties of the benchmark — the load generator (this JVM), the application
 * under test, and the PostgreSQL backends serving the application's connections (found by their
 * {@code application_name}; PostgreSQL's background processes and anything else on the machine count as "other") —
 * read from Linux's {@code /proc}, in clock ticks. On two saturated cores throughput is CPU per request, so this
 * tells where each scenario's time goes. Reports nothing where {@code /proc} is missing or the database is remote.
 */
final class CpuMeter {

    /** CPU ticks at one instant; {@code backends} maps the pid of each database backend to its ticks. */
    record Sample(long busy, long idle, long client, long app, Map<Long, Long> backends) {

        Usage minus(Sample before) {
            long database = 0;
            for (Map.Entry<Long, Long> backend : backends.entrySet()) { // a backend that ended is left out
                database += backend.getValue() - before.backends.getOrDefault(backend.getKey(), 0L);
            }
            return new Usage(busy - before.busy, idle - before.idle, client - before.client, app - before.app,
                    database);
        }
    }

    /** CPU ticks spent between two samples. */
    record Usage(long busy, long idle, long client, long app, long database) {

        static final Usage NONE = new Usage(0, 0, 0, 0, 0);

        Usage plus(Usage other) {
            return new Usage(busy + other.busy, idle + other.idle, client + other.client, app + other.app,
                    database + other.database);
        }

        long other() {
            return Math.max(0, busy - client - app - database);
        }
    }

    private final long appPid;
    private final Supplier<Collection<Long>> backendPids;
    private final boolean available = Files.isReadable(Path.of("/proc/stat"));

    CpuMeter(long appPid, Supplier<Collection<Long>> backendPids) {
        this.appPid = appPid;
        this.backendPids = backendPids;
    }

    boolean available() {
        return available;
    }

    /** Ticks per second of /proc ({@code USER_HZ}, 100 on Linux). */
    static double ticksPerSecond() {
        return 100.0;
    }

    Sample sample() {
        if (!available) {
            return new Sample(0, 0, 0, 0, Map.of());
        }
        try {
            Map<Long, Long> backends = new HashMap<>();
            for (long pid : backendPids.get()) {
                String stat = read(Path.of("/proc/" + pid + "/stat"));
                if (stat != null && stat.contains("(postgres)")) {
                    backends.put(pid, processTicks(stat));
                }
            }
            String[] cpu = Files.readAllLines(Path.of("/proc/stat")).get(0).trim().split("\\s+");
            // cpu user nice system idle iowait irq softirq steal
            long busy = value(cpu, 1) + value(cpu, 2) + value(cpu, 3) + value(cpu, 6) + value(cpu, 7) + value(cpu, 8);
            long idle = value(cpu, 4) + value(cpu, 5);
            return new Sample(busy, idle, processTicks(read(Path.of("/proc/self/stat"))),
                    processTicks(read(Path.of("/proc/" + appPid + "/stat"))), backends);
        } catch (IOException | RuntimeException e) {
            return new Sample(0, 0, 0, 0, Map.of());
        }
    }

    private static long value(String[] fields, int index) {
        return index < fields.length ? Long.parseLong(fields[index]) : 0;
    }

    /** utime + stime of a /proc/<pid>/stat line (fields 14 and 15; the name in parentheses may hold spaces). */
    private static long processTicks(String stat) {
        if (stat == null) {
            return 0;
        }
        String[] fields = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
        return Long.parseLong(fields[11]) + Long.parseLong(fields[12]);
    }

    private static String read(Path path) {
        try {
            return Files.readString(path);
        } catch (IOException e) {
            return null; // the process ended
        }
    }
}
