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

    @Test
    void aPrintedRatioNeverMeetsATargetTheMeasuredOneMisses() {
        assertThat(Report.ratio(0.847)).isEqualTo("0.84");
        assertThat(Report.ratio(2.996)).isEqualTo("2.99");
        assertThat(Report.ratio(0.85)).isEqualTo("0.85");
        assertThat(Report.ratio(3.0)).isEqualTo("3.00");
        assertThat(Report.ratio(0.54185)).isEqualTo("0.54");
        assertThat(Report.ratio(Double.NaN)).isEqualTo("NaN");
    }

    @Test
    void aStormKeyThatNeverRanIsNotReportedAsOneExecutionPerKey() {
        assertThat(Report.executionsPerKey(1, 1, 0)).isEqualTo(1);
        assertThat(Report.executionsPerKey(1, 1, 3)).as("some keys never ran").isEqualTo(0);
        assertThat(Report.executionsPerKey(0, 0, 5)).isEqualTo(0);
        assertThat(Report.executionsPerKey(1, 2, 0)).as("a run that rolled back left no row").isEqualTo(2);
        assertThat(Report.executionsPerKey(2, 1, 1)).as("several rows for one key outweigh a key without").isEqualTo(2);
    }
}
