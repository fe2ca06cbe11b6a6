package io.idempotency.benchmarks.harness;

import io.idempotency.core.CanonicalJson;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;

/**
 * How much heap fingerprinting a 1 MB JSON body needs, measured as the smallest {@code -Xmx} (in MB) with which a JVM
 * of its own canonicalizes the body once without running out of memory: written as the text is read (what every
 * endpoint without a key or fingerprint expression does) and from the parsed values (what an endpoint with one, which
 * may read {@code #body}, does). Both are measured in the same run, one after the other, for two bodies of about 1 MB: a
 * list of a million zeros beside an order's amount (padding the handler's binding skips) and a list of order items.
 * The smallest heap includes what any JVM needs to run this program at all.
 */
final class FingerprintHeap {

    private static final int BODY_BYTES = 1_000_000;
    private static final int MAX_HEAP_MB = 96;

    private FingerprintHeap() {
    }

    /** Prints the table: for each body, the smallest heap of each path and their ratio. */
    static void run() throws IOException, InterruptedException {
        System.out.println();
        System.out.println("Heap to fingerprint a 1 MB JSON body: the smallest -Xmx (MB, serial GC) with which a JVM of"
                + " its own canonicalizes it once");
        System.out.printf(Locale.ROOT, "%-10s %22s %22s %8s%n", "body", "written as it is read", "from parsed values",
                "ratio");
        for (String shape : List.of("zeros", "items")) {
            int streamed = smallestHeap("stream", shape);
            int parsed = smallestHeap("parsed", shape);
            System.out.printf(Locale.ROOT, "%-10s %22s %22s %8s%n", shape, heap(streamed), heap(parsed),
                    streamed > 0 && parsed > 0 ? String.format(Locale.ROOT, "%.1f", parsed / (double) streamed) : "?");
        }
    }

    private static String heap(int megabytes) {
        return megabytes > 0 ? megabytes + " MB" : "over " + MAX_HEAP_MB + " MB";
    }

    /** The smallest heap, in MB, with which {@code path} canonicalizes the {@code shape} body; -1 above the bound. */
    private static int smallestHeap(String path, String shape) throws IOException, InterruptedException {
        for (int megabytes = 2; megabytes <= MAX_HEAP_MB; megabytes++) {
            if (fits(path, shape, megabytes)) {
                return megabytes;
            }
        }
        return -1;
    }

    private static boolean fits(String path, String shape, int megabytes) throws IOException, InterruptedException {
        List<String> command = new ArrayList<>(List.of(
                new File(System.getProperty("java.home"), "bin/java").getPath(),
                "-Xmx" + megabytes + "m", "-Xms" + megabytes + "m", "-XX:+UseSerialGC",
                "-cp", System.getProperty("java.class.path"), FingerprintHeap.class.getName(), path, shape));
        Process process = new ProcessBuilder(command).redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
        if (!process.waitFor(60, TimeUnit.SECONDS)) {
            process.destroyForcibly();
            throw new IOException("the heap measurement did not end within 60 s");
        }
        return process.exitValue() == 0;
    }

    /** In the JVM of its own: canonicalizes the body of {@code args[1]} by the path of {@code args[0]}. */
    public static void main(String[] args) throws CanonicalJson.InvalidJsonException {
        byte[] body = body(args[1]);
        byte[] canonical = args[0].equals("stream") ? CanonicalJson.canonicalize(body)
                : CanonicalJson.canonicalize(CanonicalJson.parse(body), body.length);
        if (canonical.length == 0) {
            throw new IllegalStateException("no canonical form");
        }
    }

    private static byte[] body(String shape) {
        StringBuilder json = new StringBuilder(BODY_BYTES + 64);
        if (shape.equals("zeros")) {
            json.append("{\"amount\":\"5.00\",\"padding\":[0");
            while (json.length() < BODY_BYTES) {
                json.append(",0");
            }
            json.append("]}");
        } else {
            json.append("{\"reference\":\"order-1\",\"items\":[");
            for (int item = 0; json.length() < BODY_BYTES; item++) {
                json.append(item > 0 ? "," : "").append("{\"sku\":\"SKU-").append(item).append("\",\"quantity\":")
                        .append(item % 7 + 1).append(",\"price\":").append(item % 100).append(".25,\"gift\":")
                        .append(item % 2 == 0).append('}');
            }
            json.append("]}");
        }
        return json.toString().getBytes(StandardCharsets.US_ASCII);
    }
}
