package io.idempotency.benchmarks.harness;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

class RoundOrderTest {

    @Test
    void rotatedRoundsStartOneScenarioLater() {
        List<String> scenarios = List.of("plain", "first", "replay", "storm");

        assertThat(RoundOrder.rotated(scenarios, 0)).containsExactly("plain", "first", "storm", "replay");
        assertThat(RoundOrder.rotated(scenarios, 1)).containsExactly("first", "replay", "plain", "storm");
        assertThat(RoundOrder.rotated(scenarios, 2)).containsExactly("replay", "storm", "first", "plain");
        assertThat(RoundOrder.rotated(scenarios, 3)).containsExactly("storm", "plain", "replay", "first");
        assertThat(RoundOrder.rotated(scenarios, 5)).containsExactly("first", "replay", "plain", "storm");
    }

    @Test
    void rotatedRoundsGiveEveryScenarioTheSameMeanPosition() {
        List<String> scenarios = List.of("plain", "first", "replay", "storm");
        List<String> run = new ArrayList<>();
        for (int round = 0; round < 8; round++) {
            run.addAll(RoundOrder.rotated(scenarios, round));
        }

        assertThat(meanPositions(run).values()).containsOnly(meanPositions(run).get("plain"));
    }

    @Test
    void inRoundsOfEveryOrderEachScenarioFollowsEachOtherEquallyOften() {
        // a scenario leaves work behind for the next one (dirty buffers, WAL to flush, autovacuum of the rows it
        // wrote, garbage in the application's heap): a scenario that always runs right after the same one would pay
        // for that one's aftermath in every round, however evenly the positions are spread
        List<String> scenarios = List.of("plain", "first", "replay", "storm");
        Map<String, Integer> followed = new HashMap<>();
        for (int round = 0; round < 4; round++) {
            List<String> order = RoundOrder.rotated(scenarios, round);
            for (int i = 1; i < order.size(); i++) {
                followed.merge(order.get(i - 1) + " -> " + order.get(i), 1, Integer::sum);
            }
        }

        // 4 scenarios: 12 ordered pairs, 3 per round, so over 4 rounds each pair once
        assertThat(followed).hasSize(12);
        assertThat(followed.values()).containsOnly(1);
    }

    @Test
    void alternatedPairsGiveBothScenariosTheSameMeanPosition() {
        List<String> run = new ArrayList<>();
        for (int round = 0; round < 4; round++) {
            run.addAll(RoundOrder.alternated("plain", "first", round));
        }

        assertThat(run).containsExactly("plain", "first", "first", "plain", "plain", "first", "first", "plain");
        assertThat(meanPositions(run).get("first")).isEqualTo(meanPositions(run).get("plain"));
    }

    private static Map<String, Double> meanPositions(List<String> run) {
        Map<String, Double> sum = new HashMap<>();
        Map<String, Integer> count = new HashMap<>();
        for (int position = 0; position < run.size(); position++) {
            sum.merge(run.get(position), (double) position, Double::sum);
            count.merge(run.get(position), 1, Integer::sum);
        }
        Map<String, Double> mean = new HashMap<>();
        sum.forEach((scenario, total) -> mean.put(scenario, total / count.get(scenario)));
        return mean;
    }
}
