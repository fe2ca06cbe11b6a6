package io.idempotency.benchmarks.instrument;

import org.springframework.stereotype.Component;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;

/** The statistics of every scenario since the last {@link #reset()}. Thread-safe. */
@Component
public class BenchStats {

    private volatile Map<String, ScenarioStats> scenarios = new ConcurrentHashMap<>();
    private volatile long roundTripsAtReset = WireTraffic.roundTrips();
    private volatile long outsideAtReset = WireTraffic.outsideRequests();

    ScenarioStats scenario(String name) {
        return scenarios.computeIfAbsent(name, n -> new ScenarioStats());
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
        Map<String, Object> byScenario = new LinkedHashMap<>();
        new TreeMap<>(scenarios).forEach((name, stats) -> byScenario.put(name, stats.toMap()));
        map.put("scenarios", byScenario);
        return map;
    }
}
