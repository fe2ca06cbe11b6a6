package io.idempotency.spring;

import io.idempotency.core.DefiniteFailureException;
import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.spring.app.TestApplication;
import io.idempotency.testkit.Await;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.web.server.context.WebServerApplicationContext;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.http.HttpStatus;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestHeader;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.ResponseStatus;
import org.springframework.web.bind.annotation.RestController;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Different requests racing under one key, over real HTTP on one database, on one instance (duplicates coalesce in
 * memory) and on two (they meet in the database), in both modes. Three requests share the key: two bodies, and the
 * first body with another query. Whatever the interleaving, one request runs (or, when the first execution fails, one
 * more after it), and every answer is that request's own, a replay of it to the same request, 422 to another request,
 * or 409: no request is ever answered with another request's answer, and nothing answers 5xx but the failed
 * execution itself.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class DifferentRequestsRaceIntegrationTest {

    private static final Duration PATIENCE = Duration.ofSeconds(30);
    private static final int REQUESTS = 18;

    /** The requests that share a key: a body, and a query, each answered with what it was sent. */
    private enum Variant {
        A("a", ""), B("b", ""), C("a", "?extra=c");

        final String body;
        final String query;

        Variant(String body, String query) {
            this.body = body;
            this.query = query;
        }
    }

    private TestPostgres.Database database;
    private ConfigurableApplicationContext first;
    private ConfigurableApplicationContext second;
    private final HttpClient http = HttpClient.newBuilder().executor(Executors.newFixedThreadPool(REQUESTS + 2))
            .build();

    @BeforeAll
    void startTwoInstances() {
        database = TestDatabases.withOrders();
        first = start();
        second = start();
    }

    @AfterAll
    void stopInstances() {
        for (ConfigurableApplicationContext context : new ConfigurableApplicationContext[] {first, second}) {
            if (context != null) {
                context.close();
            }
        }
    }

    @ParameterizedTest(name = "{0} on {1} instance(s), first execution fails: {2}, handler takes {3} ms")
    @CsvSource({
            "one-transaction, 1, false, 200", "one-transaction, 2, false, 200",
            "one-transaction, 1, true, 200", "one-transaction, 2, true, 200",
            "intent-first, 1, false, 200", "intent-first, 2, false, 200",
            "intent-first, 1, true, 200", "intent-first, 2, true, 200",
            "one-transaction, 2, false, 0", "one-transaction, 2, true, 0",
            "intent-first, 2, false, 0", "intent-first, 2, true, 0"})
    void differentRequestsUnderOneKeyRunOnceAndNeverGetAnotherOnesAnswer(String mode, int instances, boolean failFirst,
                                                                         long sleep) throws Exception {
        String key = UUID.randomUUID().toString();
        if (failFirst) {
            Racing.FAIL_FIRST.add(key);
        }
        List<ConfigurableApplicationContext> targets = instances == 1 ? List.of(first) : List.of(first, second);
        ExecutorService clients = Executors.newFixedThreadPool(REQUESTS);
        CountDownLatch go = new CountDownLatch(1);
        List<Variant> sent = new ArrayList<>();
        List<Future<HttpResponse<String>>> answers = new ArrayList<>();
        for (int i = 0; i < REQUESTS; i++) {
            Variant variant = Variant.values()[i % Variant.values().length];
            ConfigurableApplicationContext target = targets.get(i / Variant.values().length % targets.size());
            sent.add(variant);
            answers.add(clients.submit(() -> {
                go.await();
                return http.send(post(target, mode, key, variant, sleep), HttpResponse.BodyHandlers.ofString());
            }));
        }
        go.countDown();

        Map<String, Integer> tally = new TreeMap<>();
        List<Variant> ran = new ArrayList<>();
        String stored = null;
        int failures = 0;
        List<HttpResponse<String>> responses = new ArrayList<>();
        for (int i = 0; i < REQUESTS; i++) {
            HttpResponse<String> answer = answers.get(i).get(PATIENCE.toSeconds(), TimeUnit.SECONDS);
            responses.add(answer);
            Variant variant = sent.get(i);
            boolean replayed = answer.headers().firstValue("Idempotent-Replayed").isPresent();
            tally.merge(variant + " " + answer.statusCode() + (replayed ? " replayed" : ""), 1, Integer::sum);
            switch (answer.statusCode()) {
                case 201 -> {
                    assertThat(answer.body()).as("request %s is answered with its own answer", variant)
                            .isEqualTo(expectedAnswerOf(variant, answer.body()));
                    if (!replayed) {
                        ran.add(variant);
                    }
                }
                case 422 -> assertThat(answer.body()).contains("idempotency-key-mismatch");
                case 409 -> assertThat(answer.body()).contains("idempotency-request-in-progress");
                case 500 -> failures++;
                default -> throw new AssertionError("unexpected answer to " + variant + ": " + answer.statusCode()
                        + " " + answer.body());
            }
        }
        clients.shutdownNow();
        System.out.println("[race] " + mode + " on " + instances + " instance(s), first fails " + failFirst + ", "
                + sleep + " ms: " + tally + ", executions " + Racing.executions(key));

        assertThat(ran).as("requests that ran and committed: %s", tally).hasSize(1);
        Variant winner = ran.get(0);
        for (int i = 0; i < REQUESTS; i++) {
            HttpResponse<String> answer = responses.get(i);
            if (answer.statusCode() == 201) {
                stored = stored == null ? answer.body() : stored;
                assertThat(answer.body()).as("every 201 is the one stored answer, to its own request: %s", tally)
                        .isEqualTo(stored);
                assertThat(sent.get(i)).as("only the request that ran gets its answer: %s", tally).isEqualTo(winner);
            }
            if (answer.statusCode() == 422 && !failFirst) {
                assertThat(sent.get(i)).as("the request that ran is never told it is another one: %s", tally)
                        .isNotEqualTo(winner);
            }
        }
        List<Variant> executed = Racing.executions(key);
        assertThat(failures).as("5xx answers are the failed execution's own: %s", tally)
                .isEqualTo(failFirst ? 1 : 0);
        assertThat(executed).as("handler executions: %s", tally).hasSize(failFirst ? 2 : 1);
        if (failFirst && mode.equals("intent-first")) {
            assertThat(executed.get(1)).as("a FAILED claim runs again for its own request only")
                    .isEqualTo(executed.get(0));
        }
        assertThat(database.queryLong("select count(*) from orders where note like '" + key + "%'"))
                .as("committed business rows").isEqualTo(1);

        // Afterwards, on both instances (each with its replay cache and its memory of completed requests): the
        // request that ran is replayed, the others refused; nothing runs again.
        for (ConfigurableApplicationContext instance : List.of(first, second)) {
            for (Variant variant : Variant.values()) {
                for (int attempt = 0; attempt < 2; attempt++) {
                    HttpResponse<String> again = http.send(post(instance, mode, key, variant, 0),
                            HttpResponse.BodyHandlers.ofString());
                    if (variant == winner) {
                        assertThat(again.statusCode()).as(again.body()).isEqualTo(201);
                        assertThat(again.body()).isEqualTo(stored);
                        assertThat(again.headers().firstValue("Idempotent-Replayed")).hasValue("true");
                    } else {
                        assertThat(again.statusCode()).as("%s after %s: %s", variant, winner, again.body())
                                .isEqualTo(422);
                    }
                }
            }
        }
        assertThat(Racing.executions(key)).hasSize(failFirst ? 2 : 1);
    }

    @ParameterizedTest(name = "the held request fails: {0}")
    @CsvSource({"false", "true"})
    void aRequestWaitingInMemoryBehindAnotherStillClaimingInTheDatabaseIsJudgedByWhoGetsTheKey(boolean fail)
            throws Exception {
        String key = UUID.randomUUID().toString();
        CountDownLatch entered = new CountDownLatch(1);
        CountDownLatch released = new CountDownLatch(1);
        Racing.GATES.put(key + "-" + Variant.A, new CountDownLatch[] {entered, released});
        if (fail) {
            Racing.FAIL_FIRST.add(key);
        }
        // A holds the key, uncommitted, on the first instance; C claims on the second and waits in the database;
        // A again on the second instance comes behind C there, which does not hold the key yet
        CompletableFuture<HttpResponse<String>> held = sendAsync(first, key, Variant.A);
        assertThat(entered.await(PATIENCE.toSeconds(), TimeUnit.SECONDS)).isTrue();
        CompletableFuture<HttpResponse<String>> claiming = sendAsync(second, key, Variant.C);
        Await.until("a claim waiting in the database for the held one", PATIENCE, () -> database.lockWaiters() > 0);
        CompletableFuture<HttpResponse<String>> behind = sendAsync(second, key, Variant.A);
        Thread.sleep(300); // behind C in memory by now (should it come later, it must be answered alike)
        released.countDown();

        HttpResponse<String> first = held.get(PATIENCE.toSeconds(), TimeUnit.SECONDS);
        HttpResponse<String> other = claiming.get(PATIENCE.toSeconds(), TimeUnit.SECONDS);
        HttpResponse<String> same = behind.get(PATIENCE.toSeconds(), TimeUnit.SECONDS);
        if (!fail) {
            assertThat(first.statusCode()).isEqualTo(201);
            assertThat(other.statusCode()).as(other.body()).isEqualTo(422);
            assertThat(same.statusCode()).as("A is replayed, not refused for C: %s", same.body()).isEqualTo(201);
            assertThat(same.headers().firstValue("Idempotent-Replayed")).hasValue("true");
            assertThat(same.body()).isEqualTo(first.body());
            assertThat(Racing.executions(key)).containsExactly(Variant.A);
        } else {
            assertThat(first.statusCode()).isEqualTo(500);
            assertThat(other.statusCode()).as("the key was freed: C runs: %s", other.body()).isEqualTo(201);
            assertThat(other.headers().firstValue("Idempotent-Replayed")).isEmpty();
            assertThat(other.body()).isEqualTo(expectedAnswerOf(Variant.C, other.body()));
            assertThat(same.statusCode()).as("A, behind C that got the key: %s", same.body()).isEqualTo(422);
            assertThat(Racing.executions(key)).containsExactly(Variant.A, Variant.C);
        }
        assertThat(database.queryLong("select count(*) from orders where note like '" + key + "%'"))
                .as("committed business rows").isEqualTo(1);
    }

    private CompletableFuture<HttpResponse<String>> sendAsync(ConfigurableApplicationContext instance, String key,
                                                              Variant variant) {
        return http.sendAsync(post(instance, "one-transaction", key, variant, 0), HttpResponse.BodyHandlers.ofString());
    }

    /** The answer {@code variant} must get: its own note and query, with the id the database gave. */
    private static String expectedAnswerOf(Variant variant, String actual) {
        String id = actual.replaceAll(".*\"id\":(\\d+).*", "$1");
        return Racing.answer(Long.parseLong(id), variant.body, variant.query.isEmpty() ? "" : "c");
    }

    private HttpRequest post(ConfigurableApplicationContext instance, String mode, String key, Variant variant,
                             long sleep) {
        int port = ((WebServerApplicationContext) instance).getWebServer().getPort();
        return HttpRequest.newBuilder(URI.create("http://localhost:" + port + "/racing/" + mode + variant.query))
                .timeout(PATIENCE)
                .header("Content-Type", "application/json")
                .header("Idempotency-Key", key)
                .header("X-Sleep-Ms", Long.toString(sleep))
                .POST(HttpRequest.BodyPublishers.ofString("{\"key\":\"" + key + "\",\"body\":\"" + variant.body
                        + "\"}", StandardCharsets.UTF_8))
                .build();
    }

    private ConfigurableApplicationContext start() {
        List<String> args = new ArrayList<>();
        database.springPropertyValues().forEach(value -> args.add("--" + value));
        args.add("--server.port=0");
        args.add("--spring.main.banner-mode=off");
        args.add("--idempotency.in-flight-wait=10s");
        args.add("--server.tomcat.threads.max=" + (REQUESTS * 2));
        return new SpringApplicationBuilder(TestApplication.class, Racing.class).run(args.toArray(String[]::new));
    }

    /** Writes a row, takes its time so that the requests overlap, and answers with what it was sent. */
    @RestController
    static class Racing {

        /** Requests (key and variant) held after their write, until released: entered, released. */
        static final Map<String, CountDownLatch[]> GATES = new ConcurrentHashMap<>();
        /** Keys whose first execution fails (after its write). */
        static final Set<String> FAIL_FIRST = ConcurrentHashMap.newKeySet();
        private static final Map<String, List<Variant>> EXECUTIONS = new ConcurrentHashMap<>();
        private static final Map<String, AtomicInteger> STARTED = new ConcurrentHashMap<>();

        private final JdbcClient jdbc;

        Racing(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        static List<Variant> executions(String key) {
            List<Variant> executed = EXECUTIONS.get(key);
            return executed == null ? List.of() : List.copyOf(executed);
        }

        static String answer(long id, String body, String extra) {
            return "{\"id\":" + id + ",\"body\":\"" + body + "\",\"extra\":\"" + extra + "\"}";
        }

        @PostMapping("/racing/one-transaction")
        @Idempotent
        @ResponseStatus(HttpStatus.CREATED)
        public String oneTransaction(@RequestBody Map<String, String> request,
                                     @RequestParam(defaultValue = "") String extra,
                                     @RequestHeader("X-Sleep-Ms") long sleep) throws InterruptedException {
            return run(request, extra, sleep, false);
        }

        @PostMapping("/racing/intent-first")
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "20s")
        @ResponseStatus(HttpStatus.CREATED)
        public String intentFirst(@RequestBody Map<String, String> request,
                                  @RequestParam(defaultValue = "") String extra,
                                  @RequestHeader("X-Sleep-Ms") long sleep) throws InterruptedException {
            return run(request, extra, sleep, true);
        }

        private String run(Map<String, String> request, String extra, long sleep, boolean definite)
                throws InterruptedException {
            String key = request.get("key");
            String body = request.get("body");
            Variant variant = body.equals("b") ? Variant.B : extra.isEmpty() ? Variant.A : Variant.C;
            EXECUTIONS.computeIfAbsent(key, k -> new java.util.concurrent.CopyOnWriteArrayList<>()).add(variant);
            long id = jdbc.sql("insert into orders (note) values (?) returning id").param(key + "-" + variant)
                    .query(Long.class).single();
            Thread.sleep(sleep);
            CountDownLatch[] gate = GATES.remove(key + "-" + variant);
            if (gate != null) {
                gate[0].countDown();
                if (!gate[1].await(PATIENCE.toSeconds(), TimeUnit.SECONDS)) {
                    throw new IllegalStateException("never released");
                }
            }
            if (STARTED.computeIfAbsent(key, k -> new AtomicInteger()).getAndIncrement() == 0
                    && FAIL_FIRST.contains(key)) {
                if (definite) {
                    throw new DefiniteFailureException("the first execution fails, as asked");
                }
                throw new IllegalStateException("the first execution fails, as asked");
            }
            return answer(id, body, extra);
        }
    }
}
