package io.idempotency.core;

import org.junit.jupiter.api.Test;

import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

class ReplayCacheTest {

    private static final ScopedKey KEY = new ScopedKey("alice", "POST /payments", "k-1");
    private static final StoredResponse ANSWER =
            new StoredResponse(201, List.of(), "{\"id\":1}".getBytes(StandardCharsets.UTF_8));

    @Test
    void answersAReplayForTheSameRequestAndLeavesAnotherToTheDatabase() {
        ReplayCache cache = new ReplayCache(10, 1024, 1 << 20, Duration.ofMinutes(1));
        cache.put(KEY, "a", ANSWER);

        assertThat(cache.answer(KEY, "a")).isEqualTo(new IdempotencyEngine.Replay(ANSWER));
        assertThat(cache.answer(KEY, "b")).as("the key may have been used again since: never refused from memory")
                .isNull();
        assertThat(cache.answer(new ScopedKey("bob", KEY.scope(), KEY.key()), "a")).as("other caller").isNull();
    }

    @Test
    void anAgeLongerThanNanosecondsCanCountKeepsAnswersAsLongAsTheyStay() {
        ReplayCache cache = new ReplayCache(10, 1024, 1 << 20, Duration.ofDays(1000 * 365));
        cache.put(KEY, "a", ANSWER);

        assertThat(cache.answer(KEY, "a")).isEqualTo(new IdempotencyEngine.Replay(ANSWER));
    }

    @Test
    void aNewAnswerForTheKeyTooLargeToKeepStillReplacesTheOldOne() {
        ReplayCache cache = new ReplayCache(10, 64, 2 * ReplayCache.footprint(KEY, "a", ANSWER), Duration.ofMinutes(1));
        cache.put(KEY, "a", ANSWER);

        // the record of "a" was removed, and the key used again for "b", whose answer is larger than the cap
        cache.put(KEY, "b", new StoredResponse(201, List.of(), new byte[65]));

        assertThat(cache.answer(KEY, "a")).as("the answer of a record that is gone").isNull();
        assertThat(cache.answer(KEY, "b")).as("too large to keep").isNull();
        cache.put(KEY, "a", ANSWER);
        cache.put(new ScopedKey("", "POST /x", "2"), "a", ANSWER);
        assertThat(cache.answer(KEY, "a")).as("the budget counts only what is kept").isNotNull();
    }

    @Test
    void keepsNeitherLargeAnswersNorOldOnesNorMoreThanItsSize() throws InterruptedException {
        ReplayCache small = new ReplayCache(10, 4, 1 << 20, Duration.ofMinutes(1));
        small.put(KEY, "a", ANSWER);
        assertThat(small.answer(KEY, "a")).as("larger than the body cap").isNull();
        ReplayCache exact = new ReplayCache(10, ANSWER.bodyLength(), 1 << 20, Duration.ofMinutes(1));
        exact.put(KEY, "a", ANSWER);
        assertThat(exact.answer(KEY, "a")).as("as large as the body cap").isNotNull();

        ReplayCache brief = new ReplayCache(10, 1024, 1 << 20, Duration.ofMillis(20));
        brief.put(KEY, "a", ANSWER);
        Thread.sleep(50);
        assertThat(brief.answer(KEY, "a")).as("older than max age").isNull();

        ReplayCache two = new ReplayCache(2, 1024, 1 << 20, Duration.ofMinutes(1));
        ScopedKey second = new ScopedKey("", "POST /x", "2");
        ScopedKey third = new ScopedKey("", "POST /x", "3");
        two.put(KEY, "a", ANSWER);
        two.put(second, "a", ANSWER);
        two.answer(KEY, "a"); // used: the second is now the least recently used
        two.put(third, "a", ANSWER);
        assertThat(two.answer(second, "a")).isNull();
        assertThat(two.answer(KEY, "a")).isNotNull();
        assertThat(two.answer(third, "a")).isNotNull();

        assertThat(ReplayCache.NONE.answer(KEY, "a")).isNull();
    }

    /**
     * The README: an answer stays in memory for the max age after it was stored, and replays from memory do not extend
     * it, so a record removed from the database (by the cleanup, or by an operator letting the key run again) stops
     * being replayed from memory within that age however often the request is sent again.
     */
    @Test
    void replaysFromMemoryDoNotExtendTheAgeOfAnAnswer() throws InterruptedException {
        long maxAgeMillis = 3000; // the test's thread may be descheduled for a fraction of it and still tell
        ReplayCache cache = new ReplayCache(10, 1024, 1 << 20, Duration.ofMillis(maxAgeMillis));
        long stored = System.nanoTime();
        cache.put(KEY, "a", ANSWER);
        assertThat(cache.answer(KEY, "a")).isNotNull();
        long lastReplayed = stored;
        while (millisSince(stored) < maxAgeMillis * 7 / 10) {
            if (cache.answer(KEY, "a") != null) {
                lastReplayed = System.nanoTime();
            }
            Thread.sleep(20);
        }
        assertThat((lastReplayed - stored) / 1_000_000).as("replayed from memory late in its age")
                .isGreaterThan(maxAgeMillis / 2);

        Thread.sleep(Math.max(0, maxAgeMillis * 11 / 10 - millisSince(stored)));

        assertThat(millisSince(lastReplayed)).as("an age counted from the last replay would not be over yet")
                .isLessThan(maxAgeMillis);
        assertThat(cache.answer(KEY, "a")).as("past its age since it was stored").isNull();
        assertThat(cache.size()).isZero();
    }

