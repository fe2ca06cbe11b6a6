package io.idempotency.benchmarks.harness;

import io.idempotency.benchmarks.harness.BenchmarkMain.Machine;
import io.idempotency.benchmarks.harness.BenchmarkMain.StormCheck;
import io.idempotency.benchmarks.harness.LoadGenerator.Round;
import io.idempotency.benchmarks.harness.Report.Expected;
import io.idempotency.benchmarks.instrument.InstrumentedDataSource;
import org.junit.jupiter.api.Test;
import tools.jackson.databind.JsonNode;
import tools.jackson.databind.json.JsonMapper;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import static io.idempotency.benchmarks.harness.BenchmarkMain.FIRST;
import static io.idempotency.benchmarks.harness.BenchmarkMain.PLAIN;
import static io.idempotency.benchmarks.harness.BenchmarkMain.REPLAY;
import static io.idempotency.benchmarks.harness.BenchmarkMain.STORM;
import static org.assertj.core.api.Assertions.assertThat;

class ReportTest {

    private final JsonNode app = JsonMapper.builder().build().readTree("""
            {"roundTrips": {"executed": {"2": 5, "4": 3}, "replayed": {"0": 7, "2": 1}}}""");

    @Test
    void aScenarioCountsTheRoundTripsOfTheAnswersItExpects() {
        assertThat(Report.roundTrips(app, Expected.EXECUTED)).containsExactly(
                java.util.Map.entry(2, 5L), java.util.Map.entry(4, 3L));
        assertThat(Report.roundTrips(app, Expected.REPLAYED)).containsExactly(
                java.util.Map.entry(0, 7L), java.util.Map.entry(2, 1L));
        assertThat(Report.roundTrips(app, Expected.EITHER)).containsExactly( // a storm's: either answer is expected
                java.util.Map.entry(0, 7L), java.util.Map.entry(2, 6L), java.util.Map.entry(4, 3L));
    }

    @Test
    void aPrintedRatioNeverMeetsATargetTheMeasuredOneMisses() {
        assertThat(Report.ratio(0.847)).isEqualTo("0.84");
        assertThat(Report.ratio(2.996)).isEqualTo("2.99");
        assertThat(Report.ratio(0.85)).isEqualTo("0.85");
        assertThat(Report.ratio(3.0)).isEqualTo("3.00");
        assertThat(Report.ratio(0.54185)).isEqualTo("0.54");
        assertThat(Report.ratio(Double.NaN)).isEqualTo("NaN");
    }

    @Test
    void aStormKeyThatNeverRanIsNotReportedAsOneExecutionPerKey() {
        assertThat(Report.executionsPerKey(1, 1, 0)).isEqualTo(1);
        assertThat(Report.executionsPerKey(1, 1, 3)).as("some keys never ran").isEqualTo(0);
        assertThat(Report.executionsPerKey(0, 0, 5)).isEqualTo(0);
        assertThat(Report.executionsPerKey(1, 2, 0)).as("a run that rolled back left no row").isEqualTo(2);
        assertThat(Report.executionsPerKey(2, 1, 1)).as("several rows for one key outweigh a key without").isEqualTo(2);
    }

    @Test
    void aRunWithUnexpectedAnswersIsMarkedThoughItsResultLineStaysLast() {
        // first executions that failed leave the first scenario fewer requests in the same time: replay_ratio
        // (replay / first) rises with every failure, so the figures of such a run cannot stand as measured
        List<String> lines = new ArrayList<>();
        assertThat(print(rounds(100), COUNTED, lines)).as("the figures stand").isFalse();

        assertThat(lines.get(lines.size() - 1)).startsWith("RESULT first_ratio=");
        assertThat(lines).anyMatch(line -> line.contains("unexpected answers") && line.contains("100")
                && line.endsWith("MISSED"));
    }

    @Test
    void aRunWhoseAnswersWereAllExpectedIsNotMarked() {
        List<String> lines = new ArrayList<>();
        assertThat(print(rounds(0), COUNTED, lines)).as("the figures stand").isTrue();

        assertThat(lines.get(lines.size() - 1)).startsWith("RESULT first_ratio=");
        assertThat(lines).anyMatch(line -> line.contains("unexpected answers") && line.endsWith("met"));
    }

