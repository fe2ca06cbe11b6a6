package io.idempotency.spring;

import io.idempotency.core.DownstreamKeys;
import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyContext;
import io.idempotency.core.ScopedKey;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.ApplicationEventPublisher;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Import;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.stereotype.Component;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.transaction.event.TransactionPhase;
import org.springframework.transaction.event.TransactionalEventListener;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;
import tools.jackson.databind.JsonNode;
import tools.jackson.databind.json.JsonMapper;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * What the README and docs/side-effects.md promise a handler of {@link IdempotencyContext}: with a key, the record's
 * identity as stored (the caller too, as its digest when the name is longer than its column) and a downstream key,
 * in the default mode as in intent-first, that a before-commit listener writing an outbox row reads as well; without
 * the optional key, no context: {@code current()} is empty and {@code require()} throws.
 */
@Tag("container")
@SpringBootTest(classes = IdempotencyContextIntegrationTest.App.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = "idempotency.downstream-key-secret=" + IdempotencyContextIntegrationTest.SECRET)
class IdempotencyContextIntegrationTest {

    static final String SECRET = "context-test-secret";

    private static final TestPostgres.Database DATABASE = TestDatabases.withOrders();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import({ContextController.class, Outbox.class})
    static class App {

        /** The caller is what the client names in X-Caller (anonymous without it). */
        @Bean
        CallerResolver callers() {
            return request -> request.getHeader("X-Caller") == null ? "" : request.getHeader("X-Caller");
        }
    }

    record Written(String note) {
    }

    @RestController
    public static class ContextController {

        private final JdbcClient jdbc;
        private final ApplicationEventPublisher events;

        public ContextController(JdbcClient jdbc, ApplicationEventPublisher events) {
            this.jdbc = jdbc;
            this.events = events;
        }

        @PostMapping("/context/keyed")
        @Idempotent
        public Map<String, Object> keyed(@RequestBody Map<String, String> request) {
            jdbc.sql("insert into orders (note) values (?)").param(request.get("note")).update();
            events.publishEvent(new Written(request.get("note")));
            IdempotencyContext context = IdempotencyContext.require();
            Map<String, Object> seen = new LinkedHashMap<>();
            seen.put("caller", context.key().caller());
            seen.put("scope", context.key().scope());
            seen.put("key", context.key().key());
            seen.put("mode", context.mode().name());
            seen.put("downstreamKey", context.downstreamKey());
            seen.put("run", UUID.randomUUID().toString()); // tells a replay from a second run
            return seen;
        }

        @PostMapping("/context/optional")
        @Idempotent(keyRequired = false)
        public Map<String, Object> optional(@RequestBody Map<String, String> request) {
            jdbc.sql("insert into orders (note) values (?)").param(request.get("note")).update();
            String required;
            try {
                required = IdempotencyContext.require().key().key();
            } catch (IllegalStateException e) {
                required = "threw " + e.getClass().getSimpleName();
            }
            return Map.of("present", IdempotencyContext.current().isPresent(), "require", required);
        }
    }

    /** An outbox row written at the commit of the request, with the downstream key the receiver deduplicates on. */
    @Component
    public static class Outbox {

        private final JdbcClient jdbc;

        public Outbox(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        @TransactionalEventListener(phase = TransactionPhase.BEFORE_COMMIT)
        void write(Written event) {
            jdbc.sql("insert into orders (note) values (?)")
                    .param("outbox " + event.note() + " " + IdempotencyContext.require().downstreamKey()).update();
        }
    }

    @LocalServerPort
    int port;

    private final HttpClient http = HttpClient.newHttpClient();

    @Test
    void aHandlerSeesItsRecordsIdentityAndADownstreamKeyInTheDefaultModeAsABeforeCommitListenerDoes()
            throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "context-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<String> first = post("/context/keyed", key, null, body);
        HttpResponse<String> replay = post("/context/keyed", key, null, body);

        assertThat(first.statusCode()).isEqualTo(200);
        JsonNode seen = JsonMapper.builder().build().readTree(first.body());
        assertThat(seen.get("caller").asString()).as("anonymous").isEmpty();
        assertThat(seen.get("scope").asString()).isEqualTo("POST /context/keyed");
        assertThat(seen.get("key").asString()).isEqualTo(key);
        assertThat(seen.get("mode").asString()).isEqualTo("ONE_TRANSACTION");
        String downstreamKey = seen.get("downstreamKey").asString();
        assertThat(downstreamKey).as("HMAC-SHA256 of caller, scope and key, base64url")
                .isEqualTo(new DownstreamKeys(SECRET).derive(new ScopedKey("", "POST /context/keyed", key)))
                .matches("[A-Za-z0-9_-]{43}").doesNotContain(key);
        assertThat(TestDatabases.rows(DATABASE, "outbox " + note + " " + downstreamKey))
                .as("the before-commit listener's row, with the handler's downstream key").isEqualTo(1);

        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(TestDatabases.rows(DATABASE, note)).isEqualTo(1);
        assertThat(TestDatabases.rows(DATABASE, "outbox " + note + " " + downstreamKey))
                .as("a replay writes no second outbox row").isEqualTo(1);
    }

    @Test
    void theCallerInTheContextIsTheCallerAsStoredADigestForANameLongerThanItsColumn() throws Exception {
        String key = UUID.randomUUID().toString();
        String name = "tenant-" + "x".repeat(300);
        String body = "{\"note\":\"context-long-caller-" + key + "\"}";

        HttpResponse<String> answer = post("/context/keyed", key, name, body);

        assertThat(answer.statusCode()).isEqualTo(200);
        String caller = JsonMapper.builder().build().readTree(answer.body()).get("caller").asString();
        assertThat(caller).startsWith("sha256:").isEqualTo(CallerResolver.namespace(name));
        assertThat(DATABASE.queryString("select caller from idempotency_keys where idempotency_key = '" + key + "'"))
                .isEqualTo(caller);
    }

    @Test
    void withoutItsOptionalKeyARequestRunsWithNoContext() throws Exception {
        String note = "context-no-key-" + UUID.randomUUID();

        HttpResponse<String> answer = post("/context/optional", null, null, "{\"note\":\"" + note + "\"}");

        assertThat(answer.statusCode()).isEqualTo(200);
        JsonNode seen = JsonMapper.builder().build().readTree(answer.body());
        assertThat(seen.get("present").asBoolean()).as("IdempotencyContext.current() is empty").isFalse();
        assertThat(seen.get("require").asString()).isEqualTo("threw IllegalStateException");
        assertThat(TestDatabases.rows(DATABASE, note)).as("the handler ran").isEqualTo(1);

        String key = UUID.randomUUID().toString();
        HttpResponse<String> keyed = post("/context/optional", key, null, "{\"note\":\"" + note + "-keyed\"}");
        JsonNode withKey = JsonMapper.builder().build().readTree(keyed.body());
        assertThat(withKey.get("present").asBoolean()).as("with its key, the request has a context").isTrue();
        assertThat(withKey.get("require").asString()).isEqualTo(key);
    }

    private HttpResponse<String> post(String path, String key, String caller, String body) throws Exception {
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                .header("Content-Type", "application/json").POST(HttpRequest.BodyPublishers.ofString(body));
        if (key != null) {
            request.header("Idempotency-Key", key);
        }
        if (caller != null) {
            request.header("X-Caller", caller);
        }
        return http.send(request.build(), HttpResponse.BodyHandlers.ofString());
    }
}
