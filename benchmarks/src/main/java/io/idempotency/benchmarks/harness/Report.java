package io.idempotency.benchmarks.harness;

import io.idempotency.benchmarks.harness.BenchmarkMain.Growth;
import io.idempotency.benchmarks.harness.BenchmarkMain.Machine;
import io.idempotency.benchmarks.harness.BenchmarkMain.StormCheck;
import io.idempotency.benchmarks.harness.LoadGenerator.Round;
import io.idempotency.benchmarks.instrument.InstrumentedDataSource;
import tools.jackson.databind.JsonNode;

import java.lang.management.ManagementFactory;
import java.math.BigDecimal;
import java.math.RoundingMode;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;

import static io.idempotency.benchmarks.harness.BenchmarkMain.FIRST;
import static io.idempotency.benchmarks.harness.BenchmarkMain.PLAIN;
import static io.idempotency.benchmarks.harness.BenchmarkMain.REPLAY;
import static io.idempotency.benchmarks.harness.BenchmarkMain.STORM;

/** The table, the derived ratios, the targets, and the RESULT line (printed last). */
final class Report {

    private final Options options;
    private final Machine machine;
    private final String postgres;
    private final Map<String, List<Round>> rounds;
    private final Map<String, CpuMeter.Usage> cpu;
    private final Map<String, Long> walBytes;
    private final String tableWrites;
    private final JsonNode stats;
    private final StormCheck storm;
    private final List<Growth> growth;
    private final Traces traces;

    Report(Options options, Machine machine, String postgres, Map<String, List<Round>> rounds,
           Map<String, CpuMeter.Usage> cpu, Map<String, Long> walBytes, String tableWrites, JsonNode stats,
           StormCheck storm, List<Growth> growth, Traces traces) {
        this.options = options;
        this.machine = machine;
        this.postgres = postgres;
        this.rounds = rounds;
        this.cpu = cpu;
        this.walBytes = walBytes;
        this.tableWrites = tableWrites;
        this.stats = stats;
        this.storm = storm;
        this.growth = growth;
        this.traces = traces;
    }

    /** A scenario's round trips from the database when no request of it made any (replays all from memory). */
    static final int NONE = -1;

    /** Which of a scenario's answers the load generator expects: only those count in its figures. */
    enum Expected {
        EXECUTED("executed"), REPLAYED("replayed"), EITHER("executed", "replayed");

        final List<String> answers;

        Expected(String... answers) {
            this.answers = List.of(answers);
        }
    }

    /**
     * The round trips per request of {@code expected} answers, from the application's statistics of one scenario:
     * round trips to the number of requests that made them.
     */
    static TreeMap<Integer, Long> roundTrips(JsonNode app, Expected expected) {
        TreeMap<Integer, Long> roundTrips = new TreeMap<>();
        for (String answer : expected.answers) {
            for (Map.Entry<String, JsonNode> entry : app.path("roundTrips").path(answer).properties()) {
                roundTrips.merge(Integer.parseInt(entry.getKey()), entry.getValue().asLong(), Long::sum);
            }
        }
        return roundTrips;
    }

    /** A scenario's rounds from the client's side, and its statistics from the application's side. */
    private final class Scenario {
        final String name;
        final long requests;
        final long errors;
        final double throughput;
        final double minRound;
        final double maxRound;
        final double p50;
        final double p99;
        final JsonNode app;
        final TreeMap<Integer, Long> roundTrips;

        Scenario(String name, Expected expected) {
            this.name = name;
            List<Round> done = rounds.getOrDefault(name, List.of());
            long requests = 0;
            long errors = 0;
            long elapsed = 0;
            double min = Double.MAX_VALUE;
            double max = 0;
            List<long[]> latencies = new ArrayList<>();
            for (Round round : done) {
                requests += round.requests();
                errors += round.errors();
                elapsed += round.elapsedNanos();
                min = Math.min(min, round.throughput());
                max = Math.max(max, round.throughput());
                latencies.add(round.latencies());
            }
            long[] all = latencies.stream().flatMapToLong(Arrays::stream).sorted().toArray();
            this.requests = requests;
            this.errors = errors;
            this.throughput = elapsed == 0 ? 0 : requests * 1e9 / elapsed;
            this.minRound = done.isEmpty() ? 0 : min;
            this.maxRound = max;
            this.p50 = percentile(all, 0.50) / 1e6;
            this.p99 = percentile(all, 0.99) / 1e6;
            this.app = stats.path("scenarios").path(name);
            this.roundTrips = roundTrips(app, expected);
        }

