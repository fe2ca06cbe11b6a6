package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Import;
import org.springframework.http.HttpStatus;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.stereotype.Service;
import org.springframework.web.accept.StandardApiVersionDeprecationHandler;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.ResponseStatus;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.servlet.function.RequestPredicates;
import org.springframework.web.servlet.function.RouterFunction;
import org.springframework.web.servlet.function.RouterFunctions;
import org.springframework.web.servlet.function.ServerResponse;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.ZoneOffset;
import java.time.ZonedDateTime;
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
 * Spring MVC's API versioning (a version header, a query parameter or a media type parameter here, Spring Boot's
 * {@code spring.mvc.apiversion.*}): two handlers of one route, chosen by the version the request names. A key is one
 * request, so a retry under it with another version is another request, refused as a mismatch: neither run twice,
 * nor answered with the other version's answer.
 */
@SpringBootTest(classes = ApiVersionsIntegrationTest.App.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = {"spring.mvc.apiversion.use.header=API-Version",
                "spring.mvc.apiversion.use.query-parameter=version",
                "spring.mvc.apiversion.use.media-type-parameter[application/json]=v",
                "spring.mvc.apiversion.default=1.0", "spring.mvc.apiversion.supported=1.0,1.5,2.0"})
@Tag("container")
class ApiVersionsIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();
    private static final Map<String, AtomicInteger> RUNS = new ConcurrentHashMap<>();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
    }

    private static final Map<String, CountDownLatch> ENTERED = new ConcurrentHashMap<>();
    private static final Map<String, CountDownLatch> RELEASE = new ConcurrentHashMap<>();

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import({PaymentsController.class, RefundsController.class, TransfersController.class, ChargeService.class})
    static class App {

        /** Version 1.0 is deprecated: Spring MVC says so in each answer to it, before the handler runs. */
        @Bean
        StandardApiVersionDeprecationHandler deprecations() {
            StandardApiVersionDeprecationHandler handler = new StandardApiVersionDeprecationHandler();
            handler.configureVersion("1.0")
                    .setDeprecationDate(ZonedDateTime.of(2026, 1, 1, 0, 0, 0, 0, ZoneOffset.UTC))
                    .setDeprecationLink(URI.create("https://api.example/deprecation"))
                    .setSunsetDate(ZonedDateTime.of(2027, 1, 1, 0, 0, 0, 0, ZoneOffset.UTC))
                    .setSunsetLink(URI.create("https://api.example/sunset"));
            return handler;
        }

        /** A functional route per version, each calling an idempotent method of its own. */
        @Bean
        RouterFunction<ServerResponse> charges(ChargeService service) {
            return RouterFunctions.route()
                    .POST("/charges", RequestPredicates.version("1.0"),
                            request -> ServerResponse.status(201).body(service.chargeV1(request.body(String.class))))
                    .POST("/charges", RequestPredicates.version("2.0"),
                            request -> ServerResponse.status(201).body(service.chargeV2(request.body(String.class))))
                    .build();
        }
    }

    @Service
    public static class ChargeService {
        @Idempotent
        public String chargeV1(String charge) {
            return "v1 charge " + runs(charge);
        }

        @Idempotent
        public String chargeV2(String charge) {
            return "v2 charge " + runs(charge);
        }
    }

    /** Keyed by an expression, so the query is not otherwise fingerprinted; a baseline version beside a fixed one. */
    @RestController
    public static class RefundsController {
        @PostMapping(path = "/refunds", version = "1.0+")
        @Idempotent(key = "#params['ref']")
        @ResponseStatus(HttpStatus.CREATED)
        public String refundFromV1(@RequestParam String ref) {
            return "v1+ refund " + runs(ref);
        }

        @PostMapping(path = "/refunds", version = "2.0")
        @Idempotent(key = "#params['ref']")
        @ResponseStatus(HttpStatus.CREATED)
        public String refundV2(@RequestParam String ref) {
            return "v2 refund " + runs(ref);
        }
    }

    /** Version 1.0 waits until the test lets it finish, so that a request of version 2.0 meets it running. */
    @RestController
    public static class TransfersController {
        @PostMapping(path = "/transfers", version = "1.0")
        @Idempotent
        @ResponseStatus(HttpStatus.CREATED)
        public String transferV1(@RequestBody String transfer) throws InterruptedException {
            ENTERED.get(transfer).countDown();
            RELEASE.get(transfer).await(30, TimeUnit.SECONDS);
            return "v1 transfer " + runs(transfer);
        }

        @PostMapping(path = "/transfers", version = "2.0")
        @Idempotent
        @ResponseStatus(HttpStatus.CREATED)
        public String transferV2(@RequestBody String transfer) {
            return "v2 transfer " + runs(transfer);
        }
    }

    @RestController
    public static class PaymentsController {
        @PostMapping(path = "/payments", version = "1.0")
        @Idempotent
        @ResponseStatus(HttpStatus.CREATED)
        public String payV1(@RequestBody String payment) {
            return "v1 payment " + runs(payment) + " of " + payment;
        }

        @PostMapping(path = "/payments", version = "2.0")
        @Idempotent
        @ResponseStatus(HttpStatus.CREATED)
        public String payV2(@RequestBody String payment) {
            return "{\"version\":2,\"run\":" + runs(payment) + "}";
        }

    }

    private static int runs(String request) {
        return RUNS.computeIfAbsent(request, p -> new AtomicInteger()).incrementAndGet();
    }

    @LocalServerPort
    int port;

    final HttpClient http = HttpClient.newHttpClient();

    @Test
    void aKeyRetriedWithAnotherVersionIsAnotherRequest() throws Exception {
        String key = UUID.randomUUID().toString();
        String payment = "payment-" + key;

        HttpResponse<String> first = post(key, "1.0", payment);
        HttpResponse<String> replay = post(key, "1.0", payment);
        HttpResponse<String> otherVersion = post(key, "2.0", payment);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(first.body()).startsWith("v1 payment 1");
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(otherVersion.statusCode()).as(otherVersion.body()).isEqualTo(422);
        assertThat(otherVersion.body()).contains("idempotency-key-mismatch");
        assertThat(RUNS.get(payment)).as("runs of either version").hasValue(1);
    }

    @Test
    void aRequestThatNamesNoVersionIsFingerprintedAsItWasSent() throws Exception {
        // the default version handles it; a retry that names none either is the same request, whatever the
        // application's default is by then, and one that names the default is another
        String key = UUID.randomUUID().toString();
        String payment = "unversioned-" + key;

        HttpResponse<String> first = post(key, null, payment);
        HttpResponse<String> replay = post(key, null, payment);
        HttpResponse<String> named = post(key, "1.0", payment);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(first.body()).startsWith("v1 payment 1");
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(named.statusCode()).as(named.body()).isEqualTo(422);
        assertThat(RUNS.get(payment)).hasValue(1);
    }

    @Test
    void aVersionInAMediaTypeParameterIsPartOfTheFingerprint() throws Exception {
        String key = UUID.randomUUID().toString();
        String payment = "{\"media\":\"" + key + "\"}";

        HttpResponse<String> first = send("/payments", key, Map.of("Content-Type", "application/json",
                "Accept", "application/json;v=2.0"), payment);
        HttpResponse<String> replay = send("/payments", key, Map.of("Content-Type", "application/json",
                "Accept", "application/json;v=2.0"), payment);
        HttpResponse<String> otherVersion = send("/payments", key, Map.of("Content-Type", "application/json",
                "Accept", "application/json;v=1.0"), payment);

        assertThat(first.statusCode()).as(first.body()).isEqualTo(201);
        assertThat(first.body()).isEqualTo("{\"version\":2,\"run\":1}");
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(otherVersion.statusCode()).as(otherVersion.body()).isEqualTo(422);
        assertThat(RUNS.get(payment)).hasValue(1);
    }

    @Test
    void aVersionInTheQueryCountsOnAnEndpointKeyedByAnExpressionThatFingerprintsNoQuery() throws Exception {
        // 1.5 is served by the baseline "1.0+", 2.0 by its own handler: under one key, each is another request
        String ref = UUID.randomUUID().toString();

        HttpResponse<String> first = send("/refunds?version=1.5&ref=" + ref, null, Map.of(), "");
        HttpResponse<String> replay = send("/refunds?ref=" + ref + "&version=1.5", null, Map.of(), "");
        HttpResponse<String> baselineItself = send("/refunds?version=1.0&ref=" + ref, null, Map.of(), "");
        HttpResponse<String> otherVersion = send("/refunds?version=2.0&ref=" + ref, null, Map.of(), "");

        assertThat(first.statusCode()).as(first.body()).isEqualTo(201);
        assertThat(first.body()).isEqualTo("v1+ refund 1");
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(baselineItself.statusCode()).as(baselineItself.body()).isEqualTo(422);
        assertThat(otherVersion.statusCode()).as(otherVersion.body()).isEqualTo(422);
        assertThat(RUNS.get(ref)).hasValue(1);
    }

    @Test
    void aVersionSpringMvcRefusesClaimsNothing() throws Exception {
        // an unsupported or unparseable version is refused by Spring MVC before any handler runs: the key stays free
        String key = UUID.randomUUID().toString();
        String payment = "refused-" + key;

        HttpResponse<String> unsupported = post(key, "3.0", payment);
        HttpResponse<String> unparseable = post(key, "latest", payment);
        HttpResponse<String> valid = post(key, "2.0", payment);

        assertThat(unsupported.statusCode()).isEqualTo(400);
        assertThat(unparseable.statusCode()).isEqualTo(400);
        assertThat(valid.statusCode()).as(valid.body()).isEqualTo(201);
        assertThat(valid.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(DATABASE.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key + "'"))
                .isEqualTo(1);
        assertThat(RUNS.get(payment)).hasValue(1);
    }

    @Test
    void aDeprecatedVersionsHeadersAreSentOnceInTheFirstAnswerAndInItsReplay() throws Exception {
        String key = UUID.randomUUID().toString();
        String payment = "deprecated-" + key;

        HttpResponse<String> first = post(key, "1.0", payment);
        HttpResponse<String> replay = post(key, "1.0", payment);
        HttpResponse<String> current = post(UUID.randomUUID().toString(), "2.0", payment + "-current");

        for (HttpResponse<String> answer : List.of(first, replay)) {
            assertThat(answer.statusCode()).isEqualTo(201);
            assertThat(answer.headers().allValues("Deprecation")).containsExactly("@1767225600");
            assertThat(answer.headers().allValues("Sunset")).containsExactly("Fri, 1 Jan 2027 00:00:00 GMT");
            assertThat(answer.headers().allValues("Link")).containsExactlyInAnyOrder(
                    "<https://api.example/deprecation>; rel=\"deprecation\"; type=\"text/html\"",
                    "<https://api.example/sunset>; rel=\"sunset\"; type=\"text/html\"");
        }
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(current.headers().map()).doesNotContainKeys("deprecation", "sunset", "link");
        assertThat(RUNS.get(payment)).hasValue(1);
    }

    /**
     * Another version is another request: meeting the first one still running (its claim uncommitted, held until this
     * request is answered), it waits for it as another body would, and is told 409 when its wait runs out, never
     * replayed the first one's answer; once the first one has committed, it is refused 422.
     */
    @Test
    void aRequestOfAnotherVersionMeetingTheFirstStillRunningIsNeverGivenItsAnswer() throws Exception {
        String key = UUID.randomUUID().toString();
        String transfer = "transfer-" + key;
        ENTERED.put(transfer, new CountDownLatch(1));
        RELEASE.put(transfer, new CountDownLatch(1));

        CompletableFuture<HttpResponse<String>> first = http.sendAsync(versioned("/transfers", key, "1.0", transfer),
                HttpResponse.BodyHandlers.ofString());
        assertThat(ENTERED.get(transfer).await(30, TimeUnit.SECONDS)).isTrue();
        HttpResponse<String> otherVersion;
        try {
            otherVersion = post("/transfers", key, "2.0", transfer);
        } finally {
            RELEASE.get(transfer).countDown();
        }
        assertThat(first.get(30, TimeUnit.SECONDS).body()).isEqualTo("v1 transfer 1");
        HttpResponse<String> afterwards = post("/transfers", key, "2.0", transfer);

        assertThat(otherVersion.statusCode()).as(otherVersion.body()).isEqualTo(409);
        assertThat(otherVersion.body()).contains("idempotency-request-in-progress");
        assertThat(afterwards.statusCode()).as(afterwards.body()).isEqualTo(422);
        assertThat(RUNS.get(transfer)).hasValue(1);
    }

    @Test
    void functionalRoutesOfOneRouteForTwoVersionsShareItsScopeAndTellTheVersionsApart() throws Exception {
        String key = UUID.randomUUID().toString();
        String charge = "charge-" + key;

        HttpResponse<String> first = post("/charges", key, "2.0", charge);
        HttpResponse<String> replay = post("/charges", key, "2.0", charge);
        HttpResponse<String> otherVersion = post("/charges", key, "1.0", charge);

        assertThat(first.statusCode()).as(first.body()).isEqualTo(201);
        assertThat(first.body()).isEqualTo("v2 charge 1");
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(otherVersion.statusCode()).as(otherVersion.body()).isEqualTo(422);
        assertThat(RUNS.get(charge)).hasValue(1);
    }

    private HttpRequest request(String path, String key, Map<String, String> headers, String body) {
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                .POST(HttpRequest.BodyPublishers.ofString(body));
        if (key != null) {
            request.header("Idempotency-Key", key);
        }
        headers.forEach(request::header);
        return request.build();
    }

    private HttpResponse<String> send(String path, String key, Map<String, String> headers, String body)
            throws Exception {
        return http.send(request(path, key, headers, body), HttpResponse.BodyHandlers.ofString());
    }

    /** A text body to {@code path} under {@code key}, naming {@code version} in the version header, if any. */
    private HttpRequest versioned(String path, String key, String version, String body) {
        return request(path, key, version == null ? Map.of("Content-Type", "text/plain")
                : Map.of("Content-Type", "text/plain", "API-Version", version), body);
    }

    private HttpResponse<String> post(String path, String key, String version, String body) throws Exception {
        return http.send(versioned(path, key, version, body), HttpResponse.BodyHandlers.ofString());
    }

    private HttpResponse<String> post(String key, String version, String body) throws Exception {
        return post("/payments", key, version, body);
    }
}
