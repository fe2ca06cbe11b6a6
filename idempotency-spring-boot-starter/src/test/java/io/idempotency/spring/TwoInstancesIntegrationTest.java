package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.spring.app.TestApplication;
import io.idempotency.testkit.Await;
import io.idempotency.testkit.TestPostgres;
import jakarta.servlet.FilterChain;
import jakarta.servlet.ServletException;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.web.server.context.WebServerApplicationContext;
import org.springframework.boot.web.servlet.FilterRegistrationBean;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.core.Ordered;
import org.springframework.http.HttpStatus;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.ResponseStatus;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.filter.OncePerRequestFilter;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Two instances of the application — two contexts, each with its own web server and connection pool — on one
 * database, over real HTTP. Duplicates within one instance wait in memory; across instances only the database's
 * unique index stands between them, so these are the cases no lock inside one JVM could decide. The first request
 * is held inside its handler (after its business write, claim uncommitted) until the test lets it go, and the test
 * waits for the other instance's claim to be seen waiting in PostgreSQL before it does.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class TwoInstancesIntegrationTest {

    private static final Duration IN_FLIGHT_WAIT = Duration.ofSeconds(3);
    private static final Duration PATIENCE = Duration.ofSeconds(20);

    private TestPostgres.Database database;
    private ConfigurableApplicationContext first;
    private ConfigurableApplicationContext second;
    private final HttpClient http = HttpClient.newHttpClient();

    /** Properties both instances run with besides the database's. */
    List<String> properties() {
        return List.of();
    }

    @BeforeAll
    void startTwoInstances() {
        database = TestDatabases.withOrders();
        first = start(database);
        second = start(database);
    }

    @AfterAll
    void stopInstances() {
        for (ConfigurableApplicationContext context : new ConfigurableApplicationContext[] {first, second}) {
            if (context != null) {
                context.close();
            }
        }
    }

    @Test
    void aDuplicateWaitingOnTheOtherInstanceRunsItselfOnceWhenTheFirstRollsBack() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "rolled-back-" + key;

        Race race = heldWhileTheOtherInstanceWaits(key, note, true, note);

        HttpResponse<String> failed = answer(race.onFirst());
        assertThat(failed.statusCode()).as(failed.body()).isEqualTo(500);
        HttpResponse<String> ran = answer(race.onSecond());
        assertThat(ran.statusCode()).as("the key was freed, so the waiting duplicate runs: %s", ran.body())
                .isEqualTo(201);
        assertThat(ran.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(Gated.executions(note)).as("the handler ran twice: the failed first, then the duplicate").isEqualTo(2);
        assertThat(rows(note)).as("only the duplicate's write committed").isEqualTo(1);

        // Both instances now replay what the duplicate stored; nothing runs again.
        for (ConfigurableApplicationContext instance : List.of(first, second)) {
            HttpResponse<String> replay = answer(post(instance, key, note));
            assertThat(replay.statusCode()).isEqualTo(201);
            assertThat(replay.body()).isEqualTo(ran.body());
            assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        }
        assertThat(Gated.executions(note)).isEqualTo(2);
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void aRollbackBehindDuplicatesOnBothInstancesLeavesExactlyOneExecution() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "rolled-back-storm-" + key;
        Gate gate = Gate.hold(note, true);
        int duplicatesPerInstance = 3;

        CompletableFuture<HttpResponse<String>> onFirst = post(first, key, note);
        gate.awaitEntered();
        int arrivedBefore = Arrivals.count();
        List<CompletableFuture<HttpResponse<String>>> duplicates = new ArrayList<>();
        for (int i = 0; i < duplicatesPerInstance; i++) {
            duplicates.add(post(first, key, note));
            duplicates.add(post(second, key, note));
        }
        // every duplicate is in, and the other instance's claim waits for the first one's in the database
        Await.until("all duplicates arrived", PATIENCE,
                () -> Arrivals.count() - arrivedBefore >= 2 * duplicatesPerInstance);
        awaitClaimWaitingInTheDatabase();
        gate.release();

        assertThat(answer(onFirst).statusCode()).isEqualTo(500);
        int originals = 0;
        String stored = null;
        for (CompletableFuture<HttpResponse<String>> duplicate : duplicates) {
            HttpResponse<String> answer = answer(duplicate);
            if (answer.statusCode() == 409) {
                assertThat(answer.headers().firstValue("Retry-After")).isPresent();
                assertThat(answer.body()).contains("idempotency-request-in-progress");
                continue;
            }
            assertThat(answer.statusCode()).as("unexpected answer: %s", answer.body()).isEqualTo(201);
            if (answer.headers().firstValue("Idempotent-Replayed").isEmpty()) {
                originals++;
            }
            if (stored == null) {
                stored = answer.body();
            }
            assertThat(answer.body()).as("every 201 is the one stored answer").isEqualTo(stored);
        }
        assertThat(originals).as("exactly one duplicate ran after the rollback").isEqualTo(1);
        assertThat(Gated.executions(note)).isEqualTo(2);
        assertThat(rows(note)).isEqualTo(1);
    }

    /**
     * Another body under the key while the first request runs: on the other instance its claim waits in the database,
     * on the same one it waits in memory, and either way it is refused once the first one has committed.
     */
    @ParameterizedTest(name = "same instance: {0}")
    @ValueSource(booleans = {false, true})
    void anotherBodyIsRefusedOnceTheFirstCommitsAndNeverRuns(boolean sameInstance) throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "first-" + key;
        String other = "other-" + key;

        Race race = heldWhileAnotherRequestWaits(key, note, false, other, sameInstance);

        assertThat(answer(race.onFirst()).statusCode()).isEqualTo(201);
        HttpResponse<String> refused = answer(race.onSecond());
        assertThat(refused.statusCode()).as(refused.body()).isEqualTo(422);
        assertThat(refused.headers().firstValue("Content-Type")).hasValueSatisfying(
                type -> assertThat(type).startsWith("application/problem+json"));
        assertThat(refused.body()).contains("idempotency-key-mismatch");
        assertThat(Gated.executions(other)).isZero();
        assertThat(rows(note)).isEqualTo(1);
        assertThat(rows(other)).isZero();
    }

    @Test
    void anotherBodyOnTheOtherInstanceGets409WhileTheFirstOutlastsTheWaitThen422() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "slow-" + key;
        String other = "other-" + key;
        Gate gate = Gate.hold(note, false);

        CompletableFuture<HttpResponse<String>> onFirst = post(first, key, note);
        gate.awaitEntered();
        // the first request is held until this answer is in: it outlasts the in-flight wait whatever the timing
        HttpResponse<String> busy = answer(post(second, key, other));
        assertThat(busy.statusCode()).as(busy.body()).isEqualTo(409);
        assertThat(busy.headers().firstValue("Retry-After")).isPresent();
        assertThat(busy.body()).contains("idempotency-request-in-progress");
        gate.release();
        HttpResponse<String> created = answer(onFirst);
        assertThat(created.statusCode()).isEqualTo(201);

        HttpResponse<String> refused = answer(post(second, key, other));
        assertThat(refused.statusCode()).as(refused.body()).isEqualTo(422);
        HttpResponse<String> replay = answer(post(second, key, note));
        assertThat(replay.statusCode()).isEqualTo(201);
        assertThat(replay.body()).isEqualTo(created.body());
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(Gated.executions(other)).isZero();
        assertThat(Gated.executions(note)).isEqualTo(1);
        assertThat(rows(note)).isEqualTo(1);
        assertThat(rows(other)).isZero();
    }

    /**
     * ... and runs once the first one rolled back, on the same instance as on the other: refused at once there, it
     * would have been told that its key was reused, when a moment later the key was free.
     */
    @ParameterizedTest(name = "same instance: {0}")
    @ValueSource(booleans = {false, true})
    void anotherBodyWaitingRunsWhenTheFirstRollsBackAndTheFirstThenGets422(boolean sameInstance) throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "rolled-back-first-" + key;
        String other = "other-" + key;

        Race race = heldWhileAnotherRequestWaits(key, note, true, other, sameInstance);

        assertThat(answer(race.onFirst()).statusCode()).isEqualTo(500);
        HttpResponse<String> ran = answer(race.onSecond());
        assertThat(ran.statusCode()).as("the rolled-back request left the key free: %s", ran.body()).isEqualTo(201);
        HttpResponse<String> retry = answer(post(first, key, note));
        assertThat(retry.statusCode()).as("the key now belongs to the other request: %s", retry.body())
                .isEqualTo(422);
        assertThat(rows(note)).isZero();
        assertThat(rows(other)).isEqualTo(1);
        assertThat(Gated.executions(other)).isEqualTo(1);
    }

    @Test
    void anAnswerOneInstanceKeepsInMemoryIsNotTheOtherInstancesToReplay() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "kept-" + key;
        HttpResponse<String> created = answer(post(first, key, note));
        assertThat(created.statusCode()).isEqualTo(201);
        // removed as the retention removes it: only the memory of the instance that stored it still has the answer
        database.queryString("delete from idempotency_keys where idempotency_key = '" + key + "'");

        HttpResponse<String> fromMemory = answer(post(first, key, note));
        assertThat(fromMemory.statusCode()).isEqualTo(201);
        assertThat(fromMemory.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(fromMemory.body()).isEqualTo(created.body());
        HttpResponse<String> ran = answer(post(second, key, note));

        assertThat(ran.statusCode()).isEqualTo(201);
        assertThat(ran.headers().firstValue("Idempotent-Replayed")).as("the other instance's memory is not this one's")
                .isEmpty();
        assertThat(ran.body()).isNotEqualTo(created.body());
        assertThat(Gated.executions(note)).isEqualTo(2);
        assertThat(rows(note)).isEqualTo(2);
    }

    /** One more instance of the test application, on a port of its own, with a connection pool of its own. */
    private ConfigurableApplicationContext start(TestPostgres.Database database) {
        List<String> args = new ArrayList<>();
        database.springPropertyValues().forEach(value -> args.add("--" + value));
        args.add("--server.port=0");
        args.add("--spring.main.banner-mode=off");
        args.add("--idempotency.in-flight-wait=" + IN_FLIGHT_WAIT.toMillis() + "ms");
        properties().forEach(property -> args.add("--" + property));
        return new SpringApplicationBuilder(TestApplication.class, Gated.class).run(args.toArray(String[]::new));
    }

    private CompletableFuture<HttpResponse<String>> post(ConfigurableApplicationContext instance, String key,
                                                         String note) {
        int port = ((WebServerApplicationContext) instance).getWebServer().getPort();
        HttpRequest request = HttpRequest.newBuilder(URI.create("http://localhost:" + port + Gated.PATH))
                .timeout(PATIENCE)
                .header("Content-Type", "application/json")
                .header("Idempotency-Key", key)
                .POST(HttpRequest.BodyPublishers.ofString("{\"note\":\"" + note + "\"}", StandardCharsets.UTF_8))
                .build();
        return http.sendAsync(request, HttpResponse.BodyHandlers.ofString());
    }

    /** The requests of a race under one key: held on the first instance, and waiting for it (on the second, mostly). */
    private record Race(CompletableFuture<HttpResponse<String>> onFirst,
                        CompletableFuture<HttpResponse<String>> onSecond) {
    }

    /**
     * Sends {@code note} under {@code key} to the first instance and holds it inside its handler, after its write
     * (to throw once released, with {@code fail}); then sends {@code waitingNote} under the same key to the second
     * instance, and lets the first go once the second's claim waits for it in the database.
     */
    private Race heldWhileTheOtherInstanceWaits(String key, String note, boolean fail, String waitingNote)
            throws InterruptedException {
        Gate gate = Gate.hold(note, fail);

        CompletableFuture<HttpResponse<String>> onFirst = post(first, key, note);
        gate.awaitEntered();
        CompletableFuture<HttpResponse<String>> onSecond = post(second, key, waitingNote);
        awaitClaimWaitingInTheDatabase();
        gate.release();
        return new Race(onFirst, onSecond);
    }

    /**
     * As {@link #heldWhileTheOtherInstanceWaits}, or, {@code sameInstance}, with {@code waitingNote} sent to the first
     * instance too, where it waits in memory: the first is then let go once a thread of this JVM (both instances run
     * in it) waits to learn whose the key is.
     */
    private Race heldWhileAnotherRequestWaits(String key, String note, boolean fail, String waitingNote,
                                              boolean sameInstance) throws InterruptedException {
        if (!sameInstance) {
            return heldWhileTheOtherInstanceWaits(key, note, fail, waitingNote);
        }
        Gate gate = Gate.hold(note, fail);

        CompletableFuture<HttpResponse<String>> onFirst = post(first, key, note);
        gate.awaitEntered();
        CompletableFuture<HttpResponse<String>> onSecond = post(first, key, waitingNote);
        Await.until("a request waiting in memory to learn whose the key is", PATIENCE,
                () -> Thread.getAllStackTraces().values().stream().anyMatch(stack -> java.util.Arrays.stream(stack)
                        .anyMatch(frame -> frame.getClassName().endsWith("IdempotencyEngine$Flight")
                                && frame.getMethodName().equals("awaitHeld"))));
        gate.release();
        return new Race(onFirst, onSecond);
    }

    private static HttpResponse<String> answer(CompletableFuture<HttpResponse<String>> request) throws Exception {
        return request.get(PATIENCE.toSeconds(), TimeUnit.SECONDS);
    }

    /**
     * Within one instance duplicates wait in memory, holding no connection; so a session of this database waiting for
     * a lock is the other instance's claim, blocked on the held one's uncommitted row.
     */
    private void awaitClaimWaitingInTheDatabase() throws InterruptedException {
        Await.until("a claim waiting in the database for the held one", PATIENCE, () -> database.lockWaiters() > 0);
    }

    private long rows(String note) {
        return TestDatabases.rows(database, note);
    }


    /** Holds the request that writes a given note inside its handler until released; then it returns or throws. */
    static final class Gate {

        private static final Map<String, Gate> GATES = new ConcurrentHashMap<>();

        private final CountDownLatch entered = new CountDownLatch(1);
        private final CountDownLatch released = new CountDownLatch(1);
        private final boolean fail;

        private Gate(boolean fail) {
            this.fail = fail;
        }

        /** Holds the first request that writes {@code note}; with {@code fail} its handler then throws. */
        static Gate hold(String note, boolean fail) {
            Gate gate = new Gate(fail);
            GATES.put(note, gate);
            return gate;
        }

        void awaitEntered() throws InterruptedException {
            assertThat(entered.await(PATIENCE.toSeconds(), TimeUnit.SECONDS)).as("the held request reached its handler")
                    .isTrue();
        }

        void release() {
            released.countDown();
        }

        /** Called by the handler after its write: waits if the note is held, then throws if asked to. */
        static void pass(String note) throws InterruptedException {
            Gate gate = GATES.remove(note); // only the first request with the note is held
            if (gate == null) {
                return;
            }
            gate.entered.countDown();
            if (!gate.released.await(PATIENCE.toSeconds(), TimeUnit.SECONDS)) {
                throw new IllegalStateException("never released");
            }
            if (gate.fail) {
                throw new IllegalStateException("the held request fails, as asked");
            }
        }
    }

    /** Counts the requests to the held endpoint that reached the server, before any idempotency handling. */
    static final class Arrivals extends OncePerRequestFilter {

        private static final AtomicInteger ARRIVED = new AtomicInteger();

        static int count() {
            return ARRIVED.get();
        }

        @Override
        protected void doFilterInternal(HttpServletRequest request, HttpServletResponse response, FilterChain chain)
                throws ServletException, IOException {
            if (Gated.PATH.equals(request.getRequestURI())) {
                ARRIVED.incrementAndGet();
            }
            chain.doFilter(request, response);
        }
    }

    /** The endpoint both instances serve: writes a row, passes the gate, answers 201. */
    @RestController
    static class Gated {

        static final String PATH = "/gated-orders";
        private static final Map<String, AtomicInteger> EXECUTIONS = new ConcurrentHashMap<>();

        private final JdbcClient jdbc;

        Gated(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        static int executions(String note) {
            AtomicInteger count = EXECUTIONS.get(note);
            return count == null ? 0 : count.get();
        }

        @Bean
        static FilterRegistrationBean<Arrivals> arrivals() {
            FilterRegistrationBean<Arrivals> registration = new FilterRegistrationBean<>(new Arrivals());
            registration.setOrder(Ordered.HIGHEST_PRECEDENCE);
            return registration;
        }

        @PostMapping(PATH)
        @Idempotent
        @ResponseStatus(HttpStatus.CREATED)
        public Map<String, Object> create(@RequestBody Map<String, String> body) throws InterruptedException {
            String note = body.get("note");
            EXECUTIONS.computeIfAbsent(note, n -> new AtomicInteger()).incrementAndGet();
            long id = jdbc.sql("insert into orders (note) values (?) returning id").param(note).query(Long.class)
                    .single();
            Gate.pass(note);
            return Map.of("id", id, "note", note);
        }
    }
}
