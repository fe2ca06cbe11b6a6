package io.idempotency.benchmarks.harness;

import org.openjdk.jmh.results.Result;
import org.openjdk.jmh.results.RunResult;
import org.openjdk.jmh.runner.Runner;
import org.openjdk.jmh.runner.RunnerException;
import org.openjdk.jmh.runner.options.ChainedOptionsBuilder;
import org.openjdk.jmh.runner.options.OptionsBuilder;
import org.openjdk.jmh.runner.options.TimeValue;
import org.openjdk.jmh.profile.GCProfiler;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * {@code benchmarks/run --jmh}: the JMH micro-benchmarks of the hot code that does no I/O (key parsing,
 * fingerprinting, response capture, the remembered completed requests), with the GC profiler for bytes allocated per
 * operation. JMH's own output goes to {@code benchmarks/target/jmh.log}; a table is printed at the end.
 */
final class JmhBenchmarks {

    private JmhBenchmarks() {
    }

    static void run(boolean quick) throws RunnerException, java.io.IOException {
        Path target = Path.of(System.getProperty("bench.dir", "benchmarks"), "target");
        Files.createDirectories(target);
        Path log = target.resolve("jmh.log");
        ChainedOptionsBuilder options = new OptionsBuilder()
                .include("io\\.idempotency\\.(benchmarks\\.jmh|spring|core)\\.[A-Za-z]+Benchmark\\.")
                .addProfiler(GCProfiler.class)
                .forks(1)
                .warmupIterations(quick ? 2 : 3)
                .warmupTime(TimeValue.seconds(1))
                .measurementIterations(quick ? 3 : 5)
                .measurementTime(TimeValue.seconds(1))
                .jvmArgsAppend("-Xms1g", "-Xmx1g")
                .output(log.toString());
        System.out.println("JMH " + (quick ? "(quick) " : "") + "— micro-benchmarks, 1 fork, " + (quick ? "2+3" : "3+5")
                + " iterations of 1 s, GC profiler; JMH log: " + log);
        Collection<RunResult> results = new Runner(options.build()).run();

        List<String[]> rows = new ArrayList<>();
        for (RunResult result : results) {
            var params = result.getParams();
            String name = params.getBenchmark()
                    .replaceFirst("^io\\.idempotency\\.(benchmarks\\.jmh|spring|core)\\.", "");
            StringBuilder paramText = new StringBuilder();
            for (String key : params.getParamsKeys()) {
                paramText.append(key).append('=').append(params.getParam(key)).append(' ');
            }
            Result<?> primary = result.getPrimaryResult();
            Map<String, Result> secondary = result.getSecondaryResults();
            Result<?> allocated = secondary.entrySet().stream()
                    .filter(e -> e.getKey().endsWith("gc.alloc.rate.norm")).map(Map.Entry::getValue)
                    .findFirst().orElse(null);
            rows.add(new String[]{name, paramText.toString().trim(),
                    String.format(Locale.ROOT, "%,.1f", primary.getScore()),
                    String.format(Locale.ROOT, "± %,.1f", primary.getScoreError()),
                    allocated == null ? "?" : String.format(Locale.ROOT, "%,.0f", allocated.getScore())});
        }
        System.out.println();
        System.out.printf(Locale.ROOT, "%-52s %-18s %14s %12s %14s%n", "benchmark", "params", "ns/op", "error",
                "bytes/op");
        for (String[] row : rows) {
            System.out.printf(Locale.ROOT, "%-52s %-18s %14s %12s %14s%n", (Object[]) row);
        }
    }
}