        /** The number of round trips most requests of this scenario made. */
        int typicalRoundTrips() {
            return roundTrips.entrySet().stream().max(Map.Entry.comparingByValue()).map(Map.Entry::getKey).orElse(-1);
        }

        /**
         * The number of round trips most requests of this scenario that used the database made ({@link #NONE} if none
         * did): a replay answered from memory makes none, so the most common count overall would hide what a replay
         * from the database costs as soon as half the replays come from memory.
         */
        int typicalDatabaseRoundTrips() {
            return roundTrips.entrySet().stream().filter(entry -> entry.getKey() > 0)
                    .max(Map.Entry.comparingByValue()).map(Map.Entry::getKey).orElse(NONE);
        }

        /** The share of this scenario's requests that made no round trip, in percent. */
        double percentWithoutRoundTrips() {
            long count = roundTrips.values().stream().mapToLong(Long::longValue).sum();
            return count == 0 ? 0 : 100.0 * roundTrips.getOrDefault(0, 0L) / count;
        }

        double meanRoundTrips() {
            long count = roundTrips.values().stream().mapToLong(Long::longValue).sum();
            long total = roundTrips.entrySet().stream().mapToLong(e -> (long) e.getKey() * e.getValue()).sum();
            return count == 0 ? 0 : (double) total / count;
        }

        String roundTripsColumn() {
            if (roundTrips.isEmpty()) {
                return "?";
            }
            if (roundTrips.size() == 1) {
                return Integer.toString(roundTrips.firstKey());
            }
            long count = roundTrips.values().stream().mapToLong(Long::longValue).sum();
            StringBuilder text = new StringBuilder(String.format(Locale.ROOT, "%d (mean %.2f:", typicalRoundTrips(),
                    meanRoundTrips()));
            roundTrips.forEach((value, n) -> text.append(String.format(Locale.ROOT, " %d×%s", value,
                    percent(n, count))));
            return text.append(')').toString();
        }

        double claimP50() {
            return app.path("claim").path("p50Micros").asDouble();
        }

        double claimP99() {
            return app.path("claim").path("p99Micros").asDouble();
        }

        /** How many claim statements the application timed (its p50 and p99 are 0 when none was). */
        long claimCount() {
            return app.path("claim").path("count").asLong();
        }
    }

