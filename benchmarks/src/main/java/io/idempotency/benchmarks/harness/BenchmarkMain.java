package io.idempotency.benchmarks.harness;

import io.idempotency.benchmarks.harness.LoadGenerator.Kind;
import io.idempotency.benchmarks.harness.LoadGenerator.Round;
import tools.jackson.databind.JsonNode;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * The entry point of {@code benchmarks/run}: starts the application under test on PostgreSQL, drives it over HTTP in
 * alternating rounds (plain, first execution, replay, storm — so that machine noise hits every scenario alike), then
 * the growth case, and prints a table whose last line is the machine-readable {@code RESULT} line. See
 * docs/performance.md.
 */
public final class BenchmarkMain {

    static final String PLAIN = "plain";
    static final String FIRST = "first";
    static final String REPLAY = "replay";
    static final String STORM = "storm";
    static final String IDEMPOTENT_SCOPE = "POST /idempotent";

    private final Options options;
    private final Map<String, List<Round>> rounds = new LinkedHashMap<>();
    private final Map<String, CpuMeter.Usage> cpu = new LinkedHashMap<>();
    private final Map<String, Long> walBytes = new LinkedHashMap<>();
    private BenchDatabase database;
    private final List<String> stormKeys = new ArrayList<>();
    private CpuMeter cpuMeter;

    /** One round of some scenario. */
    private interface RoundRunner {
        Round run() throws InterruptedException;
    }

    private BenchmarkMain(Options options) {
        this.options = options;
    }

    /** The harness's own Logback configuration (standard error), unless one was given. */
    static final String LOGGING_CONFIGURATION = "bench-harness-logback.xml";

    public static void main(String[] args) throws Exception {
        // before any library logs: Logback, on the class path for the application under test, would otherwise print
        // to standard output, e.g. the embedded PostgreSQL's shutdown after the RESULT line, which must stay last
        if (System.getProperty("logback.configurationFile") == null) {
            System.setProperty("logback.configurationFile", LOGGING_CONFIGURATION);
        }
        Options options;
        try {
            options = Options.parse(args);
        } catch (Options.HelpRequested e) {
            System.out.print(Options.USAGE);
            return;
        } catch (IllegalArgumentException e) {
            System.err.println(e.getMessage());
            System.err.print(Options.USAGE);
            System.exit(2);
            return;
        }
        if (options.jmh()) {
            JmhBenchmarks.run(options.quick());
            FingerprintHeap.run();
            return;
        }
        boolean valid = new BenchmarkMain(options).run();
        // exit explicitly: the embedded PostgreSQL and HTTP client threads must not keep the JVM alive
        System.exit(valid ? 0 : 1);
    }

    /** Runs what the options ask for; false when the figures do not stand (see {@link Report#print()}). */
    private boolean run() throws Exception {
        Machine machine = Machine.describe();
        System.out.println("machine: " + machine.summary());
        Path benchDir = Path.of(System.getProperty("bench.dir", "benchmarks"));
        try (BenchDatabase database = BenchDatabase.choose()) {
            this.database = database;
            Thread cleanup = new Thread(database::close, "drop-bench-schema");
            Runtime.getRuntime().addShutdownHook(cleanup);
            String postgres = database.queryString("SELECT version()");
            String settings = "shared_buffers=" + database.queryString("SHOW shared_buffers")
                    + ", synchronous_commit=" + database.queryString("SHOW synchronous_commit")
                    + ", fsync=" + database.queryString("SHOW fsync");
            System.out.println("PostgreSQL: " + postgres.replaceAll(" on .*", "") + " (" + settings + "), "
                    + database.description() + ", schema " + database.schema());
            Path log = benchDir.resolve("target").resolve("bench-app.log");
            try (AppUnderTest app = AppUnderTest.start(database, log, options.appHeap());
                 LoadGenerator load = new LoadGenerator(AppUnderTest.HOST, app.port(), options.connections(),
                         options.stormSize())) {
                System.out.println("application under test: pid " + app.pid() + ", http://" + AppUnderTest.HOST + ":"
                        + app.port() + ", Hikari pool 10, log " + log);
                System.out.println("load: " + options.connections() + " connections (storm: groups of "
                        + options.stormSize() + "), " + options.rounds() + " rounds of " + seconds(options.roundDuration())
                        + " per scenario");
                cpuMeter = new CpuMeter(app.pid(), database::applicationBackends);
                if (options.explainOnly()) {
                    warmUp(load, 1, Duration.ofSeconds(1));
                    Traces traces = explain(app, load);
                    traces.print(true);
                    return true;
                }
                warmUp(load, options.warmupCycles(), options.warmupDuration());
                app.resetStats();
                Duration length = options.roundDuration();
                List<RoundRunner> scenarios = List.of(
                        () -> load.steady(PLAIN, Kind.PLAIN, length),
                        () -> load.steady(FIRST, Kind.FIRST, length),
                        () -> load.steady(REPLAY, Kind.REPLAY, length),
                        () -> load.storm(STORM, length, Integer.MAX_VALUE, false));
                for (int round = 1; round <= options.rounds(); round++) {
                    // every scenario takes every position in turn and follows every other equally often, so that drift
                    // over the run, and the work one scenario leaves behind for the next, hit them alike
                    List<Round> done = new ArrayList<>();
                    for (RoundRunner scenario : RoundOrder.rotated(scenarios, round - 1)) {
                        done.add(measure(scenario));
                    }
                    progress("round " + round + "/" + options.rounds(), done);
                }
                Traces traces = explain(app, load);
                Thread.sleep(1_500); // table statistics reach pg_stat_user_tables within a second
                String tableWrites = database.idempotencyTableWrites();
                StormCheck storm = StormCheck.count(database, stormKeys);
                List<Growth> growth = growth(database, app, load);
                Report report = new Report(options, machine, postgres, rounds, cpu, walBytes, tableWrites,
                        app.stats(), storm, growth, traces);
                return report.print();
            } finally {
                database.close();
                Runtime.getRuntime().removeShutdownHook(cleanup);
            }
        }
    }

