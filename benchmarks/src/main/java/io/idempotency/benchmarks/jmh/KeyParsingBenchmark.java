package io.idempotency.benchmarks.jmh;

import io.idempotency.core.IdempotencyKeyParser;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.Warmup;

import java.util.List;
import java.util.concurrent.TimeUnit;

/** {@link IdempotencyKeyParser} on what clients send: a bare UUID (the usual case) and an RFC 9651 sf-string. */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@State(Scope.Benchmark)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(1)
public class KeyParsingBenchmark {

    private List<String> bareUuid = List.of("6f1c1f0e-3b4e-4a8e-9a57-1d2b7d1c9a01");
    private List<String> quotedUuid = List.of("\"6f1c1f0e-3b4e-4a8e-9a57-1d2b7d1c9a01\"");

    @Benchmark
    public IdempotencyKeyParser.Result bareUuid() {
        return IdempotencyKeyParser.parse(bareUuid);
    }

    @Benchmark
    public IdempotencyKeyParser.Result quotedUuid() {
        return IdempotencyKeyParser.parse(quotedUuid);
    }
}
