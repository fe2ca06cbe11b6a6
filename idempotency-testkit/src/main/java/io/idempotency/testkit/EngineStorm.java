package io.idempotency.testkit;

import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.LeaseLostException;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StoredResponse;
import org.springframework.jdbc.core.JdbcTemplate;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A storm on many keys, sent to two instances (engines) of one database at once: duplicates, reuses of the key with
 * another body, handlers that fail, answers that are not stored. Whatever the interleaving, each key's effect must be
 * committed at most once, and once when an answer was stored; no request may be answered with another request's
 * answer; and once the storm is over a request with any key must be run, replayed or refused on both instances, never
 * answered "in progress": no duplicate left waiting for a request that has ended. In intent-first mode too, where a failed or unstored attempt leaves its claim
 * for the stale-claim resolver, which a later duplicate asks once the lease has run out. Any store's engine tests run
 * it on their database.
 */
public final class EngineStorm {

    /** The fingerprint of the request each key is meant for. */
    public static final String RETRIED = "1".repeat(64);
    /** The fingerprint of a request reusing a key with another body. */
    public static final String OTHER = "2".repeat(64);

    private static final int KEYS = 24;
    private static final int REQUESTS_PER_KEY = 16;

    private EngineStorm() {
    }

    /**
     * Runs the storm and checks its outcome.
     *
     * @param engines     two engines on one database, each with its own pool, whose store's table is there, with a
     *                    resolver that reruns stale claims
     * @param effects     one per engine, on that engine's pool: where a request that holds its key writes its effect,
     *                    into a table {@code effects (idempotency_key, request_hash)}
     * @param lease       the lease of intent-first claims
     * @param stormEnded  run once every request of the storm has been answered, before the checks that follow it
     */
    public static void run(List<IdempotencyEngine> engines, List<JdbcTemplate> effects, IdempotencyMode mode,
                           Duration lease, Runnable stormEnded) throws Exception {
        ExecutorService executor = Executors.newFixedThreadPool(KEYS * REQUESTS_PER_KEY / 4);
        try {
            List<String> keyNames = new ArrayList<>();
            List<Future<Outcome>> outcomes = new ArrayList<>();
            CountDownLatch go = new CountDownLatch(1);
            for (int k = 0; k < KEYS; k++) {
                String key = UUID.randomUUID().toString();
                keyNames.add(key);
                for (int r = 0; r < REQUESTS_PER_KEY; r++) {
                    int instance = r % 2;
                    String hash = r % 4 == 3 ? OTHER : RETRIED;
                    outcomes.add(executor.submit(() -> {
                        go.await();
                        return request(engines.get(instance), effects.get(instance), key, hash, mode, lease);
                    }));
                }
            }
            go.countDown();

            Map<String, Set<String>> stored = new HashMap<>();
            Map<String, Integer> runs = new HashMap<>();
            for (Future<Outcome> future : outcomes) {
                Outcome outcome = future.get(60, TimeUnit.SECONDS);
                if (outcome.start() instanceof IdempotencyEngine.Proceed) {
                    runs.merge(outcome.key(), 1, Integer::sum);
                }
                if (outcome.start() instanceof IdempotencyEngine.Replay replay) {
                    assertThat(new String(replay.response().body(), StandardCharsets.UTF_8))
                            .as("a replay is the answer of this very request")
                            .isEqualTo(outcome.hash() + ":" + outcome.key());
                    stored.computeIfAbsent(outcome.key(), k -> new HashSet<>()).add(outcome.hash());
                }
                if (outcome.stored()) {
                    stored.computeIfAbsent(outcome.key(), k -> new HashSet<>()).add(outcome.hash());
                }
            }
            stormEnded.run();
            Thread.sleep(lease.toMillis() * 2); // intent-first claims left by failed attempts are stale by now
            for (String key : keyNames) {
                // whatever the dice and the interleaving: the first claim of a key, which finds no record, takes it
                assertThat(runs.getOrDefault(key, 0)).as("requests of the storm run under a key").isPositive();
                List<String> written = effects.get(0).queryForList(
                        "SELECT request_hash FROM effects WHERE idempotency_key = ?", String.class, key);
                Set<String> answered = stored.getOrDefault(key, Set.of());
                assertThat(answered).as("one request's answer per key").hasSizeLessThanOrEqualTo(1);
                assertThat(written).as("each key's effect committed once, by the request answered")
                        .containsExactlyElementsOf(answered);
                for (IdempotencyEngine engine : engines) {
                    // nothing left in flight: a request now is replayed, refused or run. A flight or a claim left
                    // behind would make it wait out its wait and answer "in progress", which no branch below takes
                    // (not timed: on a loaded machine a takeover and its resolver can take longer than the wait)
                    IdempotencyEngine.Start after = engine.start(scoped(key), RETRIED, mode, lease);
                    if (after instanceof IdempotencyEngine.Proceed proceed) {
                        assertThat(answered).isEmpty();
                        proceed.execution().abandonUnrun();
                    } else if (answered.contains(RETRIED)) {
                        assertThat(after).isInstanceOf(IdempotencyEngine.Replay.class);
                    } else {
                        assertThat(after).isInstanceOf(IdempotencyEngine.Mismatch.class);
                    }
                }
            }
        } finally {
            executor.shutdownNow();
        }
    }

    /** The scoped key of a storm key. */
    public static ScopedKey scoped(String key) {
        return new ScopedKey("alice", "POST /payments", key);
    }

    private record Outcome(String key, String hash, IdempotencyEngine.Start start, boolean stored) {
    }

    /** One request: claims, and when it holds the key writes its effect and fails, answers 503, or answers 201. */
    private static Outcome request(IdempotencyEngine engine, JdbcTemplate effects, String key, String hash,
                                   IdempotencyMode mode, Duration lease) {
        IdempotencyEngine.Start start = engine.start(scoped(key), hash, mode, lease);
        boolean stored = false;
        if (start instanceof IdempotencyEngine.Proceed proceed) {
            effects.update("INSERT INTO effects VALUES (?, ?)", key, hash);
            int dice = ThreadLocalRandom.current().nextInt(10);
            if (dice < 2) {
                proceed.execution().abandon(); // the handler threw
            } else {
                StoredResponse answer = dice < 3 ? new StoredResponse(503, List.of(), new byte[0])
                        : new StoredResponse(201, List.of(), (hash + ":" + key).getBytes(StandardCharsets.UTF_8));
                try {
                    stored = proceed.execution().finish(answer) == IdempotencyEngine.Outcome.STORED;
                } catch (LeaseLostException e) {
                    // intent-first: the machine stalled longer than the short lease and another request took the
                    // claim over; this one's result is refused and its effect rolled back, which the checks cover
                }
            }
        }
        return new Outcome(key, hash, start, stored);
    }
}
