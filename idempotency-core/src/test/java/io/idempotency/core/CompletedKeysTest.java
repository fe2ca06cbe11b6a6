package io.idempotency.core;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.stream.IntStream;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class CompletedKeysTest {

    private static final String HASH = "a".repeat(64);

    private static ScopedKey key(int n) {
        return new ScopedKey("", "POST /payments", "key-" + n);
    }

    @Test
    void remembersARequestByItsKeyAndItsFingerprintTogether() {
        CompletedKeys keys = new CompletedKeys(1_000);
        ScopedKey key = new ScopedKey("alice", "POST /payments", "k-1");
        keys.add(key, HASH);

        assertThat(keys.mightContain(key, HASH)).isTrue();
        assertThat(keys.mightContain(key, "b".repeat(64))).as("another body under the key").isFalse();
        assertThat(keys.mightContain(new ScopedKey("bob", "POST /payments", "k-1"), HASH)).as("caller").isFalse();
        assertThat(keys.mightContain(new ScopedKey("alice", "POST /refunds", "k-1"), HASH)).as("scope").isFalse();
        assertThat(keys.mightContain(new ScopedKey("alice", "POST /payments", "k-2"), HASH)).as("key").isFalse();
    }

    @Test
    void partsRunningTogetherAreNotTheSameRequest() {
        assertThat(CompletedKeys.hash(new ScopedKey("ab", "c", "k"), HASH))
                .isNotEqualTo(CompletedKeys.hash(new ScopedKey("a", "bc", "k"), HASH));
        assertThat(CompletedKeys.hash(new ScopedKey("", "POST /x", "k1"), "2"))
                .isNotEqualTo(CompletedKeys.hash(new ScopedKey("", "POST /x", "k"), "12"));
    }

    @Test
    void aFullGenerationMistakesAboutOneRequestInAHundredForOneItSaw() {
        int capacity = 100_000;
        CompletedKeys keys = new CompletedKeys(capacity);
        for (int i = 0; i < capacity - 1; i++) { // one short of a new generation
            keys.add(key(i), HASH);
        }
        long mistaken = IntStream.range(capacity, 3 * capacity).filter(i -> keys.mightContain(key(i), HASH)).count();

        assertThat(IntStream.range(0, capacity - 1).allMatch(i -> keys.mightContain(key(i), HASH))).isTrue();
        assertThat(mistaken / (2.0 * capacity)).as("false positives among requests never seen").isLessThan(0.015);
    }

    @Test
    void remembersAtLeastTheLastCapacityRequestsAndForgetsOlderOnes() {
        int capacity = 10_000;
        CompletedKeys keys = new CompletedKeys(capacity);
        int total = 5 * capacity + 1234;
        for (int i = 0; i < total; i++) {
            keys.add(key(i), HASH);
        }

        assertThat(IntStream.range(total - capacity, total).allMatch(i -> keys.mightContain(key(i), HASH)))
                .as("the last capacity requests").isTrue();
        long stillThere = IntStream.range(0, 2 * capacity).filter(i -> keys.mightContain(key(i), HASH)).count();
        assertThat(stillThere / (2.0 * capacity)).as("requests three generations old: only false positives")
                .isLessThan(0.03);
    }

    @Test
    void aRequestAddedAgainDoesNotPushOthersOut() {
        int capacity = 1_000;
        CompletedKeys keys = new CompletedKeys(capacity);
        keys.add(key(0), HASH);
        for (int i = 0; i < 10 * capacity; i++) { // one request replayed over and over
            keys.add(key(1), HASH);
        }

        assertThat(keys.mightContain(key(0), HASH)).as("still in the first generation").isTrue();
    }

    @Test
    void concurrentAddsAreAllRemembered() {
        int capacity = 50_000;
        CompletedKeys keys = new CompletedKeys(capacity);
        List<CompletableFuture<Void>> writers = new ArrayList<>();
        for (int t = 0; t < 4; t++) {
            int first = t * 10_000;
            writers.add(CompletableFuture.runAsync(() -> {
                for (int i = first; i < first + 10_000; i++) {
                    keys.add(key(i), HASH);
                }
            }, task -> new Thread(task).start())); // at once, not one after the other in a one-worker common pool
        }
        writers.forEach(CompletableFuture::join);

        assertThat(IntStream.range(0, 40_000).allMatch(i -> keys.mightContain(key(i), HASH))).isTrue();
    }

    /**
     * Ten bits a request in each of the two generations, both taken when the filter is made: a capacity set in the
     * millions must not take gigabytes, and a size the heap cannot hold must fail at startup, not later on a request's
     * thread.
     */
    @Test
    void bothGenerationsTakeTenBitsARequestAndAreTakenAtOnce() {
        int capacity = 100_000;
        com.sun.management.ThreadMXBean threads =
                (com.sun.management.ThreadMXBean) java.lang.management.ManagementFactory.getThreadMXBean();

        new CompletedKeys(1).add(key(0), HASH); // the class is loaded and initialised before the count

        long before = threads.getCurrentThreadAllocatedBytes();
        CompletedKeys keys = new CompletedKeys(capacity);
        long taken = threads.getCurrentThreadAllocatedBytes() - before;

        assertThat(taken).as("bytes the two generations of %d requests take", capacity)
                .isGreaterThanOrEqualTo(2L * capacity * 10 / 8).isLessThan(2L * capacity * 10 / 8 + 2048);
        keys.add(key(1), HASH);
        assertThat(keys.mightContain(key(1), HASH)).isTrue();
    }

    /**
     * A new generation reuses the memory of the one it replaces: the filter never takes more than its two
     * generations, where allocating a third beside them at each renewal took half as much again, on a request's thread.
     */
    @Test
    void aNewGenerationTakesNoMoreMemory() {
        int capacity = 100_000;
        com.sun.management.ThreadMXBean threads =
                (com.sun.management.ThreadMXBean) java.lang.management.ManagementFactory.getThreadMXBean();
        CompletedKeys keys = new CompletedKeys(capacity);
        ScopedKey[] requests = IntStream.range(0, 3 * capacity).mapToObj(CompletedKeysTest::key)
                .toArray(ScopedKey[]::new);
        keys.add(key(-1), HASH); // the code of a renewal is loaded before the count
        new CompletedKeys(1).add(key(0), HASH);

        long before = threads.getCurrentThreadAllocatedBytes();
        for (ScopedKey request : requests) { // two renewals at least
            keys.add(request, HASH);
        }
        long taken = threads.getCurrentThreadAllocatedBytes() - before;

        assertThat(taken).as("bytes allocated by adding %d requests to generations of %d", 3 * capacity, capacity)
                .isLessThan(4096);
        assertThat(IntStream.range(2 * capacity, 3 * capacity).allMatch(i -> keys.mightContain(requests[i], HASH)))
                .as("the last capacity requests").isTrue();
        long stillThere = IntStream.range(0, capacity / 2).filter(i -> keys.mightContain(requests[i], HASH)).count();
        assertThat(stillThere / (capacity / 2.0)).as("requests of a cleared generation: only false positives")
                .isLessThan(0.03);
    }

    @Test
    void capacityZeroRemembersNothingAndANegativeOneIsRefused() {
        CompletedKeys none = new CompletedKeys(0);
        none.add(key(1), HASH);

        assertThat(none.mightContain(key(1), HASH)).isFalse();
        assertThatThrownBy(() -> new CompletedKeys(-1)).isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("capacity");
    }

    @Test
    void theReplayCacheRemembersCompletedRequestsEvenWhenItKeepsNoAnswer() {
        ReplayCache answersOff = new ReplayCache(0, 1024, 1 << 20, java.time.Duration.ofMinutes(1), 100);
        StoredResponse answer = new StoredResponse(201, List.of(), new byte[10]);
        answersOff.put(key(1), HASH, answer);

        assertThat(answersOff.answer(key(1), HASH)).isNull();
        assertThat(answersOff.mayHaveCompleted(key(1), HASH)).isTrue();
        ReplayCache rememberingNone = new ReplayCache(10, 1024, 1 << 20, java.time.Duration.ofMinutes(1));
        rememberingNone.put(key(1), HASH, answer);
        assertThat(rememberingNone.mayHaveCompleted(key(1), HASH)).isFalse();
    }
}