    @Test
    void aRunWhoseRoundTripsWereNotCountedIsMarked() {
        // every request seen with no round trip (a driver that bypassed the counting sockets) or none seen at all: a
        // plain request inserts a row, so its count cannot be 0, and first_round_trips = 0 - 0 would meet its target
        for (String stats : List.of("{}", NOTHING_ON_THE_WIRE)) {
            List<String> lines = new ArrayList<>();
            assertThat(print(rounds(0), stats, lines)).as("the figures stand, with %s", stats).isFalse();

            assertThat(lines.get(lines.size() - 1)).startsWith("RESULT first_ratio=");
            assertThat(lines).anyMatch(line -> line.contains("round trips counted") && line.endsWith("MISSED"));
        }
    }

    @Test
    void aFirstExecutionCountedWithFewerRoundTripsThanAPlainRequestIsMarked() {
        // a first execution runs the plain request's handler and more: fewer round trips than a plain request means
        // the counts missed some, and first_round_trips = 1 - 2 = -1 would meet its target (at most 2)
        String stats = COUNTED.replace("{\"4\": 500}", "{\"1\": 500}");
        List<String> lines = new ArrayList<>();

        assertThat(print(rounds(0), stats, lines)).as("the figures stand").isFalse();
        assertThat(lines).anyMatch(line -> line.contains("round trips counted") && line.endsWith("MISSED"));
    }

    @Test
    void replaysThatAllCameFromMemoryDoNotPassForReplaysFromTheDatabaseWithoutRoundTrips() {
        // replays draw their keys from every key completed so far; while those are fewer than the instance keeps
        // answers of (10,000), e.g. in a quick run on a slow machine, every replay is answered from memory. Then no
        // replay from the database was measured: the RESULT line's count stays an integer (what those replays cost,
        // 0), but the target must not be met with it, and the report says what was not measured
        String stats = COUNTED.replace("{\"0\": 400, \"1\": 1600}", "{\"0\": 2000}");
        List<String> lines = new ArrayList<>();
        print(rounds(0), stats, lines);

        assertThat(lines).filteredOn(line -> line.contains("replay_round_trips <= 2")).singleElement()
                .satisfies(line -> assertThat(line).doesNotEndWith("met").contains("no replay from the database")
                        .endsWith("not measured"));
        assertThat(lines).anyMatch(line -> line.contains("every replay was answered from memory")
                && line.contains("what a replay from the database costs was not measured"));
        assertThat(lines.get(lines.size() - 1)).startsWith("RESULT first_ratio=").contains(" replay_round_trips=0 ");
    }

    @Test
    void theReplayCountIsThatOfReplaysFromTheDatabaseThoughMostCameFromMemory() {
        // 80 % of replays from memory (0 round trips), 20 % from one read: the count is what a replay from the
        // database costs, not the most common count overall
        String stats = COUNTED.replace("{\"0\": 400, \"1\": 1600}", "{\"0\": 1600, \"1\": 400}");
        List<String> lines = new ArrayList<>();
        print(rounds(0), stats, lines);

        assertThat(lines).filteredOn(line -> line.contains("replay_round_trips <= 2")).singleElement()
                .satisfies(line -> assertThat(line).endsWith("met"));
        assertThat(lines).noneMatch(line -> line.contains("every replay was answered from memory"));
        assertThat(lines.get(lines.size() - 1)).contains(" replay_round_trips=1 ");
    }

    @Test
    void everyCountOfTheResultLineIsAnInteger() {
        for (String stats : List.of(COUNTED, COUNTED.replace("{\"0\": 400, \"1\": 1600}", "{\"0\": 2000}"))) {
            List<String> lines = new ArrayList<>();
            print(rounds(0), stats, lines);

            assertThat(lines.get(lines.size() - 1)).matches("RESULT first_ratio=\\S+ replay_ratio=\\S+"
                    + " first_round_trips=-?\\d+ replay_round_trips=-?\\d+ storm_executions_per_key=-?\\d+"
                    + " storm_max_connections_per_key=-?\\d+");
        }
    }