    /**
     * Prints the report, the RESULT line last, and tells whether its figures stand: false when some answer of the
     * measured rounds was unexpected (those answers count in no figure, so they shift the ratios: a failed first
     * execution leaves the first scenario fewer requests in the same time, and replay / first rises), or when the
     * application's round trip counts cannot be the wire's (none for a plain request, fewer for a first execution).
     */
    boolean print() {
        Scenario plain = new Scenario(PLAIN, Expected.EXECUTED);
        Scenario first = new Scenario(FIRST, Expected.EXECUTED);
        Scenario replay = new Scenario(REPLAY, Expected.REPLAYED);
        Scenario stormScenario = new Scenario(STORM, Expected.EITHER);

        System.out.println();
        System.out.println("machine: " + machine.summary());
        System.out.println("database: " + postgres);
        System.out.println("library: git " + System.getProperty("bench.source", "unknown"));
        System.out.printf(Locale.ROOT, "load: %d keep-alive HTTP connections, %d alternating rounds of %d s per"
                        + " scenario; storm: groups of %d concurrent requests per key%n", options.connections(),
                options.rounds(), options.roundDuration().toSeconds(), options.stormSize());
        System.out.println();
        String header = String.format(Locale.ROOT, "%-34s %9s %8s %15s %8s %8s  %s", "scenario", "requests", "req/s",
                "rounds min-max", "p50 ms", "p99 ms", "DB round trips/request");
        System.out.println(header);
        System.out.println("-".repeat(header.length() + 10));
        row("plain (@Transactional)", plain);
        row("first execution (@Idempotent)", first);
        row("replay (@Idempotent, same key)", replay);
        row("storm (" + options.stormSize() + " requests per key)", stormScenario);
        for (Growth size : growth) {
            row("growth: first @ " + size.label() + " rows",
                    new Scenario(Growth.scenario(size.label(), FIRST), Expected.EXECUTED));
        }
        for (Growth size : growth) {
            row("growth: plain @ " + size.label() + " rows",
                    new Scenario(Growth.scenario(size.label(), PLAIN), Expected.EXECUTED));
        }

        printCpu(List.of(plain, first, replay, stormScenario));

        double firstRatio = first.throughput / plain.throughput;
        double replayRatio = replay.throughput / first.throughput;
        int plainTrips = plain.typicalRoundTrips();
        int firstTrips = first.typicalRoundTrips() - plainTrips;
        // what a replay from the database costs; when every replay came from memory, that was not measured, and the
        // RESULT line (whose counts are integers) shows what those replays cost, 0, while the target says "not
        // measured" rather than met
        boolean replaysFromDatabase = replay.typicalDatabaseRoundTrips() != NONE;
        int replayTrips = replaysFromDatabase ? replay.typicalDatabaseRoundTrips() : replay.typicalRoundTrips();
        int maxConnections = stormScenario.app.path("maxConnectionsPerKey").asInt();
        JsonNode handlerRuns = stats.path("stormHandlerExecutions");
        long executions = executionsPerKey(storm.maxRowsPerKey(), handlerRuns.path("maxPerKey").asLong(),
                storm.keysWithoutRow());

        System.out.println();
        System.out.printf(Locale.ROOT, "first_ratio  = first / plain throughput  = %.0f / %.0f = %s%n",
                first.throughput, plain.throughput, ratio(firstRatio));
        System.out.printf(Locale.ROOT, "replay_ratio = replay / first throughput = %.0f / %.0f = %s%n",
                replay.throughput, first.throughput, ratio(replayRatio));
        System.out.printf(Locale.ROOT, "round trips per request (counted on the wire): plain %d, first %d (the library"
                        + " adds %d),%n  replay %s from the database (all the library's: the handler does not run);"
                        + " %.0f%% of replays were answered from memory, with none%n", plainTrips,
                first.typicalRoundTrips(), firstTrips, replaysFromDatabase ? replayTrips : "(none came)",
                replay.percentWithoutRoundTrips());
        if (!replaysFromDatabase) {
            System.out.println("  ! every replay was answered from memory (fewer keys completed than an instance keeps"
                    + " answers of): replay_ratio is that of replays from memory, replay_round_trips is what they cost"
                    + " (" + replayTrips + "), and what a replay from the database costs was not measured; a longer run"
                    + " (more first executions) measures it");
        }
        System.out.printf(Locale.ROOT, "storm: %,d requests in groups of %d sharing a key: %,d executed, %,d replayed,"
                        + " %d unexpected answers%n", sum(STORM, Round::requests), options.stormSize(),
                sum(STORM, Round::executed), sum(STORM, Round::replayed), stormScenario.errors);
        System.out.printf(Locale.ROOT, "  business rows per key, counted in the database over all %,d storm keys: max %d"
                        + " (keys with none: %d, with several: %d)%n", storm.keys(), storm.maxRowsPerKey(),
                storm.keysWithoutRow(), storm.keysWithSeveralRows());
        System.out.printf(Locale.ROOT, "  handler executions per key, counted in the application over %,d storm keys:"
                + " max %d%n", handlerRuns.path("keys").asLong(), handlerRuns.path("maxPerKey").asLong());
        System.out.printf(Locale.ROOT, "  pool connections held at once by requests with the same key (instrumented):"
                + " max %d%n", maxConnections);
        System.out.printf(Locale.ROOT, "pgjdbc round trips outside requests since the warm-up: %d (pool upkeep);"
                        + " Flush messages: %d; wire parse errors: %s%n",
                stats.path("roundTripsOutsideRequestsSinceReset").asLong(), stats.path("flushesTotal").asLong(),
                stats.path("wireUnreadable").isNull() ? "none" : stats.path("wireUnreadable").asString());
        String growthRatioText = "";
        double growthRatio = Double.NaN;
        List<String> claimsNotFound = new ArrayList<>();
        if (!growth.isEmpty()) {
            System.out.println();
            System.out.println("growth: first executions with N rows already in idempotency_keys (alternating with"
                    + " plain requests)");
            System.out.printf(Locale.ROOT, "  %-10s %11s %8s %8s %11s %11s %14s %14s %10s%n", "rows", "first req/s",
                    "p50 ms", "p99 ms", "plain req/s", "first/plain", "claim p50 µs", "claim p99 µs", "fill s");
            Scenario empty = null;
            Scenario largest = null;
            for (Growth size : growth) {
                Scenario f = new Scenario(Growth.scenario(size.label(), FIRST), Expected.EXECUTED);
                Scenario p = new Scenario(Growth.scenario(size.label(), PLAIN), Expected.EXECUTED);
                boolean claimed = f.claimCount() > 0;
                if (!claimed) {
                    claimsNotFound.add(size.label());
                }
                // cut, as first_ratio is: the column is the same ratio at each size
                System.out.printf(Locale.ROOT, "  %-10s %11.0f %8.2f %8.2f %11.0f %11s %14s %14s %10.0f%n",
                        String.format(Locale.ROOT, "%,d", size.rows()), f.throughput, f.p50, f.p99, p.throughput,
                        ratio(f.throughput / p.throughput), claimed ? micros(f.claimP50()) : "-",
                        claimed ? micros(f.claimP99()) : "-", size.fillSeconds());
                if (size.rows() == 0) {
                    empty = f;
                }
                largest = f;
            }
            if (claimsNotFound.isEmpty() && empty != null && largest != null && largest != empty) {
                growthRatio = largest.claimP50() / empty.claimP50();
                Growth biggest = growth.get(growth.size() - 1);
                growthRatioText = String.format(Locale.ROOT, "%s× (claim p50 at %s rows / at 0 rows)",
                        upperBoundRatio(growthRatio), biggest.label());
            }
            System.out.println("  claim = the library's one claim statement, timed around executeQuery() in the"
                    + " application: one round trip");
            if (!claimsNotFound.isEmpty()) {
                // the application finds the claim by a literal piece of its SQL: a change to the store's SQL (or a
                // store whose claim reads otherwise) leaves it timing nothing, which must not pass for a 0 µs claim
                System.out.println("  ! claim statement not found at " + String.join(", ", claimsNotFound) + " rows:"
                        + " no statement the application prepared contained \"" + InstrumentedDataSource.CLAIM_MARK
                        + "\", by which InstrumentedDataSource recognises the claim (has the store's claim SQL"
                        + " changed?); claim latency not measured");
            }
        }

        traces.print(options.explain());

        long unexpected = rounds.values().stream().flatMap(List::stream).mapToLong(Round::errors).sum();

        System.out.println();
        System.out.println("targets (shown by this benchmark, not asserted by tests)");
        target("every answer of the measured rounds as expected", String.format(Locale.ROOT, "%,d unexpected answers",
                unexpected), unexpected == 0);
        // a plain request inserts a row: 0 round trips (or none seen) means the counting sockets saw nothing, and
        // the library's counts (first minus plain, replay) would come out as 0, meeting their targets; a first
        // execution runs the same handler and more, so fewer round trips than a plain request means some were missed
        boolean counted = plainTrips >= 1 && firstTrips >= 0;
        target("round trips counted on the wire (plain > 0, first >= plain)", plainTrips < 0 ? "no request seen"
                : String.format(Locale.ROOT, "plain %d, first %d", plainTrips, first.typicalRoundTrips()), counted);
        target("first_ratio >= 0.85", ratio(firstRatio), firstRatio >= 0.85);
        target("replay_ratio >= 3.0", ratio(replayRatio), replayRatio >= 3.0);
        target("first_round_trips <= 2 beyond the handler's", Integer.toString(firstTrips), firstTrips <= 2);
        if (!replaysFromDatabase) {
            verdict("replay_round_trips <= 2", replayTrips + ": no replay from the database", "not measured");
        } else {
            target("replay_round_trips <= 2", Integer.toString(replayTrips), replayTrips <= 2);
        }
        target("storm_executions_per_key = 1", Long.toString(executions), executions == 1);
        target("storm_max_connections_per_key = 1", Integer.toString(maxConnections), maxConnections == 1);
        boolean tenMillion = growth.stream().anyMatch(g -> g.rows() >= 10_000_000);
        String growthTarget = "claim latency at 10M rows <= 1.5× empty";
        if (!claimsNotFound.isEmpty()) {
            // a size without a timed claim has p50 0: its ratio would be Infinity or NaN, which says nothing of why
            verdict(growthTarget, "claim statement not found", "not measured");
        } else if (Double.isNaN(growthRatio)) {
            // the growth case did not run (--no-growth) or had no size beside the empty table: no verdict
            verdict(growthTarget, "-", "not measured");
        } else {
            target(growthTarget + (tenMillion ? "" : " (10M skipped: largest size shown)"), growthRatioText,
                    growthRatio <= 1.5);
        }

        if (unexpected > 0) {
            System.out.printf(Locale.ROOT, "  ! %,d unexpected answers (see the table): the figures leave them out, so"
                    + " they do not describe the library; exit status 1%n", unexpected);
        }
        if (!counted) {
            System.out.println("  ! the application's round trip counts cannot be the wire's (a plain request makes"
                    + " at least one, a first execution at least as many): exit status 1");
        }

        System.out.println();
        System.out.println(wallClock(System.currentTimeMillis(), System.getProperty("bench.started"),
                System.getProperty("bench.buildSeconds"), ManagementFactory.getRuntimeMXBean().getStartTime()));
        System.out.println();
        System.out.printf(Locale.ROOT, "RESULT first_ratio=%s replay_ratio=%s first_round_trips=%d"
                        + " replay_round_trips=%d storm_executions_per_key=%d storm_max_connections_per_key=%d%n",
                ratio(firstRatio), ratio(replayRatio), firstTrips, replayTrips, executions, maxConnections);
        return unexpected == 0 && counted;
    }

