package io.idempotency.benchmarks.harness;

import java.util.ArrayList;
import java.util.List;

/**
 * The order in which a round runs its scenarios. A machine's speed drifts during a run (JIT, caches, autovacuum,
 * other work), so a scenario that always runs later than another would be measured on a faster or slower machine;
 * and a scenario leaves work behind for the one after it. Both orders here give every scenario the same mean position
 * over a balanced number of rounds, and the same predecessors as every other.
 */
final class RoundOrder {

    private RoundOrder() {
    }

    /**
     * The order of round {@code round} (from 0): a row of a Williams design, a Latin square balanced for carry-over.
     * Round 0 runs the scenarios in the order 0, 1, n−1, 2, n−2, … (for 4: 0 1 3 2), and each round adds one to every
     * scenario's number (1 2 0 3, 2 3 1 0, 3 0 2 1), so each round starts one scenario later. Over any multiple of
     * {@code scenarios.size()} rounds (an even number of scenarios) every scenario takes every position equally often,
     * and, within the rounds, directly follows every other equally often. The second matters because a scenario leaves
     * work behind for the next one (dirty buffers and WAL to flush, autovacuum of the rows it wrote, garbage in the
     * application's heap): a plain rotation (0 1 2 3, 1 2 3 0, …) keeps the neighbours, so that replay would always
     * run right after first and pay for its writes in every round.
     */
    static <T> List<T> rotated(List<T> scenarios, int round) {
        int n = scenarios.size();
        List<T> order = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            // 0, 1, n-1, 2, n-2, …
            int step = i % 2 == 1 ? (i + 1) / 2 : (n - i / 2) % n;
            order.add(scenarios.get((round + step) % n));
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
