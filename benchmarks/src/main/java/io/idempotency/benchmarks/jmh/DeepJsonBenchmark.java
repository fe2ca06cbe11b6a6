package io.idempotency.benchmarks.jmh;

import io.idempotency.core.CanonicalJson;
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

import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

/**
 * The canonical JSON of a body whose objects are nested as deep as the fingerprint takes (127 objects in one another),
 * each with its members out of order around about 100 KB of text: written as the text is read, and from the parsed
 * values. Putting the members of an object in order once the object has ended would copy its text again for every
 * object around it; the canonical form as written copies each character once, as the parsed path does.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@State(Scope.Benchmark)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(1)
public class DeepJsonBenchmark {

    private byte[] body;

    @Setup
    public void setUp() {
        int depth = CanonicalJson.MAX_DEPTH - 1;
        String innermost = "\"" + "x".repeat(100_000) + "\"";
        // {"z":{"z":…{"z":"xxx…","a":0}…,"a":0},"a":0}: at every level the long member comes first, out of order
        body = ("{\"z\":".repeat(depth) + innermost + ",\"a\":0}".repeat(depth)).getBytes(StandardCharsets.US_ASCII);
    }

    /** Written as the text is read. */
    @Benchmark
    public byte[] canonicalize() throws CanonicalJson.InvalidJsonException {
        return CanonicalJson.canonicalize(body);
    }

    /** From the parsed values. */
    @Benchmark
    public byte[] canonicalizeParsed() throws CanonicalJson.InvalidJsonException {
        return CanonicalJson.canonicalize(CanonicalJson.parse(body), body.length);
    }
}