    @Test
    void theRunsWallClockTimeComesBeforeTheResultLine() {
        List<String> lines = new ArrayList<>();
        print(rounds(0), COUNTED, lines);

        int time = lines.indexOf(lines.stream().filter(line -> line.startsWith("wall-clock time")).findFirst()
                .orElseThrow());
        assertThat(time).isLessThan(lines.size() - 1);
        assertThat(lines.get(lines.size() - 1)).startsWith("RESULT ").doesNotContain("wall-clock");
    }

    @Test
    void theWallClockTimeIncludesTheBuildWhenTheScriptSaysWhenItStarted() {
        long now = 1_000_000_000_000L;
        // benchmarks/run started 555 s ago and built for 40 s; the harness's JVM started 514.5 s ago
        assertThat(Report.wallClock(now, Long.toString(now / 1000 - 555), "40", now - 514_500))
                .isEqualTo("wall-clock time of the run: 9 min 15 s (build 40 s, then the harness 8 min 34 s)");
        assertThat(Report.wallClock(now, null, null, now - 45_900))
                .isEqualTo("wall-clock time of the harness: 45 s (started without benchmarks/run: a build is not"
                        + " included)");
    }

    @Test
    void aPrintedGrowthRatioNeverMeetsTheBoundTheMeasuredOneMisses() {
        // claim latency at 10M rows at most 1.5 times the empty table's: 451.2 / 300 = 1.504 misses it, and must not
        // print as 1.50
        Map<String, List<Round>> rounds = rounds(0);
        for (String size : List.of("0", "10M")) {
            for (String kind : List.of(PLAIN, FIRST)) {
                String scenario = BenchmarkMain.Growth.scenario(size, kind);
                rounds.put(scenario, List.of(round(scenario, 500, 0)));
            }
        }
        String stats = COUNTED.replace("\"scenarios\": {", "\"scenarios\": {"
                + "\"growth-0-first\": {\"claim\": {\"count\": 500, \"p50Micros\": 300.0}},"
                + "\"growth-10M-first\": {\"claim\": {\"count\": 500, \"p50Micros\": 451.2}},");
        List<String> lines = new ArrayList<>();
        print(rounds, stats, List.of(new BenchmarkMain.Growth(0, "0", 0),
                new BenchmarkMain.Growth(10_000_000, "10M", 0)), lines);

        assertThat(lines).filteredOn(line -> line.contains("claim latency at 10M rows")).singleElement()
                .satisfies(line -> assertThat(line).endsWith("MISSED").contains("1.51×"));
    }

    @Test
    void aGrowthSizeWithoutATimedClaimSaysTheClaimStatementWasNotFound() {
        // the application recognises the claim by a piece of its SQL text: after a change to the store's SQL it times
        // none, and a p50 of 0 µs would make the ratio Infinity (0 at the empty table) or 0 (0 at the largest size)
        for (String counts : List.of("0,500", "500,0", "0,0")) {
            String[] count = counts.split(",");
            Map<String, List<Round>> rounds = rounds(0);
            for (String size : List.of("0", "10M")) {
                for (String kind : List.of(PLAIN, FIRST)) {
                    String scenario = BenchmarkMain.Growth.scenario(size, kind);
                    rounds.put(scenario, List.of(round(scenario, 500, 0)));
                }
            }
            String stats = COUNTED.replace("\"scenarios\": {", "\"scenarios\": {"
                    + "\"growth-0-first\": {\"claim\": {\"count\": " + count[0] + ", \"p50Micros\": "
                    + ("0".equals(count[0]) ? "0.0" : "300.0") + "}},"
                    + "\"growth-10M-first\": {\"claim\": {\"count\": " + count[1] + ", \"p50Micros\": "
                    + ("0".equals(count[1]) ? "0.0" : "310.0") + "}},");
            List<String> lines = new ArrayList<>();
            print(rounds, stats, List.of(new BenchmarkMain.Growth(0, "0", 0),
                    new BenchmarkMain.Growth(10_000_000, "10M", 0)), lines);

            assertThat(lines).as("claims timed: %s", counts)
                    .filteredOn(line -> line.contains("claim latency at 10M rows")).singleElement()
                    .satisfies(line -> assertThat(line).contains("claim statement not found").endsWith("not measured")
                            .doesNotContain("Infinity").doesNotContain("NaN"));
            assertThat(lines).as("claims timed: %s", counts)
                    .anyMatch(line -> line.startsWith("  ! claim statement not found at")
                            && line.contains(InstrumentedDataSource.CLAIM_MARK));
        }
    }

