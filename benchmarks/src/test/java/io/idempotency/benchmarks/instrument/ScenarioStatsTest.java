package io.idempotency.benchmarks.instrument;

import org.junit.jupiter.api.Test;

import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

class ScenarioStatsTest {

    private final ScenarioStats stats = new ScenarioStats();

    @Test
    void countsTheRoundTripsOfExpectedAnswersOnlyAndExecutionsApartFromReplays() {
        stats.record(request(4), 201, false); // a first execution
        stats.record(request(1), 201, true);  // a replay answered from the database
        stats.record(request(0), 201, true);  // a replay answered from memory
        stats.record(request(0), 409, false); // unexpected: counts in no figure
        stats.record(request(3), 500, false); // unexpected too

        assertThat(stats.toMap().get("roundTrips")).isEqualTo(Map.of(
                "executed", Map.of("4", 1L),
                "replayed", Map.of("0", 1L, "1", 1L)));
        assertThat(stats.toMap().get("requests")).isEqualTo(5L); // every request is still seen
    }

    private static RequestRecord request(int roundTrips) {
        RequestRecord record = new RequestRecord("scenario", false);
        for (int i = 0; i < roundTrips; i++) {
            record.roundTrip();
        }
        return record;
    }
}
