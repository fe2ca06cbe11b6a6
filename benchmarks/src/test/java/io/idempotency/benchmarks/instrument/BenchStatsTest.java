package io.idempotency.benchmarks.instrument;

import org.junit.jupiter.api.Test;

import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

class BenchStatsTest {

    private final BenchStats stats = new BenchStats();

    @Test
    void countsEveryHandlerRunOfAStormKeyWhateverItsTransactionDid() {
        stats.handlerRan(BenchStats.STORM_KEY_PREFIX + "a");
        stats.handlerRan(BenchStats.STORM_KEY_PREFIX + "b");
        stats.handlerRan(BenchStats.STORM_KEY_PREFIX + "a"); // a duplicate, rolled back or not
        stats.handlerRan("plain-1");
        stats.handlerRan("plain-1");

        assertThat(stats.toMap().get("stormHandlerExecutions")).isEqualTo(Map.of("keys", 2, "maxPerKey", 2));
    }

    @Test
    void keepsTheStormCountsAcrossAReset() { // the harness compares them with the business rows of every storm key
        stats.handlerRan(BenchStats.STORM_KEY_PREFIX + "warm-up");
        stats.reset();
        stats.handlerRan(BenchStats.STORM_KEY_PREFIX + "measured");

        assertThat(stats.toMap().get("stormHandlerExecutions")).isEqualTo(Map.of("keys", 2, "maxPerKey", 1));
    }
}
