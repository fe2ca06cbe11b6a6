package io.idempotency.benchmarks.instrument;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.LongAdder;

/**
 * What the application saw of one scenario (named by the load generator's {@code X-Bench-Scenario} header): requests,
 * the distribution of round trips per request (of the answers with the expected status, executed and replayed
 * apart), statuses, replays, claim statement times, the peak number of pool connections held at once by requests
 * with the same key, and a few statement traces. Thread-safe.
 */
final class ScenarioStats {

    private static final int MAX_CLAIM_SAMPLES = 2_000_000;
    private static final int MAX_TRACES = 25;

    /** The status of every answer the load generator expects; any other is unexpected and counts in no figure. */
    static final int EXPECTED_STATUS = 201;

    private final LongAdder requests = new LongAdder();
    private final Map<Integer, LongAdder> executedRoundTrips = new ConcurrentHashMap<>();
    private final Map<Integer, LongAdder> replayedRoundTrips = new ConcurrentHashMap<>();
    private final Map<Integer, LongAdder> statuses = new ConcurrentHashMap<>();
    private final LongAdder replayed = new LongAdder();
    private final LongAdder flushes = new LongAdder();
    private final LongAdder syncs = new LongAdder();
    private final AtomicInteger maxConnectionsPerKey = new AtomicInteger();
    private final List<Map<String, Object>> traces = new ArrayList<>();
    private long[] claimNanos = new long[1024];
    private int claimCount;

    void record(RequestRecord record, int status, boolean wasReplayed) {
        requests.increment();
        if (status == EXPECTED_STATUS) { // an answer the load generator rejects must not shift the round trips
            (wasReplayed ? replayedRoundTrips : executedRoundTrips)
                    .computeIfAbsent(record.roundTrips(), n -> new LongAdder()).increment();
        }
        statuses.computeIfAbsent(status, n -> new LongAdder()).increment();
        if (wasReplayed) {
            replayed.increment();
        }
        syncs.add(record.syncs());
        if (record.flushes() > 0) {
            flushes.add(record.flushes());
        }
        if (record.claimNanos() >= 0) {
            addClaim(record.claimNanos());
        }
        if (record.traced()) {
            synchronized (traces) {
                if (traces.size() < MAX_TRACES) {
                    Map<String, Object> trace = new LinkedHashMap<>();
                    trace.put("status", status);
                    trace.put("replayed", wasReplayed);
                    trace.put("roundTrips", record.trace());
                    traces.add(trace);
                }
            }
        }
    }

    void connectionsHeldByKey(int held) {
        maxConnectionsPerKey.accumulateAndGet(held, Math::max);
    }

    private synchronized void addClaim(long nanos) {
        if (claimCount == claimNanos.length) {
            if (claimCount >= MAX_CLAIM_SAMPLES) {
                return;
            }
            claimNanos = Arrays.copyOf(claimNanos, claimCount * 2);
        }
        claimNanos[claimCount++] = nanos;
    }

    Map<String, Object> toMap() {
        Map<String, Object> map = new LinkedHashMap<>();
        map.put("requests", requests.sum());
        // split by what the answer was, so that each scenario's figures cover only the answers it expects (a replay
        // scenario's executed answers, a first execution's replayed ones, are unexpected)
        Map<String, Object> roundTrips = new LinkedHashMap<>();
        roundTrips.put("executed", histogram(executedRoundTrips));
        roundTrips.put("replayed", histogram(replayedRoundTrips));
        map.put("roundTrips", roundTrips);
        map.put("statuses", histogram(statuses));
        map.put("replayed", replayed.sum());
        map.put("syncMessages", syncs.sum());
        map.put("flushes", flushes.sum());
        map.put("maxConnectionsPerKey", maxConnectionsPerKey.get());
        long[] claims;
        synchronized (this) {
            claims = Arrays.copyOf(claimNanos, claimCount);
        }
        Arrays.sort(claims);
        Map<String, Object> claim = new LinkedHashMap<>();
        claim.put("count", claims.length);
        claim.put("p50Micros", percentile(claims, 0.50) / 1_000.0);
        claim.put("p99Micros", percentile(claims, 0.99) / 1_000.0);
        claim.put("meanMicros", claims.length == 0 ? 0.0 : Arrays.stream(claims).average().orElse(0) / 1_000.0);
        map.put("claim", claim);
        synchronized (traces) {
            map.put("traces", new ArrayList<>(traces));
        }
        return map;
    }

    private static Map<String, Long> histogram(Map<Integer, LongAdder> counts) {
        Map<String, Long> sorted = new LinkedHashMap<>();
        new TreeMap<>(counts).forEach((value, count) -> sorted.put(Integer.toString(value), count.sum()));
        return sorted;
    }

    private static long percentile(long[] sorted, double fraction) {
        if (sorted.length == 0) {
            return 0;
        }
        int index = (int) Math.ceil(fraction * sorted.length) - 1;
        return sorted[Math.max(0, Math.min(sorted.length - 1, index))];
    }
}