    private static long millisSince(long nanoTime) {
        return (System.nanoTime() - nanoTime) / 1_000_000;
    }

    @Test
    void aZeroAgeCountOrBudgetKeepsNothing() {
        for (ReplayCache none : List.of(new ReplayCache(10, 1024, 1 << 20, Duration.ZERO),
                new ReplayCache(0, 1024, 1 << 20, Duration.ofMinutes(1)),
                new ReplayCache(10, 1024, 0, Duration.ofMinutes(1)))) {
            for (int i = 0; i < 5; i++) {
                none.put(new ScopedKey("alice", "POST /payments", "k-" + i), "a", ANSWER);
            }

            assertThat(none.size()).as("answers that could never be replayed take no memory").isZero();
            assertThat(none.answer(KEY, "a")).isNull();
        }
    }

    @Test
    void anEntryTakenOutForAnotherRequestOrForItsAgeGivesBackItsShareOfTheBudget() throws InterruptedException {
        long each = ReplayCache.footprint(KEY, "a", ANSWER);
        ScopedKey second = new ScopedKey("alice", "POST /payments", "k-2");
        ScopedKey third = new ScopedKey("alice", "POST /payments", "k-3");

        ReplayCache reused = new ReplayCache(1_000, 1024, 2 * each, Duration.ofMinutes(1));
        reused.put(KEY, "a", ANSWER);
        reused.holds(KEY, "b"); // the key's record is now another request's
        reused.put(second, "a", ANSWER);
        reused.put(third, "a", ANSWER);
        assertThat(reused.answer(second, "a")).as("two fit the budget").isNotNull();
        assertThat(reused.answer(third, "a")).isNotNull();

        ReplayCache aging = new ReplayCache(1_000, 1024, 2 * each, Duration.ofSeconds(2));
        aging.put(KEY, "a", ANSWER);
        Thread.sleep(2_100);
        assertThat(aging.answer(KEY, "a")).as("older than max age").isNull();
        aging.put(second, "a", ANSWER);
        aging.put(third, "a", ANSWER);
        assertThat(aging.answer(second, "a")).as("two fit the budget").isNotNull();
        assertThat(aging.answer(third, "a")).isNotNull();
    }