    private void warmUp(LoadGenerator load, int cycles, Duration duration) throws InterruptedException {
        System.out.println("warming up (" + cycles + " × 4 scenarios × " + seconds(duration) + ")");
        for (int cycle = 0; cycle < cycles; cycle++) {
            check(load.steady("warmup-plain", Kind.PLAIN, duration));
            check(load.steady("warmup-first", Kind.FIRST, duration));
            check(load.steady("warmup-replay", Kind.REPLAY, duration));
            Round storm = check(load.storm("warmup-storm", duration, Integer.MAX_VALUE, false));
            stormKeys.addAll(storm.stormKeys());
        }
    }

    private Round measure(RoundRunner runner) throws InterruptedException {
        long walBefore = database.walPosition();
        CpuMeter.Sample before = cpuMeter.sample();
        Round round = runner.run();
        CpuMeter.Usage used = cpuMeter.sample().minus(before);
        walBytes.merge(round.scenario(), database.walPosition() - walBefore, Long::sum);
        check(round);
        rounds.computeIfAbsent(round.scenario(), name -> new ArrayList<>()).add(round);
        cpu.merge(round.scenario(), used, CpuMeter.Usage::plus);
        stormKeys.addAll(round.stormKeys());
        return round;
    }

    private static Round check(Round round) {
        if (round.errors() > 0) {
            System.out.println("  ! " + round.scenario() + ": " + round.errors() + " unexpected answers, e.g. "
                    + round.firstError());
        }
        if (round.requests() == 0) {
            throw new IllegalStateException("no request of " + round.scenario() + " succeeded: " + round.firstError());
        }
        return round;
    }

    private static void progress(String label, List<Round> done) {
        StringBuilder line = new StringBuilder("  ").append(label).append(":");
        for (Round round : done) {
            line.append(String.format(Locale.ROOT, "  %s %.0f/s", round.scenario(), round.throughput()));
        }
        System.out.println(line);
    }

    /** One traced request of each kind, and one traced storm group, on the running application. */
    private Traces explain(AppUnderTest app, LoadGenerator load) throws IOException, InterruptedException {
        load.single(Kind.PLAIN, "explain-plain", null, true);
        String key = LoadGenerator.newKey();
        load.single(Kind.FIRST, "explain-first", key, true);
        load.single(Kind.REPLAY, "explain-replay", key, true);
        Round storm = load.storm("explain-storm", Duration.ofSeconds(10), 1, true);
        stormKeys.addAll(storm.stormKeys());
        // the application records a request after its answer has gone out: wait a moment for the group's last ones
        long patience = System.nanoTime() + Duration.ofSeconds(2).toNanos();
        JsonNode stats = app.stats();
        while (stats.path("scenarios").path("explain-storm").path("traces").size() < storm.requests()
                && System.nanoTime() < patience) {
            Thread.sleep(50);
            stats = app.stats();
        }
        return Traces.from(stats);
    }

