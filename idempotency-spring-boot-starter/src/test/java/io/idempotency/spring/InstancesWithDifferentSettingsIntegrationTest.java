package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.web.server.context.WebServerApplicationContext;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Import;
import org.springframework.http.HttpStatus;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.ResponseStatus;
import org.springframework.web.bind.annotation.RestController;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Two releases of one application on one table, as during a rolling deploy: the later one names a route's path
 * variable otherwise, and fingerprints bodies as bytes. A retry that reaches the other release is answered by what
 * the two have in common: the scope (the route template as written, unless the endpoint names one) and the
 * fingerprint.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class InstancesWithDifferentSettingsIntegrationTest {

    private final HttpClient http = HttpClient.newHttpClient();
    private TestPostgres.Database database;
    private ConfigurableApplicationContext earlier;
    private ConfigurableApplicationContext later;

    @BeforeAll
    void startBothReleases() {
        database = TestPostgres.newDatabase();
        earlier = start(EarlierRelease.class);
        later = start(LaterRelease.class, "idempotency.body-fingerprint=bytes");
    }

    @AfterAll
    void stopThem() {
        for (ConfigurableApplicationContext context : new ConfigurableApplicationContext[] {earlier, later}) {
            if (context != null) {
                context.close();
            }
        }
    }

    @Test
    void aRetryOnARouteWhoseVariableWasRenamedRunsAgainUnlessTheEndpointNamesTheFormerScope() throws Exception {
        String key = UUID.randomUUID().toString();
        HttpResponse<String> first = post(earlier, "/renamed/7", key, "{}");
        HttpResponse<String> retry = post(later, "/renamed/7", key, "{}");

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(retry.statusCode()).isEqualTo(201);
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).as("not a replay").isEmpty();
        assertThat(List.of(first.body(), retry.body())).as("the handler ran on both").containsExactly("run 1",
                "run 2");
        assertThat(database.queryString("select string_agg(scope, ', ' order by scope) from idempotency_keys"
                + " where idempotency_key = '" + key + "'"))
                .isEqualTo("POST /renamed/{id}, POST /renamed/{orderId}");

        String pinnedKey = UUID.randomUUID().toString();
        HttpResponse<String> pinned = post(earlier, "/pinned/7", pinnedKey, "{}");
        HttpResponse<String> pinnedRetry = post(later, "/pinned/7", pinnedKey, "{}");
        assertThat(pinnedRetry.statusCode()).isEqualTo(201);
        assertThat(pinnedRetry.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(pinnedRetry.body()).isEqualTo(pinned.body()).isEqualTo("pinned 1");
    }

    @Test
    void aJsonBodyRetriedOnAnInstanceThatFingerprintsItOtherwiseIsRefusedNotRunAgain() throws Exception {
        for (ConfigurableApplicationContext[] order : List.of(new ConfigurableApplicationContext[] {earlier, later},
                new ConfigurableApplicationContext[] {later, earlier})) {
            String key = UUID.randomUUID().toString();
            int before = Releases.BODIES.get();
            HttpResponse<String> first = post(order[0], "/bodies", key, "{\"b\": 1, \"a\": 2}");
            HttpResponse<String> retry = post(order[1], "/bodies", key, "{\"b\": 1, \"a\": 2}");

            assertThat(first.statusCode()).isEqualTo(201);
            assertThat(retry.statusCode()).as("the same bytes, fingerprinted otherwise").isEqualTo(422);
            assertThat(Releases.BODIES.get() - before).as("runs").isEqualTo(1);
        }
    }

    /**
     * A record the later release left with a status the earlier one does not know (the later release's migration
     * widened the table's check first): a retry reaching the earlier release is answered 503, as when the database
     * fails the claim, and not run; the record stays as it is for the release that knows it.
     */
    @Test
    void aRetryOfARecordWithAStatusOfTheLaterReleaseIsRefusedNotRun() throws Exception {
        database.queryString("alter table idempotency_keys drop constraint idempotency_keys_status_check");
        database.queryString("alter table idempotency_keys add constraint idempotency_keys_status_check"
                + " check (status in ('PROCESSING', 'SUCCEEDED', 'FAILED', 'CANCELLED'))");
        String key = UUID.randomUUID().toString();
        HttpResponse<String> first = post(later, "/refunds", key, "{}");
        database.queryString("update idempotency_keys set status = 'CANCELLED', response_status = null,"
                + " response_headers = null, response_body = null where idempotency_key = '" + key + "'");
        int runs = Releases.REFUNDS.get();

        HttpResponse<String> retry = post(earlier, "/refunds", key, "{}");

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(retry.statusCode()).as(retry.body()).isEqualTo(503);
        assertThat(retry.headers().firstValue("Content-Type")).hasValue("application/problem+json");
        assertThat(retry.headers().firstValue("Retry-After")).isPresent();
        assertThat(Releases.REFUNDS.get()).as("runs after the first").isEqualTo(runs);
        assertThat(database.queryString("select status from idempotency_keys where idempotency_key = '" + key + "'"))
                .isEqualTo("CANCELLED");
    }

    private ConfigurableApplicationContext start(Class<?> release, String... properties) {
        List<String> args = new ArrayList<>();
        database.springPropertyValues().forEach(value -> args.add("--" + value));
        args.add("--server.port=0");
        args.add("--spring.main.banner-mode=off");
        for (String property : properties) {
            args.add("--" + property);
        }
        return new SpringApplicationBuilder(release).run(args.toArray(String[]::new));
    }

    private HttpResponse<String> post(ConfigurableApplicationContext instance, String path, String key, String body)
            throws Exception {
        int port = ((WebServerApplicationContext) instance).getWebServer().getPort();
        return http.send(HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                .header("Content-Type", "application/json")
                .header("Idempotency-Key", key)
                .POST(HttpRequest.BodyPublishers.ofString(body, StandardCharsets.UTF_8))
                .build(), HttpResponse.BodyHandlers.ofString());
    }

    /** What the handlers of both releases count. */
    static final class Releases {
        static final AtomicInteger RENAMED = new AtomicInteger();
        static final AtomicInteger PINNED = new AtomicInteger();
        static final AtomicInteger BODIES = new AtomicInteger();
        static final AtomicInteger REFUNDS = new AtomicInteger();
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import({EarlierController.class, BodiesController.class})
    static class EarlierRelease {
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import({LaterController.class, BodiesController.class})
    static class LaterRelease {
    }

    /** The same in both releases: what differs is how each fingerprints the body, and which statuses each knows. */
    @RestController
    static class BodiesController {

        @PostMapping("/bodies")
        @Idempotent
        @ResponseStatus(HttpStatus.CREATED)
        String bodies(@RequestBody String body) {
            return "body " + Releases.BODIES.incrementAndGet();
        }

        @PostMapping("/refunds")
        @Idempotent
        @ResponseStatus(HttpStatus.CREATED)
        String refunds() {
            return "refund " + Releases.REFUNDS.incrementAndGet();
        }
    }

    @RestController
    static class EarlierController {

        @PostMapping("/renamed/{id}")
        @Idempotent
        @ResponseStatus(HttpStatus.CREATED)
        String renamed(@PathVariable long id) {
            return "run " + Releases.RENAMED.incrementAndGet();
        }

        @PostMapping("/pinned/{id}")
        @Idempotent
        @ResponseStatus(HttpStatus.CREATED)
        String pinned(@PathVariable long id) {
            return "pinned " + Releases.PINNED.incrementAndGet();
        }
    }

    /** The later release: the route's variable renamed, and on one route the scope the earlier release had. */
    @RestController
    static class LaterController {

        @PostMapping("/renamed/{orderId}")
        @Idempotent
        @ResponseStatus(HttpStatus.CREATED)
        String renamed(@PathVariable long orderId) {
            return "run " + Releases.RENAMED.incrementAndGet();
        }

        @PostMapping("/pinned/{orderId}")
        @Idempotent(scope = "POST /pinned/{id}")
        @ResponseStatus(HttpStatus.CREATED)
        String pinned(@PathVariable long orderId) {
            return "pinned " + Releases.PINNED.incrementAndGet();
        }
    }
}