    /**
     * The run's wall-clock time up to the report: from when {@code benchmarks/run} started ({@code startedSeconds},
     * seconds since the epoch), the build included, when the script said so; else from the harness's JVM start (run
     * without the script, e.g. from an IDE: a build, if any, is not included, and the line says so).
     */
    static String wallClock(long nowMillis, String startedSeconds, String buildSeconds, long harnessStartMillis) {
        long harness = (nowMillis - harnessStartMillis) / 1000;
        try {
            long total = nowMillis / 1000 - Long.parseLong(startedSeconds);
            long build = Long.parseLong(buildSeconds);
            return "wall-clock time of the run: " + duration(total) + " (build " + duration(build) + ", then the"
                    + " harness " + duration(harness) + ")";
        } catch (NumberFormatException notFromTheScript) {
            return "wall-clock time of the harness: " + duration(harness) + " (started without benchmarks/run: a"
                    + " build is not included)";
        }
    }

    /** Whole seconds as the report prints a run's length: "45 s", "9 min 15 s". */
    static String duration(long seconds) {
        return seconds < 60 ? seconds + " s" : seconds / 60 + " min " + seconds % 60 + " s";
    }

    /**
     * A ratio as printed: two decimals, cut rather than rounded, so that a printed value never meets a target (at
     * least 0.85, at least 3.0) that the measured one misses: 0.847 prints 0.84, not 0.85.
     */
    static String ratio(double value) {
        if (!Double.isFinite(value)) {
            return String.valueOf(value);
        }
        return BigDecimal.valueOf(value).setScale(2, RoundingMode.FLOOR).toPlainString();
    }

