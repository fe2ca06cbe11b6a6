package io.idempotency.spring;

import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.Idempotent;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StoredResponse;
import io.idempotency.testkit.Await;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.web.server.context.WebServerApplicationContext;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Import;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestHeader;
import org.springframework.web.bind.annotation.RestController;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.IntStream;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * An application of several contexts ({@code SpringApplicationBuilder.parent(...).child(...)}): a parent without a
 * web server holds the DataSource and, by its own auto-configuration, the starter's engine and store, which web child
 * contexts on ports of their own reuse while each runs the starter's web side (filter, advice, startup checks).
 */
@Tag("container")
class ContextHierarchyIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();
    private static final AtomicInteger RUNS = new AtomicInteger();

    @SpringBootConfiguration
    @EnableAutoConfiguration
    static class Parent {
        /** Finds every charge made, and answers with the links of the gateway's answer: more than 8 KB of headers. */
        @Bean
        StaleClaimResolver gatewayResolver() {
            List<StoredResponse.Header> links = IntStream.range(0, 400)
                    .mapToObj(i -> new StoredResponse.Header("Link", "</gateway/charges/7/events/" + i
                            + ">; rel=\"item\""))
                    .toList();
            return claim -> StaleClaimResolver.Resolution.complete(new StoredResponse(201, links,
                    "{\"resolved\":true}".getBytes(StandardCharsets.UTF_8)));
        }
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(ChargesController.class)
    static class Api {
    }

    @RestController
    static class ChargesController {
        @PostMapping("/charges")
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "200ms")
        public String charge(@RequestBody String body, @RequestHeader(name = "X-Fail", defaultValue = "no") String fail) {
            int run = RUNS.incrementAndGet();
            if (fail.equals("unknown")) {
                throw new IllegalStateException("gateway timed out: did the charge happen?");
            }
            return "charge " + run;
        }
    }

    /** A parent's bean with an {@code @Idempotent} method, which a child's handler calls. */
    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(Ledger.class)
    static class ParentWithLedger {
    }

    static class Ledger {
        static final AtomicInteger ENTRIES = new AtomicInteger();

        @Idempotent
        public String record() {
            return "entry " + ENTRIES.incrementAndGet();
        }
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(LedgerController.class)
    static class LedgerApi {
    }

    @RestController
    static class LedgerController {
        private final Ledger ledger;

        LedgerController(Ledger ledger) {
            this.ledger = ledger;
        }

        @PostMapping("/charges")
        public String record() {
            try {
                return ledger.record();
            } catch (IllegalStateException refused) {
                return refused.getMessage();
            }
        }
    }

    /**
     * The parent serves no requests, so it refuses calls of its beans' {@code @Idempotent} methods made where no
     * request is served (its listener's), and no web context's advice reaches them; one made while a child serves a
     * request is not refused (the refusal, whose advisor AspectJ's auto-proxy creator applies to a child's beans too,
     * must not refuse the child's handlers), and runs without the annotation's effect.
     */
    @Test
    void anIdempotentMethodOfTheParentsBeanIsRefusedOutsideRequestsOnly() throws Exception {
        SpringApplicationBuilder parent = parent(ParentWithLedger.class);
        try (ConfigurableApplicationContext api = parent.child(LedgerApi.class).web(WebApplicationType.SERVLET)
                .properties("server.port=0").run();
             ConfigurableApplicationContext ignored = parent.context()) {
            Ledger ledger = parent.context().getBean(Ledger.class);
            Throwable outside = java.util.concurrent.CompletableFuture.supplyAsync(() -> org.assertj.core.api
                    .Assertions.catchThrowable(ledger::record)).get();
            assertThat(outside).isInstanceOf(IllegalStateException.class)
                    .hasMessageContaining("called outside any HTTP request");
            assertThat(Ledger.ENTRIES).hasValue(0);

            HttpResponse<String> answer = post(api, UUID.randomUUID().toString(), "a");

            assertThat(answer.body()).isEqualTo("entry 1");
        }
    }

    @Test
    void eachChildAnswersFromTheSharedEngineAndClosingOneLeavesTheOtherWorking() throws Exception {
        SpringApplicationBuilder parent = parent();
        try (ConfigurableApplicationContext first = child(parent);
             ConfigurableApplicationContext second = child(parent);
             ConfigurableApplicationContext ignored = parent.context()) {
            assertThat(second.getParent()).isSameAs(first.getParent()).isSameAs(parent.context());
            String key = UUID.randomUUID().toString();
            HttpResponse<String> ran = post(first, key, "a");
            HttpResponse<String> replayed = post(first, key, "a");
            HttpResponse<String> otherBody = post(first, key, "b");
            assertThat(ran.statusCode()).isEqualTo(200);
            assertThat(replayed.body()).isEqualTo(ran.body());
            assertThat(replayed.headers().firstValue("Idempotent-Replayed")).hasValue("true");
            assertThat(otherBody.statusCode()).isEqualTo(422);

            first.close();
            int runs = RUNS.get();
            String another = UUID.randomUUID().toString();
            HttpResponse<String> afterClose = post(second, another, "a");
            HttpResponse<String> replayAfterClose = post(second, another, "a");
            HttpResponse<String> sameKeyOtherChild = post(second, key, "a");
            assertThat(afterClose.statusCode()).isEqualTo(200);
            assertThat(replayAfterClose.body()).isEqualTo(afterClose.body());
            assertThat(sameKeyOtherChild.body()).as("the same endpoint's record, served by the other child")
                    .isEqualTo(ran.body());
            assertThat(RUNS.get() - runs).isEqualTo(1);
        }
    }

    @Test
    void aResolversAnswerWithMoreHeadersThanAChildsServerSendsIsNotStored() throws Exception {
        // the engine is the parent's; the servers that send its answers are the children's: the first sends 8 KB of
        // headers (Tomcat's default, Jetty's most), the other is set to send more on Tomcat, and either may be asked
        // for the record again
        SpringApplicationBuilder parent = parent();
        try (ConfigurableApplicationContext api = child(parent);
             ConfigurableApplicationContext roomy = child(parent, "server.tomcat.max-http-response-header-size=64KB");
             ConfigurableApplicationContext ignored = parent.context()) {
            assertThat(roomy.getParent()).isSameAs(api.getParent()).isSameAs(parent.context());
            String key = UUID.randomUUID().toString();
            assertThat(post(api, key, "a", "X-Fail", "unknown").statusCode()).isEqualTo(500);
            awaitLeaseExpired(key);

            HttpResponse<String> retry = post(api, key, "a");

            assertThat(status(key)).as("the resolver's answer (the retry answered %s), which the first child's server"
                    + " cannot send, is not stored", retry.statusCode()).isEqualTo("PROCESSING");
            assertThat(retry.statusCode()).isEqualTo(500);
        }
    }

    @Test
    void aChildThatSetsTheRetentionOfTheParentsEngineOtherwiseDoesNotStart() throws Exception {
        // a payment API whose clients retry for up to 60 days, declared in the context of its controllers: the engine
        // that stores its records is the parent's, made with the parent's settings (a TTL of 30 days)
        try (ConfigurableApplicationContext parent = parent().run()) {
            ConfigurableApplicationContext started;
            try {
                started = new SpringApplicationBuilder(Api.class).parent(parent).web(WebApplicationType.SERVLET)
                        .properties("server.port=0", "idempotency.retention.ttl=90d",
                                "idempotency.retention.max-retry-window=60d")
                        .run();
            } catch (RuntimeException e) {
                assertThat(causes(e)).anySatisfy(cause -> assertThat(cause)
                        .isInstanceOf(IdempotencyConfigurationException.class)
                        .hasMessageContaining("idempotency.retention.ttl (90d)")
                        .hasMessageContaining("30d"));
                return;
            }
            try (ConfigurableApplicationContext api = started) {
                String key = UUID.randomUUID().toString();
                assertThat(post(api, key, "a").statusCode()).isEqualTo(200);
                long days = DATABASE.queryLong("select extract(day from expires_at - created_at)::bigint from"
                        + " idempotency_keys where idempotency_key = '" + key + "'");
                assertThat(days).as("days the record is kept, of the 90 the child set").isEqualTo(90);
            }
        }
    }

    @Test
    void aChildThatSetsAnyOtherSettingOfTheParentsEngineOtherwiseDoesNotStartAndNamesIt() throws Exception {
        // each is a setting the engine was made with, set in the child to other than the parent's defaults
        List<String> otherwise = List.of("idempotency.in-flight-wait=3s", "idempotency.max-waiting-duplicates=7",
                "idempotency.max-stored-body-size=2MB",
                "idempotency.replayed-headers=Content-Type,Content-Encoding,Location,X-Charge-Id",
                "idempotency.downstream-key-secret=child-secret-9f3a", "idempotency.replay-cache.max-entries=5",
                "idempotency.replay-cache.max-body-size=1KB", "idempotency.replay-cache.max-total-size=1MB",
                "idempotency.replay-cache.max-age=1m", "idempotency.replay-cache.completed-keys=10");
        try (ConfigurableApplicationContext parent = parent().run()) {
            for (String setting : otherwise) {
                String property = setting.substring(0, setting.indexOf('='));
                String value = setting.substring(setting.indexOf('=') + 1);
                Throwable refused = null;
                try (ConfigurableApplicationContext ignored = new SpringApplicationBuilder(Api.class).parent(parent)
                        .web(WebApplicationType.SERVLET).properties("server.port=0", setting).run()) {
                    // started: asserted below
                } catch (RuntimeException e) {
                    refused = causes(e).stream().filter(IdempotencyConfigurationException.class::isInstance)
                            .findFirst().orElse(e);
                }
                assertThat(refused).as("a child with %s", setting).isInstanceOf(IdempotencyConfigurationException.class)
                        .hasMessageContaining(property + (property.endsWith("secret") ? " is set" : " ("))
                        .hasMessageContaining("its parent");
                if (property.endsWith("secret")) {
                    assertThat(refused.getMessage()).as("the refusal names the secret's value").doesNotContain(value);
                }
            }
            // the same headers written otherwise are the same setting
            try (ConfigurableApplicationContext api = new SpringApplicationBuilder(Api.class).parent(parent)
                    .web(WebApplicationType.SERVLET).properties("server.port=0", "idempotency.replayed-headers="
                            + String.join(",", reversedLowerCase(new IdempotencyProperties().getReplayedHeaders())))
                    .run()) {
                assertThat(post(api, UUID.randomUUID().toString(), "a").statusCode()).isEqualTo(200);
            }
        }
    }

    private static List<String> reversedLowerCase(List<String> names) {
        List<String> reversed = new java.util.ArrayList<>(names.stream().map(n -> n.toLowerCase(java.util.Locale.ROOT))
                .toList());
        java.util.Collections.reverse(reversed);
        return reversed;
    }

    private static List<Throwable> causes(Throwable failure) {
        List<Throwable> causes = new java.util.ArrayList<>();
        for (Throwable cause = failure; cause != null && !causes.contains(cause); cause = cause.getCause()) {
            causes.add(cause);
        }
        return causes;
    }

    private static SpringApplicationBuilder parent() {
        return parent(Parent.class);
    }

    private static SpringApplicationBuilder parent(Class<?> source) {
        return new SpringApplicationBuilder(source).web(WebApplicationType.NONE)
                .properties(DATABASE.springPropertyValues().toArray(String[]::new))
                .properties("idempotency.sweeper.enabled=false");
    }

    private static ConfigurableApplicationContext child(SpringApplicationBuilder parent, String... properties) {
        return parent.child(Api.class).web(WebApplicationType.SERVLET).properties("server.port=0")
                .properties(properties).run();
    }

    private static HttpResponse<String> post(ConfigurableApplicationContext context, String key, String body,
                                             String... headers) throws Exception {
        int port = ((WebServerApplicationContext) context).getWebServer().getPort();
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create("http://localhost:" + port + "/charges"))
                .header("Idempotency-Key", key).header("Content-Type", "text/plain")
                .POST(HttpRequest.BodyPublishers.ofString(body));
        if (headers.length > 0) {
            request.headers(headers);
        }
        return HttpClient.newHttpClient().send(request.build(), HttpResponse.BodyHandlers.ofString());
    }

    private static String status(String key) {
        return DATABASE.queryString("select status from idempotency_keys where idempotency_key = '" + key + "'");
    }

    private static void awaitLeaseExpired(String key) throws InterruptedException {
        Await.until("the lease of " + key + " runs out", Duration.ofSeconds(10), () -> "t".equals(DATABASE.queryString(
                "select locked_until < now() from idempotency_keys where idempotency_key = '" + key + "'")));
    }
}
