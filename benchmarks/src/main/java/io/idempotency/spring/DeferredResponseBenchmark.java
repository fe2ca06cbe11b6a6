package io.idempotency.spring;

import io.idempotency.core.StoragePolicy;
import io.idempotency.core.StoredResponse;
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

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Set;
import java.util.concurrent.TimeUnit;

/**
 * Response capture by the starter's {@link DeferredResponse} (package-private, hence this package): an answer written
 * the way Spring MVC's message converters write it (status, Content-Type, Location, the body in 8 KB chunks), kept in
 * memory, turned into the {@link StoredResponse} the store writes, then sent to the container's response (here a
 * {@link MinimalHttpServletResponse}). The baseline writes the same answer straight to that response: what a request
 * costs without capture.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@State(Scope.Benchmark)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(1)
public class DeferredResponseBenchmark {

    /** {@code idempotency.max-stored-body-size}, its default. */
    private static final long MAX_STORED_BODY_SIZE = 1024 * 1024;

    private static final Set<String> REPLAYED = Set.of("content-type", "content-language", "content-location",
            "location", "etag", "last-modified", "link");
    private static final int CHUNK = 8 * 1024;

    @Param({"300", "102400"})
    public int bodyBytes;

    private byte[] body;
    private final byte[] socketBuffer = new byte[CHUNK];

    @Setup
    public void setUp() {
        StringBuilder json = new StringBuilder("{\"id\":1,\"reference\":\"order-1\",\"padding\":\"");
        while (json.length() < bodyBytes - 2) {
            json.append('x');
        }
        body = json.append("\"}").toString().getBytes(StandardCharsets.UTF_8);
        body = Arrays.copyOf(body, bodyBytes);
    }

    /** No capture: the answer goes straight to the container's response. */
    @Benchmark
    public long baselineDirect() throws IOException {
        MinimalHttpServletResponse response = new MinimalHttpServletResponse(socketBuffer);
        render(response);
        response.flushBuffer();
        return response.bytesWritten();
    }

    /** Capture the answer and build what the store persists. */
    @Benchmark
    public StoredResponse captureAndStore() throws IOException {
        DeferredResponse response = new DeferredResponse(new MinimalHttpServletResponse(socketBuffer),
                MAX_STORED_BODY_SIZE);
        response.capture(StoragePolicy.DEFAULT::isStorable);
        render(response);
        return response.toStoredResponse(REPLAYED);
    }

    /** Capture, build the stored answer, and send the captured answer after the (simulated) commit. */
    @Benchmark
    public long captureStoreAndSend() throws IOException {
        MinimalHttpServletResponse target = new MinimalHttpServletResponse(socketBuffer);
        DeferredResponse response = new DeferredResponse(target, MAX_STORED_BODY_SIZE);
        response.capture(StoragePolicy.DEFAULT::isStorable);
        render(response);
        StoredResponse stored = response.toStoredResponse(REPLAYED);
        response.sendCaptured();
        return target.bytesWritten() + stored.bodyLength();
    }

    private void render(jakarta.servlet.http.HttpServletResponse response) throws IOException {
        response.setStatus(201);
        response.setHeader("Location", "/orders/1");
        response.setContentType("application/json");
        var out = response.getOutputStream();
        for (int offset = 0; offset < body.length; offset += CHUNK) {
            out.write(body, offset, Math.min(CHUNK, body.length - offset));
        }
        out.flush();
    }
}
