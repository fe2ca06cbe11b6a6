package io.idempotency.benchmarks.harness;

import java.util.ArrayList;
import java.util.List;

/**
 * The order in which a round runs its scenarios. A machine's speed drifts during a run (JIT, caches, autovacuum,
 * other work), so a scenario that always runs later than another would be measured on a faster or slower machine.
 * Both orders here give every scenario the same mean position over a balanced number of rounds.
 */
final class RoundOrder {

    private RoundOrder() {
    }

    /**
     * Round {@code round} (from 0) starts one scenario later than the round before: over any multiple of
     * {@code scenarios.size()} rounds every scenario takes every position equally often.
     */
    static <T> List<T> rotated(List<T> scenarios, int round) {
        List<T> order = new ArrayList<>(scenarios.size());
        for (int i = 0; i < scenarios.size(); i++) {
            order.add(scenarios.get((round + i) % scenarios.size()));
        }
        return order;
    }

    /**
     * Two scenarios in alternating pairs whose leader alternates too (A B, B A, A B, …): over an even number of rounds
     * both have the same mean position, where A B, A B, … would always run B half a slot later.
     */
    static <T> List<T> alternated(T a, T b, int round) {
        return round % 2 == 0 ? List.of(a, b) : List.of(b, a);
    }
}