    /**
     * A ratio whose target is an upper bound (at most 1.5), as printed: two decimals, rounded up, so that 1.504 prints
     * 1.51, not 1.50.
     */
    static String upperBoundRatio(double value) {
        if (!Double.isFinite(value)) {
            return String.valueOf(value);
        }
        return BigDecimal.valueOf(value).setScale(2, RoundingMode.CEILING).toPlainString();
    }

    /**
     * Executions per storm key as printed: the most any key had, counting business rows (in the database) and handler
     * runs (in the application: a run whose transaction rolled back leaves no row), but 0 when a key has none at all
     * and none has more than one, so that a key that never ran does not pass for exactly one execution per key.
     */
    static long executionsPerKey(long maxRowsPerKey, long maxHandlerRunsPerKey, long keysWithoutRow) {
        long most = Math.max(maxRowsPerKey, maxHandlerRunsPerKey);
        return most <= 1 && keysWithoutRow > 0 ? 0 : most;
    }

    /** CPU time per request of each party, from /proc: on two saturated cores this is what sets throughput. */
    private void printCpu(List<Scenario> scenarios) {
        CpuMeter.Usage total = cpu.values().stream().reduce(CpuMeter.Usage.NONE, CpuMeter.Usage::plus);
        if (total.busy() + total.idle() == 0) {
            return;
        }
        System.out.println();
        System.out.println("CPU time per request, µs (Linux /proc; all share the machine's " + machine.cpus()
                + " cores;");
        System.out.println("  other = PostgreSQL's background processes, the kernel and everything else running)");
        System.out.printf(Locale.ROOT, "  %-10s %12s %10s %12s %10s %10s %8s %14s%n", "scenario", "load client", "app",
                "PG backends", "other", "total", "idle", "WAL bytes/req");
        for (Scenario scenario : scenarios) {
            CpuMeter.Usage used = cpu.get(scenario.name);
            if (used == null || scenario.requests == 0) {
                continue;
            }
            double perRequest = 1e6 / CpuMeter.ticksPerSecond() / scenario.requests;
            System.out.printf(Locale.ROOT, "  %-10s %12.0f %10.0f %12.0f %10.0f %10.0f %7.0f%% %14.0f%n", scenario.name,
                    used.client() * perRequest, used.app() * perRequest, used.database() * perRequest,
                    used.other() * perRequest, used.busy() * perRequest,
                    100.0 * used.idle() / Math.max(1, used.idle() + used.busy()),
                    (double) walBytes.getOrDefault(scenario.name, 0L) / scenario.requests);
        }
        System.out.println("  WAL bytes are the server's (cluster-wide), checkpoints' full-page images included");
        System.out.println("  idempotency_keys since it was created (warm-up included): " + tableWrites);
    }