    /** Bytes the current thread has allocated so far: what it allocates and keeps is at most what it allocated. */
    private static long allocated() {
        return ((com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean()).getCurrentThreadAllocatedBytes();
    }

    @Test
    void theFootprintOfAnAnswerCountsTheMemoryItsHeadersTake() {
        int count = 10_000;
        List<char[]> names = new ArrayList<>(count);
        List<char[]> values = new ArrayList<>(count);
        for (int i = 0; i < count; i++) {
            names.add("Link".toCharArray());
            values.add(("<" + i + ">").toCharArray());
        }
        List<StoredResponse.Header> headers = new ArrayList<>(count);

        long before = allocated();
        for (int i = 0; i < count; i++) {
            headers.add(new StoredResponse.Header(new String(names.get(i)), new String(values.get(i))));
        }
        StoredResponse response = new StoredResponse(204, headers, null);
        long taken = allocated() - before;

        assertThat(ReplayCache.footprint(KEY, "a", response)).as("at least what the answer's %d headers take", count)
                .isGreaterThanOrEqualTo(taken);
    }

    @Test
    void theFootprintOfAnEntryCountsTheMemoryItTakesInTheCache() {
        int count = 2_000;
        List<char[]> keys = new ArrayList<>(count);
        for (int i = 0; i < count; i++) {
            keys.add(("k-" + i).toCharArray());
        }
        char[] caller = "alice".toCharArray();
        char[] scope = "POST /payments".toCharArray();
        char[] hash = "a".repeat(64).toCharArray();
        ReplayCache cache = new ReplayCache(count, 1024, Long.MAX_VALUE, Duration.ofMinutes(1));
        List<ScopedKey> kept = new ArrayList<>(count);

        long before = allocated();
        for (int i = 0; i < count; i++) {
            ScopedKey key = new ScopedKey(new String(caller), new String(scope), new String(keys.get(i)));
            cache.put(key, new String(hash), new StoredResponse(204, List.of(), null));
            kept.add(key);
        }
        long taken = allocated() - before;

        assertThat(cache.size()).isEqualTo(count);
        long counted = 0;
        for (ScopedKey key : kept) {
            counted += ReplayCache.footprint(key, new String(hash), new StoredResponse(204, List.of(), null));
        }
        assertThat(counted).as("at least what %d small entries take, their keys and the cache's table included", count)
                .isGreaterThanOrEqualTo(taken);
    }

    /**
     * A character takes up to two bytes (outside Latin-1): every character of an entry's caller, scope, key,
     * fingerprint and headers counts so, and each header its objects besides, so that entries of long strings cannot
     * hold more memory than the budget allows.
     */
    @Test
    void theFootprintOfAnEntryCountsEachOfItsStringsAtTwoBytesACharacter() {
        String s = "x";
        String longer = "x".repeat(201);
        StoredResponse oneHeader = new StoredResponse(200, List.of(new StoredResponse.Header("N", "v")), null);
        long base = ReplayCache.footprint(new ScopedKey(s, s, s), s, oneHeader);

        assertThat(ReplayCache.footprint(new ScopedKey(longer, s, s), s, oneHeader)).as("caller")
                .isGreaterThanOrEqualTo(base + 400);
        assertThat(ReplayCache.footprint(new ScopedKey(s, longer, s), s, oneHeader)).as("scope")
                .isGreaterThanOrEqualTo(base + 400);
        assertThat(ReplayCache.footprint(new ScopedKey(s, s, longer), s, oneHeader)).as("key")
                .isGreaterThanOrEqualTo(base + 400);
        assertThat(ReplayCache.footprint(new ScopedKey(s, s, s), longer, oneHeader)).as("fingerprint")
                .isGreaterThanOrEqualTo(base + 400);
        assertThat(ReplayCache.footprint(new ScopedKey(s, s, s), s,
                new StoredResponse(200, List.of(new StoredResponse.Header("N" + longer, "v")), null)))
                .as("header name").isGreaterThanOrEqualTo(base + 402);
        assertThat(ReplayCache.footprint(new ScopedKey(s, s, s), s,
                new StoredResponse(200, List.of(new StoredResponse.Header("N", "v" + longer)), null)))
                .as("header value").isGreaterThanOrEqualTo(base + 402);
        List<StoredResponse.Header> tenHeaders = java.util.Collections.nCopies(10, new StoredResponse.Header("N", "v"));
        assertThat(ReplayCache.footprint(new ScopedKey(s, s, s), s, new StoredResponse(200, tenHeaders, null)))
                .as("each header's objects, beyond its characters").isGreaterThan(base + 9 * (4 + 100));
        assertThat(ReplayCache.footprint(new ScopedKey(s, s, s), s,
                new StoredResponse(200, List.of(new StoredResponse.Header("N", "v")), new byte[1_000])))
                .as("the body").isGreaterThanOrEqualTo(base + 1_000);
    }

    @Test
    void keepsItsAnswersWithinItsMemoryBudgetDroppingTheLeastRecentlyUsed() {
        StoredResponse large = new StoredResponse(201, List.of(new StoredResponse.Header("Content-Type",
                "application/json")), new byte[10_000]);
        long each = ReplayCache.footprint(KEY, "a", large);
        assertThat(each).isGreaterThan(10_000);
        ReplayCache cache = new ReplayCache(1_000, 64 * 1024, 2 * each + each / 2, Duration.ofMinutes(1));
        ScopedKey second = new ScopedKey("alice", "POST /payments", "k-2");
        ScopedKey third = new ScopedKey("alice", "POST /payments", "k-3");
        cache.put(KEY, "a", large);
        cache.put(second, "a", large);
        cache.answer(KEY, "a"); // used: the second is now the least recently used
        cache.put(third, "a", large);

        assertThat(cache.answer(second, "a")).as("dropped: three do not fit").isNull();
        assertThat(cache.answer(KEY, "a")).isNotNull();
        assertThat(cache.answer(third, "a")).isNotNull();
        cache.put(KEY, "a", large); // the same key again replaces its entry, it does not count twice
        cache.put(second, "a", large);
        assertThat(cache.answer(third, "a")).as("dropped for the second").isNull();
        assertThat(cache.answer(KEY, "a")).isNotNull();

        ReplayCache tiny = new ReplayCache(1_000, 64 * 1024, each - 1, Duration.ofMinutes(1));
        tiny.put(KEY, "a", large);
        assertThat(tiny.answer(KEY, "a")).as("larger than the whole budget").isNull();
        ReplayCache one = new ReplayCache(1_000, 64 * 1024, each, Duration.ofMinutes(1));
        one.put(KEY, "a", large);
        assertThat(one.answer(KEY, "a")).as("as large as the whole budget").isNotNull();
    }
}
