package io.idempotency.benchmarks.harness;

import io.idempotency.benchmarks.harness.Report.Expected;
import org.junit.jupiter.api.Test;
import tools.jackson.databind.JsonNode;
import tools.jackson.databind.json.JsonMapper;

import static org.assertj.core.api.Assertions.assertThat;

class ReportTest {

    private final JsonNode app = JsonMapper.builder().build().readTree("""
            {"roundTrips": {"executed": {"2": 5, "4": 3}, "replayed": {"0": 7, "2": 1}}}""");

    @Test
    void aScenarioCountsTheRoundTripsOfTheAnswersItExpects() {
        assertThat(Report.roundTrips(app, Expected.EXECUTED)).containsExactly(
                java.util.Map.entry(2, 5L), java.util.Map.entry(4, 3L));
        assertThat(Report.roundTrips(app, Expected.REPLAYED)).containsExactly(
                java.util.Map.entry(0, 7L), java.util.Map.entry(2, 1L));
        assertThat(Report.roundTrips(app, Expected.EITHER)).containsExactly( // a storm's: either answer is expected
                java.util.Map.entry(0, 7L), java.util.Map.entry(2, 6L), java.util.Map.entry(4, 3L));
    }
}
