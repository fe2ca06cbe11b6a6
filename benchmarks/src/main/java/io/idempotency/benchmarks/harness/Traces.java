package io.idempotency.benchmarks.harness;

import tools.jackson.databind.JsonNode;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The statements of every database round trip of one sample request per scenario, as the counting socket saw them
 * on the wire (the SQL text of each Bind or Query, grouped by the Sync that ended its round trip).
 */
record Traces(Map<String, List<Trace>> byScenario) {

    /** One traced request: its status, whether it was a replay, and the statements of each round trip. */
    record Trace(int status, boolean replayed, List<List<String>> roundTrips) {
    }

    static Traces from(JsonNode stats) {
        Map<String, List<Trace>> byScenario = new LinkedHashMap<>();
        for (String scenario : List.of("explain-plain", "explain-first", "explain-replay", "explain-storm")) {
            JsonNode node = stats.path("scenarios").path(scenario).path("traces");
            List<Trace> traces = new ArrayList<>();
            for (JsonNode trace : node) {
                List<List<String>> roundTrips = new ArrayList<>();
                for (JsonNode roundTrip : trace.path("roundTrips")) {
                    List<String> statements = new ArrayList<>();
                    for (JsonNode statement : roundTrip) {
                        statements.add(statement.asString());
                    }
                    roundTrips.add(statements);
                }
                traces.add(new Trace(trace.path("status").asInt(), trace.path("replayed").asBoolean(), roundTrips));
            }
            byScenario.put(scenario.substring("explain-".length()), traces);
        }
        return new Traces(byScenario);
    }

    /** Prints one request per scenario (for the storm: one that executed, one that was replayed). */
    void print(boolean fullText) {
        System.out.println();
        System.out.println("statements per request (one sample each; every line is one database round trip)");
        byScenario.forEach((scenario, traces) -> {
            List<Trace> shown = new ArrayList<>();
            if (scenario.equals("storm")) {
                traces.stream().filter(t -> !t.replayed()).findFirst().ifPresent(shown::add);
                traces.stream().filter(Trace::replayed).findFirst().ifPresent(shown::add);
                long executed = traces.stream().filter(t -> !t.replayed()).count();
                System.out.printf("  storm: %d requests with one key, %d executed, %d replayed; round trips: %s%n",
                        traces.size(), executed, traces.size() - executed,
                        traces.stream().map(t -> Integer.toString(t.roundTrips().size())).toList());
            } else if (!traces.isEmpty()) {
                shown.add(traces.get(0));
            }
            for (Trace trace : shown) {
                System.out.printf("  %s (%d%s): %d round trips%n", scenario, trace.status(),
                        trace.replayed() ? ", replayed" : "", trace.roundTrips().size());
                int number = 1;
                for (List<String> roundTrip : trace.roundTrips()) {
                    System.out.printf("    %d. %s%n", number++, String.join("  +  ", roundTrip.stream()
                            .map(sql -> fullText ? sql : abbreviate(sql)).toList()));
                }
            }
        });
    }

    private static String abbreviate(String sql) {
        return sql.length() <= 110 ? sql : sql.substring(0, 107) + "...";
    }
}
