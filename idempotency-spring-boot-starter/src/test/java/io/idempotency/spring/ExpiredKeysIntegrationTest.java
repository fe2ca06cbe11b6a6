package io.idempotency.spring;

import io.idempotency.core.DefiniteFailureException;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.core.Idempotent;
import io.idempotency.spring.app.TestApplication;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.web.server.context.WebServerApplicationContext;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.http.HttpStatus;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestHeader;
import org.springframework.web.bind.annotation.ResponseStatus;
import org.springframework.web.bind.annotation.RestController;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Keys past their expiry, over real HTTP: a record whose {@code expires_at} has passed but which is still there is
 * honoured as before (docs/retention.md: "the TTL is a lower bound"), and once the cleanup has removed it the key is
 * free. Three instances on one database, one for each way an instance can know a request completed: its answer kept
 * in memory, only remembered as completed, or nothing at all (every answer from the database).
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class ExpiredKeysIntegrationTest {

    private static final Duration PATIENCE = Duration.ofSeconds(20);

    private TestPostgres.Database database;
    /** Keeps answers in memory and remembers completed requests (the defaults). */
    private ConfigurableApplicationContext cached;
    /** Keeps no answer, but remembers which requests completed. */
    private ConfigurableApplicationContext remembering;
    /** Keeps and remembers nothing: every answer comes from a claim. */
    private ConfigurableApplicationContext plain;
    private final HttpClient http = HttpClient.newHttpClient();

    /** Properties every instance runs with besides the database's. */
    List<String> properties() {
        return List.of();
    }

    @BeforeAll
    void startInstances() {
        database = TestDatabases.withOrders();
        cached = start();
        remembering = start("idempotency.replay-cache.max-entries=0");
        plain = start("idempotency.replay-cache.max-entries=0", "idempotency.replay-cache.completed-keys=0");
    }

    @AfterAll
    void stopInstances() {
        for (ConfigurableApplicationContext context : new ConfigurableApplicationContext[] {
                cached, remembering, plain}) {
            if (context != null) {
                context.close();
            }
        }
    }

    @Test
    void anExpiredRecordNotYetRemovedIsReplayedAndRefusesAnotherBodyOnEveryInstance() throws Exception {
        for (String path : List.of(Expiring.PATH, Expiring.INTENT_PATH)) {
            String key = UUID.randomUUID().toString();
            String note = "expired-" + key;
            List<HttpResponse<String>> firsts = new ArrayList<>();
            // each instance completes a request of its own first, so that it remembers it (or keeps its answer)
            for (ConfigurableApplicationContext instance : instances()) {
                firsts.add(post(instance, path, key + "-" + name(instance), note));
            }
            HttpResponse<String> created = post(cached, path, key, note);
            assertThat(created.statusCode()).as(created.body()).isEqualTo(201);
            expire();

            for (ConfigurableApplicationContext instance : instances()) {
                HttpResponse<String> replay = post(instance, path, key, note);
                assertThat(replay.statusCode()).as("%s %s: %s", path, name(instance), replay.body()).isEqualTo(201);
                assertThat(replay.body()).isEqualTo(created.body());
                assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");

                HttpResponse<String> own = post(instance, path, key + "-" + name(instance), note);
                assertThat(own.statusCode()).as("%s %s: %s", path, name(instance), own.body()).isEqualTo(201);
                assertThat(own.body()).as("the instance's own request, expired").isEqualTo(firsts.remove(0).body());
                assertThat(own.headers().firstValue("Idempotent-Replayed")).hasValue("true");

                HttpResponse<String> refused = post(instance, path, key, "other-" + note);
                assertThat(refused.statusCode()).as("%s %s: %s", path, name(instance), refused.body())
                        .isEqualTo(422);
            }
            assertThat(Expiring.executions(note)).as(path).isEqualTo(4);
            assertThat(Expiring.executions("other-" + note)).isZero();
        }
    }

    @Test
    void aRequestWhoseRecordTheCleanupRemovedRunsAgainExceptFromMemoryOfTheInstanceThatKeptIt() throws Exception {
        for (String path : List.of(Expiring.PATH, Expiring.INTENT_PATH)) {
            String key = UUID.randomUUID().toString();
            String note = "removed-" + key;
            // each instance completes the request under a key of its own, then the records expire and are removed
            List<HttpResponse<String>> firsts = new ArrayList<>();
            for (ConfigurableApplicationContext instance : instances()) {
                HttpResponse<String> first = post(instance, path, key + "-" + name(instance), note);
                assertThat(first.statusCode()).as(first.body()).isEqualTo(201);
                firsts.add(first);
            }
            expire();
            assertThat(cleanup()).isGreaterThanOrEqualTo(3);

            // the instance that kept the answer replays it from memory, as documented; the others run it again
            HttpResponse<String> fromMemory = post(cached, path, key + "-cached", note);
            assertThat(fromMemory.statusCode()).as(fromMemory.body()).isEqualTo(201);
            assertThat(fromMemory.body()).isEqualTo(firsts.get(0).body());
            assertThat(fromMemory.headers().firstValue("Idempotent-Replayed")).hasValue("true");
            for (ConfigurableApplicationContext instance : List.of(remembering, plain)) {
                HttpResponse<String> again = post(instance, path, key + "-" + name(instance), note);
                assertThat(again.statusCode()).as("%s %s: %s", path, name(instance), again.body()).isEqualTo(201);
                assertThat(again.headers().firstValue("Idempotent-Replayed")).as(name(instance)).isEmpty();
                HttpResponse<String> replay = post(instance, path, key + "-" + name(instance), note);
                assertThat(replay.body()).isEqualTo(again.body());
                assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
            }
            assertThat(Expiring.executions(note)).as(path).isEqualTo(5);
        }
    }

    @Test
    void aKeyUsedAgainAfterRemovalWithAnotherBodyRunsAsNewAndTheOldBodyIsThenRefused() throws Exception {
        for (String path : List.of(Expiring.PATH, Expiring.INTENT_PATH)) {
            for (ConfigurableApplicationContext instance : instances()) {
                String key = UUID.randomUUID().toString();
                String note = "reused-" + key;
                String other = "other-" + key;
                assertThat(post(instance, path, key, note).statusCode()).isEqualTo(201);
                expire();
                cleanup();

                HttpResponse<String> ran = post(instance, path, key, other);
                assertThat(ran.statusCode()).as("%s %s: %s", path, name(instance), ran.body()).isEqualTo(201);
                assertThat(ran.headers().firstValue("Idempotent-Replayed")).isEmpty();
                // the key is the other request's now: the old body is refused on every instance, from memory or not
                for (ConfigurableApplicationContext any : instances()) {
                    HttpResponse<String> old = post(any, path, key, note);
                    assertThat(old.statusCode()).as("%s %s then %s: %s", path, name(instance), name(any), old.body())
                            .isEqualTo(422);
                }
                assertThat(Expiring.executions(note)).isEqualTo(1);
                assertThat(Expiring.executions(other)).isEqualTo(1);
            }
        }
    }

    @Test
    void aKeyUsedAgainOnAnotherInstanceAfterRemovalIsReplayedThereAndTheOldAnswerOnlyFromTheMemoryThatKeptIt()
            throws Exception {
        for (String path : List.of(Expiring.PATH, Expiring.INTENT_PATH)) {
            String key = UUID.randomUUID().toString();
            String note = "kept-" + key;
            String other = "new-" + key;
            HttpResponse<String> old = post(cached, path, key, note);
            assertThat(old.statusCode()).isEqualTo(201);
            expire();
            cleanup();
            HttpResponse<String> ran = post(plain, path, key, other);
            assertThat(ran.statusCode()).as(ran.body()).isEqualTo(201);
            assertThat(ran.headers().firstValue("Idempotent-Replayed")).isEmpty();

            // docs/retention.md: the instance that kept the old answer replays it to its own request for minutes at
            // most, and a new request with the key is judged by the database: replayed, not refused
            HttpResponse<String> fromMemory = post(cached, path, key, note);
            assertThat(fromMemory.statusCode()).isEqualTo(201);
            assertThat(fromMemory.body()).isEqualTo(old.body());
            for (ConfigurableApplicationContext instance : instances()) {
                HttpResponse<String> replay = post(instance, path, key, other);
                assertThat(replay.statusCode()).as("%s %s: %s", path, name(instance), replay.body()).isEqualTo(201);
                assertThat(replay.body()).isEqualTo(ran.body());
                assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
            }
            // having seen the key held by the new request, the instance gives the old answer up
            HttpResponse<String> refused = post(cached, path, key, note);
            assertThat(refused.statusCode()).as("%s: %s", path, refused.body()).isEqualTo(422);
            assertThat(post(remembering, path, key, note).statusCode()).isEqualTo(422);
            assertThat(Expiring.executions(note)).isEqualTo(1);
            assertThat(Expiring.executions(other)).isEqualTo(1);
        }
    }

    @Test
    void aRetryWhileTheCleanupsDeleteIsUncommittedIsReplayedThenRunsOnceItCommitted() throws Exception {
        for (String path : List.of(Expiring.PATH, Expiring.INTENT_PATH)) {
            for (ConfigurableApplicationContext instance : instances()) {
                String key = UUID.randomUUID().toString();
                String note = "racing-" + key;
                HttpResponse<String> created = post(instance, path, key, note);
                assertThat(created.statusCode()).isEqualTo(201);
                expire();
                try (Connection connection = DriverManager.getConnection(database.url(), database.user(),
                        database.password());
                     Statement statement = connection.createStatement()) {
                    connection.setAutoCommit(false);
                    // the cleanup's batch: rows locked and deleted, not yet committed
                    statement.execute("delete from idempotency_keys where idempotency_key = '" + key + "'");
                    // a claim that waited for the row would wait until the delete commits, after these requests:
                    // it would be answered 409 when its wait ran out, so 201 also says it did not wait
                    HttpResponse<String> during = post(instance, path, key, note);
                    assertThat(during.statusCode()).as("%s %s: %s", path, name(instance), during.body())
                            .isEqualTo(201);
                    assertThat(during.body()).isEqualTo(created.body());
                    HttpResponse<String> otherDuring = post(instance, path, key, "other-" + note);
                    assertThat(otherDuring.statusCode()).as("%s %s: %s", path, name(instance), otherDuring.body())
                            .isEqualTo(422);
                    connection.commit();
                }
                if (instance != cached) {
                    HttpResponse<String> after = post(instance, path, key, note);
                    assertThat(after.statusCode()).as("%s %s: %s", path, name(instance), after.body()).isEqualTo(201);
                    assertThat(after.headers().firstValue("Idempotent-Replayed")).isEmpty();
                    assertThat(Expiring.executions(note)).isEqualTo(2);
                }
            }
        }
    }

    @Test
    void anAbandonedIntentClaimPastItsExpiryIsKeptByTheCleanupAndResolvedByTheRetry() throws Exception {
        for (ConfigurableApplicationContext instance : instances()) {
            String key = UUID.randomUUID().toString();
            String note = "abandoned-" + key;
            assertThat(post(instance, Expiring.INTENT_PATH, key, note).statusCode()).isEqualTo(201);
            // as if the handler had died after its claim: PROCESSING, lease and expiry both long past
            database.queryString("update idempotency_keys set status = 'PROCESSING', response_status = null,"
                    + " response_headers = null, response_body = null, locked_until = now() - interval '1 hour',"
                    + " expires_at = now() - interval '1 hour' where idempotency_key = '" + key + "'");
            cleanup();
            assertThat(TestDatabases.keyRows(database, key)).as("a PROCESSING record is never cleaned up")
                    .isEqualTo(1);
            HttpResponse<String> retry = post(instance, Expiring.INTENT_PATH, key, note);
            // the memory of an instance that kept the answer replays it; a claim takes the stale one over
            assertThat(retry.statusCode()).as("%s: %s", name(instance), retry.body()).isEqualTo(201);
            if (instance != cached) {
                assertThat(retry.headers().firstValue("Idempotent-Replayed")).as(name(instance)).isEmpty();
                assertThat(Expiring.executions(note)).isEqualTo(2);
                // a takeover is no new claim: the record keeps the expiry it was claimed with (docs/retention.md)
                assertThat(database.queryString("select status from idempotency_keys where idempotency_key = '"
                        + key + "'")).isEqualTo("SUCCEEDED");
            }
        }
    }

    @Test
    void anExpiredFailedIntentClaimRefusesAnotherBodyAndIsTakenOverAfreshAlsoWhileTheCleanupDeletesIt()
            throws Exception {
        for (ConfigurableApplicationContext instance : instances()) {
            for (boolean deleting : new boolean[] {false, true}) {
                String key = UUID.randomUUID().toString();
                String note = "failed-" + key;
                HttpResponse<String> declined = post(instance, Expiring.INTENT_PATH, key, note, "definite");
                assertThat(declined.statusCode()).as(declined.body()).isEqualTo(500);
                database.queryString("update idempotency_keys set expires_at = now() - interval '1 second'"
                        + " where idempotency_key = '" + key + "' and status = 'FAILED'");

                HttpResponse<String> other = post(instance, Expiring.INTENT_PATH, key, "other-" + note);
                assertThat(other.statusCode()).as("%s: %s", name(instance), other.body()).isEqualTo(422);

                HttpResponse<String> retry;
                if (deleting) {
                    // the cleanup's batch holds the row, deleted and not yet committed, while the retry takes it over
                    try (Connection connection = DriverManager.getConnection(database.url(), database.user(),
                            database.password());
                         Statement statement = connection.createStatement()) {
                        connection.setAutoCommit(false);
                        statement.execute("delete from idempotency_keys where idempotency_key = '" + key + "'");
                        Thread committer = new Thread(() -> {
                            try {
                                database.awaitLockWaiter(PATIENCE);
                                Thread.sleep(200);
                                connection.commit();
                            } catch (Exception e) {
                                throw new IllegalStateException(e);
                            }
                        });
                        committer.start();
                        retry = post(instance, Expiring.INTENT_PATH, key, note);
                        committer.join(PATIENCE.toMillis());
                    }
                } else {
                    retry = post(instance, Expiring.INTENT_PATH, key, note);
                }
                assertThat(retry.statusCode()).as("%s deleting %s: %s", name(instance), deleting, retry.body())
                        .isEqualTo(201);
                assertThat(retry.headers().firstValue("Idempotent-Replayed")).isEmpty();
                assertThat(database.queryString("select status || ' ' || (expires_at > now() + interval '29 days')"
                        + " from idempotency_keys where idempotency_key = '" + key + "'"))
                        .as("claimed afresh, with the TTL of that moment").isEqualTo("SUCCEEDED true");
                assertThat(Expiring.executions(note)).isEqualTo(1);
            }
        }
    }

    @Test
    void theExpiryIsTheDatabasesClaimTimePlusTheTtl() throws Exception {
        for (String path : List.of(Expiring.PATH, Expiring.INTENT_PATH)) {
            String key = UUID.randomUUID().toString();
            assertThat(post(plain, path, key, "clock-" + key).statusCode()).isEqualTo(201);
            assertThat(database.queryString("select (expires_at - created_at = interval '30 days')"
                    + " and created_at between now() - interval '1 minute' and now()"
                    + " from idempotency_keys where idempotency_key = '" + key + "'")).isEqualTo("t");
        }
    }

    private List<ConfigurableApplicationContext> instances() {
        return List.of(cached, remembering, plain);
    }

    private String name(ConfigurableApplicationContext instance) {
        return instance == cached ? "cached" : instance == remembering ? "remembering" : "plain";
    }

    /** Every record of the test's endpoints expires, as it would after the TTL. */
    private void expire() {
        database.queryString("update idempotency_keys set expires_at = now() - interval '1 second'"
                + " where status <> 'PROCESSING'");
    }

    /** What the scheduled cleanup does, once. */
    private int cleanup() {
        return cached.getBean(IdempotencyStore.class).deleteExpired(1000);
    }

    private ConfigurableApplicationContext start(String... more) {
        List<String> args = new ArrayList<>();
        database.springPropertyValues().forEach(value -> args.add("--" + value));
        args.add("--server.port=0");
        args.add("--spring.main.banner-mode=off");
        args.add("--idempotency.retention.cleanup.enabled=false");
        args.add("--idempotency.sweeper.enabled=false");
        properties().forEach(property -> args.add("--" + property));
        for (String property : more) {
            args.add("--" + property);
        }
        return new SpringApplicationBuilder(TestApplication.class, Expiring.class).run(args.toArray(String[]::new));
    }

    private HttpResponse<String> post(ConfigurableApplicationContext instance, String path, String key, String note)
            throws Exception {
        return post(instance, path, key, note, "none");
    }

    private HttpResponse<String> post(ConfigurableApplicationContext instance, String path, String key, String note,
                                      String fail) throws Exception {
        int port = ((WebServerApplicationContext) instance).getWebServer().getPort();
        HttpRequest request = HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                .timeout(PATIENCE)
                .header("Content-Type", "application/json")
                .header("Idempotency-Key", key)
                .header("X-Fail", fail)
                .POST(HttpRequest.BodyPublishers.ofString("{\"note\":\"" + note + "\"}", StandardCharsets.UTF_8))
                .build();
        return http.send(request, HttpResponse.BodyHandlers.ofString());
    }

    /** Endpoints that count their executions and write a row each. */
    @RestController
    static class Expiring {

        static final String PATH = "/expiring/orders";
        static final String INTENT_PATH = "/expiring/charges";
        private static final Map<String, AtomicInteger> EXECUTIONS = new ConcurrentHashMap<>();

        private final JdbcClient jdbc;

        Expiring(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        static int executions(String note) {
            AtomicInteger count = EXECUTIONS.get(note);
            return count == null ? 0 : count.get();
        }

        @PostMapping(PATH)
        @Idempotent
        @ResponseStatus(HttpStatus.CREATED)
        public Map<String, Object> create(@RequestBody Map<String, String> body) {
            return write(body.get("note"));
        }

        @PostMapping(INTENT_PATH)
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "1s")
        @ResponseStatus(HttpStatus.CREATED)
        public Map<String, Object> charge(@RequestBody Map<String, String> body,
                                          @RequestHeader(name = "X-Fail", defaultValue = "none") String fail) {
            if (fail.equals("definite")) {
                throw new DefiniteFailureException("declined before charging");
            }
            return write(body.get("note"));
        }

        private Map<String, Object> write(String note) {
            EXECUTIONS.computeIfAbsent(note, n -> new AtomicInteger()).incrementAndGet();
            long id = jdbc.sql("insert into orders (note) values (?) returning id").param(note).query(Long.class)
                    .single();
            return Map.of("id", id, "note", note);
        }
    }
}