    private void row(String label, Scenario scenario) {
        if (scenario.requests == 0) {
            return;
        }
        System.out.printf(Locale.ROOT, "%-34s %9d %8.0f %15s %8.2f %8.2f  %s%s%n", label, scenario.requests,
                scenario.throughput, String.format(Locale.ROOT, "%.0f-%.0f", scenario.minRound, scenario.maxRound),
                scenario.p50, scenario.p99, scenario.roundTripsColumn(),
                scenario.errors == 0 ? "" : "  (" + scenario.errors + " unexpected answers)");
    }

    private static void target(String target, String measured, boolean met) {
        verdict(target, measured, met ? "met" : "MISSED");
    }

    private static void verdict(String target, String measured, String verdict) {
        System.out.printf(Locale.ROOT, "  %-62s %-40s %s%n", target, measured, verdict);
    }

    private long sum(String scenario, java.util.function.ToLongFunction<Round> value) {
        return rounds.getOrDefault(scenario, List.of()).stream().mapToLong(value).sum();
    }

    private static String micros(double value) {
        return String.format(Locale.ROOT, "%.0f", value);
    }

    private static String percent(long part, long whole) {
        double value = 100.0 * part / whole;
        if (value < 0.01) {
            return "<0.01%";
        }
        return value >= 1 ? String.format(Locale.ROOT, "%.0f%%", value) : String.format(Locale.ROOT, "%.2f%%", value);
    }

    private static long percentile(long[] sorted, double fraction) {
        if (sorted.length == 0) {
            return 0;
        }
        int index = (int) Math.ceil(fraction * sorted.length) - 1;
        return sorted[Math.max(0, Math.min(sorted.length - 1, index))];
    }
}
