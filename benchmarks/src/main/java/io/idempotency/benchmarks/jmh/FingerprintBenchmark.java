package io.idempotency.benchmarks.jmh;

import io.idempotency.core.CanonicalJson;
import io.idempotency.core.RequestFingerprint;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.Warmup;

import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

/**
 * The request fingerprint of a JSON body as the advice computes it: canonical JSON ({@link CanonicalJson}: parse,
 * sort members, normalise numbers and strings), then SHA-256 over method, path and the canonical bytes
 * ({@link RequestFingerprint}) — for a 1 KB and a 100 KB order-like body.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@State(Scope.Benchmark)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(1)
public class FingerprintBenchmark {

    @Param({"1024", "102400"})
    public int bodyBytes;

    private byte[] body;
    private byte[] canonical;

    @Setup
    public void setUp() throws CanonicalJson.InvalidJsonException {
        body = orderJson(bodyBytes);
        canonical = CanonicalJson.canonicalize(body);
    }

    /** Canonical JSON alone. */
    @Benchmark
    public byte[] canonicalize() throws CanonicalJson.InvalidJsonException {
        return CanonicalJson.canonicalize(body);
    }

    /**
     * Canonical JSON of the parsed body: what an endpoint with a key or fingerprint expression (which may read
     * {@code #body}) pays, as it needs the parsed values; the others write the canonical form as the text is read
     * ({@link #canonicalize()}).
     */
    @Benchmark
    public byte[] canonicalizeParsed() throws CanonicalJson.InvalidJsonException {
        return CanonicalJson.canonicalize(CanonicalJson.parse(body), body.length);
    }

    /** SHA-256 of the already canonical body. */
    @Benchmark
    public String hash() {
        return RequestFingerprint.of("POST", "/orders", null, canonical);
    }

    /** Both: what a request with this body costs before its claim. */
    @Benchmark
    public String canonicalizeAndHash() throws CanonicalJson.InvalidJsonException {
        return RequestFingerprint.of("POST", "/orders", null, CanonicalJson.canonicalize(body));
    }

    /** An order with as many line items as it takes to reach about {@code size} bytes; members not sorted. */
    static byte[] orderJson(int size) {
        StringBuilder json = new StringBuilder(size + 256);
        json.append("{\"reference\":\"order-2025-000042\",\"customer\":{\"name\":\"Ada Lovelace\",")
                .append("\"email\":\"ada@example.com\",\"id\":42},\"currency\":\"EUR\",\"amount\":1234.50,\"items\":[");
        int item = 0;
        while (json.length() < size - 120) {
            if (item > 0) {
                json.append(',');
            }
            json.append("{\"sku\":\"SKU-").append(String.format("%05d", item))
                    .append("\",\"quantity\":").append(item % 7 + 1)
                    .append(",\"price\":").append(item % 100).append(".25")
                    .append(",\"name\":\"Article n\\u00b0").append(item).append("\",\"gift\":").append(item % 2 == 0)
                    .append('}');
            item++;
        }
        json.append("],\"note\":\"leave at the door\"}");
        while (json.length() < size) {
            json.insert(json.length() - 1, ' ');
        }
        return json.toString().getBytes(StandardCharsets.UTF_8);
    }
}
