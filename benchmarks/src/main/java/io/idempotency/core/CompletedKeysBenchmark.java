package io.idempotency.core;

import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.Warmup;

import java.util.UUID;
import java.util.concurrent.TimeUnit;

/**
 * The remembered completed requests ({@link CompletedKeys}, package-private, hence this package) at the starter's
 * default size, a generation full: what every first execution pays to learn it is not a remembered retry
 * ({@code lookUpUnseen}), what a remembered retry pays before its read ({@code lookUpSeen}), and what a completion
 * pays to be remembered ({@code add}).
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@State(Scope.Benchmark)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(1)
public class CompletedKeysBenchmark {

    private static final int REMEMBERED = 1_000_000;
    private static final int SAMPLES = 4096; // a power of two

    private final CompletedKeys keys = new CompletedKeys(REMEMBERED);
    private final ScopedKey[] seen = new ScopedKey[SAMPLES];
    private final ScopedKey[] unseen = new ScopedKey[SAMPLES];
    private final String requestHash = "3f".repeat(32); // a SHA-256 in hex, as fingerprints are
    private int next;

    @Setup
    public void fill() {
        for (int i = 0; i < REMEMBERED - 1; i++) {
            ScopedKey key = key();
            keys.add(key, requestHash);
            if (i < SAMPLES) {
                seen[i] = key;
            }
        }
        for (int i = 0; i < SAMPLES; i++) {
            unseen[i] = key();
        }
    }

    private static ScopedKey key() {
        return new ScopedKey("", "POST /payments", UUID.randomUUID().toString());
    }

    @Benchmark
    public boolean lookUpUnseen() {
        return keys.mightContain(unseen[next++ & (SAMPLES - 1)], requestHash);
    }

    @Benchmark
    public boolean lookUpSeen() {
        return keys.mightContain(seen[next++ & (SAMPLES - 1)], requestHash);
    }

    @Benchmark
    public void add() {
        keys.add(unseen[next++ & (SAMPLES - 1)], requestHash);
    }
}