    /** First executions (alternating with plain requests) with 0, 1M, 10M… rows in the idempotency table. */
    private List<Growth> growth(BenchDatabase database, AppUnderTest app, LoadGenerator load)
            throws SQLException, InterruptedException {
        List<Growth> results = new ArrayList<>();
        if (options.growthRows().isEmpty()) {
            return results;
        }
        String scope = database.queryString("SELECT scope FROM idempotency_keys WHERE scope LIKE 'POST %idempotent'"
                + " LIMIT 1");
        database.truncate();
        long filled = 0;
        for (long rows : options.growthRows()) {
            String label = Growth.label(rows);
            long fillStarted = System.nanoTime();
            if (rows > filled) {
                System.out.printf(Locale.ROOT, "growth: filling idempotency_keys to %,d rows, then vacuuming it…%n", rows);
                database.fillIdempotencyKeys(filled, rows, scope != null ? scope : IDEMPOTENT_SCOPE);
                filled = rows;
            }
            // 0 rows: no ANALYZE after the TRUNCATE. The table then looks "never analysed", as a new one does, and the
            // planner assumes a small table; statistics of an empty table would let PostgreSQL cache plans that
            // suit 0 rows while the measurement itself adds thousands.
            double fillSeconds = (System.nanoTime() - fillStarted) / 1e9;
            check(load.steady("warmup-growth", Kind.FIRST, Duration.ofSeconds(1)));
            List<Round> done = new ArrayList<>();
            Duration length = options.growthRoundDuration();
            RoundRunner plain = () -> load.steady(Growth.scenario(label, PLAIN), Kind.PLAIN, length);
            RoundRunner first = () -> load.steady(Growth.scenario(label, FIRST), Kind.FIRST, length);
            for (int round = 0; round < options.growthRounds(); round++) {
                // plain, first; first, plain; …: over an even number of rounds neither runs later on average
                for (RoundRunner scenario : RoundOrder.alternated(plain, first, round)) {
                    done.add(measure(scenario));
                }
            }
            progress("growth @ " + label + " rows (filled in " + String.format(Locale.ROOT, "%.0f s", fillSeconds)
                    + ")", done);
            results.add(new Growth(rows, label, fillSeconds));
        }
        return results;
    }

    private static String seconds(Duration duration) {
        return String.format(Locale.ROOT, "%.1f s", duration.toMillis() / 1000.0);
    }

    /** A table size of the growth case. */
    record Growth(long rows, String label, double fillSeconds) {

        static String label(long rows) {
            if (rows >= 1_000_000 && rows % 1_000_000 == 0) {
                return rows / 1_000_000 + "M";
            }
            if (rows >= 1_000 && rows % 1_000 == 0) {
                return rows / 1_000 + "k";
            }
            return Long.toString(rows);
        }

        static String scenario(String label, String kind) {
            return "growth-" + label + "-" + kind;
        }
    }

    /** The business rows of every storm key, counted in the database. */
    record StormCheck(int keys, long maxRowsPerKey, long keysWithoutRow, long keysWithSeveralRows) {

        static StormCheck count(BenchDatabase database, List<String> keys) throws SQLException {
            long withRows = database.queryLong("SELECT count(DISTINCT reference) FROM bench_orders"
                    + " WHERE reference LIKE 'storm-%'");
            long several = database.queryLong("SELECT count(*) FROM (SELECT reference FROM bench_orders"
                    + " WHERE reference LIKE 'storm-%' GROUP BY reference HAVING count(*) > 1) AS t");
            long max = database.queryLong("SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM bench_orders"
                    + " WHERE reference LIKE 'storm-%' GROUP BY reference) AS t");
            return new StormCheck(keys.size(), max, keys.size() - withRows, several);
        }
    }

    /** The host, for the report. */
    record Machine(int cpus, String cpuModel, String memory, String os, String java) {

        static Machine describe() {
            String model = "unknown";
            String memory = "unknown";
            try {
                model = Files.readAllLines(Path.of("/proc/cpuinfo")).stream()
                        .filter(line -> line.startsWith("model name")).findFirst()
                        .map(line -> line.substring(line.indexOf(':') + 1).trim()).orElse(model);
                memory = Files.readAllLines(Path.of("/proc/meminfo")).stream()
                        .filter(line -> line.startsWith("MemTotal")).findFirst()
                        .map(line -> String.format(Locale.ROOT, "%.0f GB",
                                Long.parseLong(line.replaceAll("\\D", "")) / 1024.0 / 1024.0))
                        .orElse(memory);
            } catch (IOException | RuntimeException ignored) {
                // not Linux: leave unknown
            }
            return new Machine(Runtime.getRuntime().availableProcessors(), model, memory,
                    System.getProperty("os.name") + " " + System.getProperty("os.version"),
                    "Java " + System.getProperty("java.version") + " (" + System.getProperty("java.vm.name") + ")");
        }

        String summary() {
            return cpus + " cores (" + cpuModel + "), " + memory + " RAM, " + os + ", " + java;
        }
    }
}