    @Test
    void theGrowthTablesFirstOverPlainIsCutAsFirstRatioIs() {
        // 585 / 1000 = 0.585: the same ratio as first_ratio at one size, printed as first_ratio prints it
        Map<String, List<Round>> rounds = rounds(0);
        rounds.put(BenchmarkMain.Growth.scenario("0", PLAIN), List.of(round(PLAIN, 1_000, 0)));
        rounds.put(BenchmarkMain.Growth.scenario("0", FIRST), List.of(round(FIRST, 585, 0)));
        String stats = COUNTED.replace("\"scenarios\": {", "\"scenarios\": {"
                + "\"growth-0-first\": {\"claim\": {\"count\": 585, \"p50Micros\": 300.0}},");
        List<String> lines = new ArrayList<>();
        print(rounds, stats, List.of(new BenchmarkMain.Growth(0, "0", 0)), lines);

        assertThat(lines).filteredOn(line -> line.startsWith("  0 ") && line.contains(" 585 ")).singleElement()
                .satisfies(line -> assertThat(line).contains(" 0.58 ").doesNotContain("0.59"));
    }

    private static Map<String, List<Round>> rounds(long firstErrors) {
        Map<String, List<Round>> rounds = new LinkedHashMap<>();
        rounds.put(PLAIN, List.of(round(PLAIN, 1_000, 0)));
        rounds.put(FIRST, List.of(round(FIRST, 500, firstErrors)));
        rounds.put(REPLAY, List.of(round(REPLAY, 2_000, 0)));
        rounds.put(STORM, List.of(round(STORM, 2_000, 0)));
        return rounds;
    }

    private static Round round(String scenario, long requests, long errors) {
        long[] latencies = new long[(int) requests];
        Arrays.fill(latencies, 1_000_000);
        return new Round(scenario, requests, errors, 1_000_000_000L, latencies, requests * 300, 0, 0, List.of(),
                errors == 0 ? null : scenario + ": 500");
    }

    /** What the application counted of a run whose instruments worked. */
    private static final String COUNTED = """
            {"scenarios": {
              "plain": {"roundTrips": {"executed": {"2": 1000}}},
              "first": {"roundTrips": {"executed": {"4": 500}}},
              "replay": {"roundTrips": {"replayed": {"0": 400, "1": 1600}}},
              "storm": {"roundTrips": {"executed": {"4": 100}, "replayed": {"0": 1900}}, "maxConnectionsPerKey": 1}},
             "stormHandlerExecutions": {"keys": 100, "maxPerKey": 1}}""";

    /** What the application counted when the driver's traffic did not go through the counting sockets. */
    private static final String NOTHING_ON_THE_WIRE = """
            {"scenarios": {
              "plain": {"roundTrips": {"executed": {"0": 1000}}},
              "first": {"roundTrips": {"executed": {"0": 500}}},
              "replay": {"roundTrips": {"replayed": {"0": 2000}}},
              "storm": {"roundTrips": {"executed": {"0": 100}, "replayed": {"0": 1900}}, "maxConnectionsPerKey": 1}},
             "stormHandlerExecutions": {"keys": 100, "maxPerKey": 1}}""";

    /** Prints a report of {@code rounds} into {@code lines}; returns whether its figures stand. */
    private static boolean print(Map<String, List<Round>> rounds, String stats, List<String> lines) {
        return print(rounds, stats, List.of(), lines);
    }

    private static boolean print(Map<String, List<Round>> rounds, String stats, List<BenchmarkMain.Growth> growth,
                                 List<String> lines) {
        Report report = new Report(Options.parse(new String[0]),
                new Machine(2, "cpu", "1 GB", "Linux", "Java 17"), "PostgreSQL", rounds, Map.of(), Map.of(),
                "no statistics", JsonMapper.builder().build().readTree(stats), new StormCheck(1, 1, 0, 0), growth,
                new Traces(Map.of()));
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        PrintStream console = System.out;
        System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
        boolean valid;
        try {
            valid = report.print();
        } finally {
            System.setOut(console);
        }
        lines.addAll(out.toString(StandardCharsets.UTF_8).lines().toList());
        return valid;
    }
}
