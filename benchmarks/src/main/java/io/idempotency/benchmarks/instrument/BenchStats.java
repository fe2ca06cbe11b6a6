package io.idempotency.benchmarks.instrument;

import org.springframework.stereotype.Component;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The statistics of every scenario since the last {@link #reset()}, and the handler executions of every storm key
 * since the start (the same keys the harness counts business rows of). Thread-safe.
 */
@Component
public class BenchStats {

    /** The prefix of the keys (and order references) of storm requests. */
    public static final String STORM_KEY_PREFIX = "storm-";

    private final Map<String, AtomicInteger> stormExecutions = new ConcurrentHashMap<>();
    private final AtomicInteger maxStormExecutions = new AtomicInteger();

    private volatile Map<String, ScenarioStats> scenarios = new ConcurrentHashMap<>();
    private volatile long roundTripsAtReset = WireTraffic.roundTrips();
    private volatile long outsideAtReset = WireTraffic.outsideRequests();

    ScenarioStats scenario(String name) {
        return scenarios.computeIfAbsent(name, n -> new ScenarioStats());
    }

    /**
     * The business handler started for {@code reference}. Counted for storm references only: a handler run whose
     * transaction rolls back leaves no business row, so rows alone would hide a duplicate execution.
     */
    public void handlerRan(String reference) {
        if (reference != null && reference.startsWith(STORM_KEY_PREFIX)) {
            int runs = stormExecutions.computeIfAbsent(reference, key -> new AtomicInteger()).incrementAndGet();
            maxStormExecutions.accumulateAndGet(runs, Math::max);
        }
    }

    public void reset() {
        scenarios = new ConcurrentHashMap<>();
        roundTripsAtReset = WireTraffic.roundTrips();
        outsideAtReset = WireTraffic.outsideRequests();
    }

    public Map<String, Object> toMap() {
        Map<String, Object> map = new LinkedHashMap<>();
        map.put("wireUnreadable", WireTraffic.unreadable());
        map.put("roundTripsSinceReset", WireTraffic.roundTrips() - roundTripsAtReset);
        map.put("roundTripsOutsideRequestsSinceReset", WireTraffic.outsideRequests() - outsideAtReset);
        map.put("flushesTotal", WireTraffic.flushes());
        map.put("syncMessagesTotal", WireTraffic.syncs());
        Map<String, Object> storm = new LinkedHashMap<>();
        storm.put("keys", stormExecutions.size());
        storm.put("maxPerKey", maxStormExecutions.get());
        map.put("stormHandlerExecutions", storm);
        Map<String, Object> byScenario = new LinkedHashMap<>();
        new TreeMap<>(scenarios).forEach((name, stats) -> byScenario.put(name, stats.toMap()));
        map.put("scenarios", byScenario);
        return map;
    }
}
