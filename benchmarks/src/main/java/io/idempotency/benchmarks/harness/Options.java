package io.idempotency.benchmarks.harness;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/** The command line of {@code benchmarks/run}; see {@link #USAGE}. */
record Options(boolean quick, boolean jmh, boolean explain, int connections, int stormSize, int rounds,
               Duration roundDuration, int warmupCycles, Duration warmupDuration, List<Long> growthRows,
               int growthRounds, Duration growthRoundDuration, String appHeap) {

    /** The scenarios of a round: plain, first execution, replay, storm. */
    static final int SCENARIOS = 4;

    static final String USAGE = """
            usage: benchmarks/run [--quick] [--explain] [--jmh] [--connections N] [--rounds N] [--seconds S]
                                  [--storm-size N] [--growth-rows 0,1000000,10000000 | --no-growth]

              (default)      the HTTP benchmark: plain, first execution, replay and storm rounds, alternating,
                             then the growth case; prints a table and, last, one RESULT line
              --quick        shorter rounds and the growth case up to 1M rows only (under 3 minutes on 2 cores)
              --explain      with the benchmark: print the SQL of every round trip of one sample request per
                             scenario; alone: only that (no timing), quickly
              --jmh          the JMH micro-benchmarks instead (key parsing, fingerprinting, response capture),
                             then the heap a 1 MB JSON body's fingerprint needs; with --quick only: the other
                             options are the HTTP benchmark's
              --connections  concurrent HTTP connections of the steady rounds (default 16)
              --rounds       rounds of each scenario, a multiple of 4 (default 8, quick 4)
              --seconds      seconds per round (default 5, quick 3)
              --storm-size   concurrent requests per storm key, at least 2 (default 20)
              --growth-rows  table sizes of the growth case, increasing (default 0,1000000,10000000; quick
                             0,1000000)
              --no-growth    no growth case

            environment: BENCH_JDBC_URL (+ BENCH_JDBC_USER, BENCH_JDBC_PASSWORD) to choose the PostgreSQL server;
            else localhost:5432 as postgres when it answers, else an embedded PostgreSQL.
            """;

    static Options parse(String[] args) {
        boolean quick = false;
        boolean jmh = false;
        boolean explain = false;
        boolean measure = false;
        String httpOption = null;
        Integer connections = null;
        Integer rounds = null;
        Integer seconds = null;
        Integer stormSize = null;
        List<Long> growth = null;
        for (int i = 0; i < args.length; i++) {
            String option = args[i];
            switch (option) {
                case "--quick" -> quick = true;
                case "--jmh" -> jmh = true;
                case "--explain" -> explain = true;
                case "--connections" -> connections = count(option, value(args, ++i), 1);
                case "--rounds" -> rounds = rounds(option, value(args, ++i));
                case "--seconds" -> seconds = count(option, value(args, ++i), 1);
                // one request per key can neither run twice nor hold two connections at once: the storm's figures
                // would be 1 whatever the library does
                case "--storm-size" -> stormSize = count(option, value(args, ++i), 2);
                case "--growth-rows" -> growth = growthRows(option, value(args, ++i));
                case "--no-growth" -> growth = List.of();
                case "-h", "--help" -> throw new HelpRequested();
                default -> throw new IllegalArgumentException("unknown option " + option);
            }
            if (!option.equals("--jmh") && !option.equals("--explain")) {
                measure = true; // an option of the HTTP benchmark itself
            }
            if (!option.equals("--jmh") && !option.equals("--quick")) {
                httpOption = option;
            }
        }
        if (jmh && httpOption != null) {
            // the micro-benchmarks would run and the option be silently ignored
            throw new IllegalArgumentException("--jmh runs the micro-benchmarks only, which " + httpOption
                    + " does not apply to; run the HTTP benchmark without --jmh");
        }
        // --explain alone: traces only; with any other option of the HTTP benchmark: the benchmark and the traces
        boolean explainOnly = explain && !measure;
        return new Options(quick, jmh, explain,
                connections != null ? connections : 16,
                stormSize != null ? stormSize : 20,
                explainOnly ? 0 : rounds != null ? rounds : quick ? 4 : 8,
                Duration.ofSeconds(seconds != null ? seconds : quick ? 3 : 5),
                quick ? 3 : 4,
                Duration.ofSeconds(quick ? 2 : 3),
                explainOnly ? List.of() : growth != null ? growth
                        : quick ? List.of(0L, 1_000_000L) : List.of(0L, 1_000_000L, 10_000_000L),
                quick ? 2 : 4, // growth rounds: even, so that plain and first lead equally often (RoundOrder)
                Duration.ofSeconds(quick ? 2 : 3),
                "1g");
    }

    /** {@code --help} or {@code -h}: print {@link #USAGE} and stop, successfully. */
    static final class HelpRequested extends RuntimeException {
        HelpRequested() {
            super("help", null, false, false);
        }
    }

    /** {@code --explain} without any option of the benchmark itself: traces only, no timing. */
    boolean explainOnly() {
        return explain && rounds == 0;
    }

    private static int count(String option, String value, int least) {
        try {
            int count = Integer.parseInt(value.trim());
            if (count >= least) {
                return count;
            }
        } catch (NumberFormatException e) {
            // said below
        }
        throw new IllegalArgumentException(option + " needs a whole number of at least " + least + ", not " + value);
    }

    /**
     * Rounds of each scenario: a multiple of the 4 scenarios, whose order changes each round ({@link RoundOrder#rotated}),
     * so that each takes each position, and follows each other, equally often; with 5 rounds, one scenario would run
     * first twice and drift over the run would favour it.
     */
    private static int rounds(String option, String value) {
        int rounds = count(option, value, 1);
        if (rounds % SCENARIOS != 0) {
            throw new IllegalArgumentException(option + " needs a multiple of " + SCENARIOS + ", so that each scenario"
                    + " runs in each place of a round equally often, not " + value);
        }
        return rounds;
    }

    /**
     * Table sizes of the growth case, increasing: the table is only ever filled up between sizes, so a smaller size
     * after a larger one would be measured at the larger one under the smaller one's label, and a size given twice
     * would merge two measurements into one row.
     */
    private static List<Long> growthRows(String option, String value) {
        List<Long> sizes = new ArrayList<>();
        try {
            for (String rows : value.split(",", -1)) {
                long size = Long.parseLong(rows.trim().replace("_", ""));
                if (size < 0 || (!sizes.isEmpty() && size <= sizes.get(sizes.size() - 1))) {
                    sizes.clear();
                    break;
                }
                sizes.add(size);
            }
        } catch (NumberFormatException e) {
            sizes.clear();
        }
        if (sizes.isEmpty()) { // none at all is --no-growth, not an empty list
            throw new IllegalArgumentException(option + " needs table sizes of at least 0 in increasing order, e.g."
                    + " 0,1000000: not " + value);
        }
        return List.copyOf(sizes);
    }

    private static String value(String[] args, int index) {
        if (index >= args.length) {
            throw new IllegalArgumentException(args[index - 1] + " needs a value");
        }
        return args[index];
    }
}
