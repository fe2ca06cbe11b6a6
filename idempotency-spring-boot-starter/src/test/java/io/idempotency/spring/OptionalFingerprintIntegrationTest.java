package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Import;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.RestController;
import tools.jackson.databind.JsonNode;

import java.math.BigDecimal;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.List;
import java.util.Optional;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A fingerprint expression naming an {@code Optional} parameter ({@code @RequestParam Optional<List<String>>}): the
 * value it holds is compared by its content, as the same parameter without the {@code Optional} is, and as a key
 * expression compares the value a present {@code Optional} holds. Compared as the {@code Optional}'s
 * {@code toString()}, a list's elements lose their bounds ({@code [a, b, c]} is both {@code a, b, c} and
 * {@code "a, b", c}) and a number its value ({@code 1250} and {@code 1.25e3} are one number). A JSON tree (a
 * {@code JsonNode} parameter) is compared by its content too, not by its {@code toString()}, which keeps the order of
 * its members and the spelling of its numbers. And a value that has no canonical form is refused.
 */
@SpringBootTest(classes = OptionalFingerprintIntegrationTest.App.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
@Tag("container")
class OptionalFingerprintIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();
    private static final AtomicInteger RUNS = new AtomicInteger();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(BasketController.class)
    static class App {
    }

    @RestController
    public static class BasketController {

        /** Fingerprinted by a map the expression builds, whose names are the request's values. */
        @PostMapping("/transfers")
        @Idempotent(fingerprint = "{#from: 'from', #to: 'to'}")
        public String transfer(@RequestParam Integer from, @RequestParam String to) {
            RUNS.incrementAndGet();
            return "moved from " + from + " to " + to;
        }

        /** Keyed by such a map. */
        @PostMapping("/moves")
        @Idempotent(key = "{#from: 'from', #to: 'to'}")
        public String move(@RequestParam Integer from, @RequestParam String to) {
            RUNS.incrementAndGet();
            return "moved from " + from + " to " + to;
        }

        @PostMapping("/baskets")
        @Idempotent(fingerprint = "#items")
        public String basket(@RequestParam Optional<List<String>> items) {
            RUNS.incrementAndGet();
            return items.map(list -> list.size() + " items: " + String.join("|", list)).orElse("empty");
        }

        @PostMapping("/quotes")
        @Idempotent(fingerprint = "#amount")
        public String quote(@RequestParam Optional<BigDecimal> amount) {
            RUNS.incrementAndGet();
            return amount.map(value -> "quoted " + value.toPlainString()).orElse("nothing quoted");
        }

        /** Fingerprinted by parts of the body bound as a JSON tree, in a list. */
        @PostMapping("/orders")
        @Idempotent(fingerprint = "{#order.get('lines'), #order.get('currency')}")
        public String order(@RequestBody JsonNode order) {
            RUNS.incrementAndGet();
            return "ordered " + order.get("lines").size() + " lines, note " + order.path("note").asString("none");
        }

        /** Keyed by a member of the body bound as a JSON tree. */
        @PostMapping("/bookings")
        @Idempotent(key = "#booking.get('reference')")
        public String booking(@RequestBody JsonNode booking) {
            RUNS.incrementAndGet();
            return "booked " + booking.get("reference").asString();
        }

        /** Keyed by a body that is a JSON text, bound as an optional tree. */
        @PostMapping("/tickets")
        @Idempotent(key = "#ticket")
        public String ticket(@RequestBody Optional<JsonNode> ticket) {
            RUNS.incrementAndGet();
            return "ticket " + ticket.map(JsonNode::asString).orElse("none");
        }
    }

    @LocalServerPort
    int port;

    final HttpClient http = HttpClient.newHttpClient();

    private HttpResponse<String> post(String pathAndQuery, String key) throws Exception {
        return http.send(HttpRequest.newBuilder(URI.create("http://localhost:" + port + pathAndQuery))
                        .header("Idempotency-Key", key).POST(HttpRequest.BodyPublishers.noBody()).build(),
                HttpResponse.BodyHandlers.ofString());
    }

    /**
     * Three items, then two of which the first holds a comma: the handler sees other items, so the key reused for
     * them is refused, not answered with the three items' answer.
     */
    @Test
    void anOptionalListIsFingerprintedByItsElements() throws Exception {
        String key = UUID.randomUUID().toString();
        HttpResponse<String> first = post("/baskets?items=a&items=b&items=c", key);
        int runs = RUNS.get();
        HttpResponse<String> other = post("/baskets?items=a,%20b&items=c", key);
        HttpResponse<String> otherUnderItsOwnKey = post("/baskets?items=a,%20b&items=c", UUID.randomUUID().toString());

        assertThat(first.statusCode()).as(first.body()).isEqualTo(200);
        assertThat(first.body()).isEqualTo("3 items: a|b|c");
        assertThat(other.headers().firstValue("Idempotent-Replayed")).as(other.body()).isEmpty();
        assertThat(other.statusCode()).as(other.body()).isEqualTo(422);
        assertThat(other.body()).contains("idempotency-key-mismatch");
        assertThat(otherUnderItsOwnKey.body()).as("what the handler makes of the other items")
                .isEqualTo("2 items: a, b|c");
        assertThat(RUNS).as("handler runs").hasValue(runs + 1);
    }

    /** The same number written otherwise is the same request, as for a {@code BigDecimal} parameter: a replay. */
    @Test
    void anOptionalNumberIsFingerprintedByItsValue() throws Exception {
        String key = UUID.randomUUID().toString();
        HttpResponse<String> first = post("/quotes?amount=1250", key);
        int runs = RUNS.get();
        HttpResponse<String> sameValue = post("/quotes?amount=1.25e3", key);

        assertThat(first.statusCode()).as(first.body()).isEqualTo(200);
        assertThat(sameValue.statusCode()).as(sameValue.body()).isEqualTo(200);
        assertThat(sameValue.headers().firstValue("Idempotent-Replayed")).as(sameValue.body()).hasValue("true");
        assertThat(sameValue.body()).isEqualTo(first.body());
        assertThat(RUNS).as("handler runs").hasValue(runs);
    }

    /**
     * A fingerprint map whose names are written alike (the number 1 and the text "1") has no canonical form: compared by
     * one of its names, two different requests would be one. The request is refused as one that cannot be
     * fingerprinted (400, not 500), not run, and leaves no record; other values are served. A key expression's map
     * alike is a malformed key.
     */
    @Test
    void aFingerprintMapWhoseNamesAreWrittenAlikeIsRefusedNotRun() throws Exception {
        String key = UUID.randomUUID().toString();
        int runs = RUNS.get();
        HttpResponse<String> alike = post("/transfers?from=1&to=1", key);

        assertThat(alike.statusCode()).as(alike.body()).isEqualTo(400);
        assertThat(alike.body()).contains("idempotency-body-invalid");
        assertThat(RUNS).as("handler runs").hasValue(runs);
        assertThat(TestDatabases.keyRows(DATABASE, key)).isZero();

        HttpResponse<String> apart = post("/transfers?from=1&to=2", key);
        assertThat(apart.statusCode()).as(apart.body()).isEqualTo(200);
        assertThat(apart.body()).isEqualTo("moved from 1 to 2");

        // as a key: malformed
        HttpResponse<String> keyedAlike = http.send(HttpRequest.newBuilder(URI.create("http://localhost:" + port
                + "/moves?from=1&to=1")).POST(HttpRequest.BodyPublishers.noBody()).build(),
                HttpResponse.BodyHandlers.ofString());
        assertThat(keyedAlike.statusCode()).as(keyedAlike.body()).isEqualTo(400);
        assertThat(keyedAlike.body()).contains("idempotency-key-malformed");
        assertThat(RUNS).as("handler runs").hasValue(runs + 1);
    }

    private HttpResponse<String> postJson(String path, String key, String json) throws Exception {
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                .header("Content-Type", "application/json").POST(HttpRequest.BodyPublishers.ofString(json));
        if (key != null) {
            request.header("Idempotency-Key", key);
        }
        return http.send(request.build(), HttpResponse.BodyHandlers.ofString());
    }

    /**
     * The same lines and currency, with their members in another order and a number spelt otherwise, are the same
     * request: a replay. Another currency under the key is refused.
     */
    @Test
    void aJsonTreeIsFingerprintedByItsContent() throws Exception {
        String key = UUID.randomUUID().toString();
        HttpResponse<String> first = postJson("/orders", key,
                "{\"lines\":[{\"sku\":\"A-1\",\"quantity\":1250}],\"currency\":\"EUR\",\"note\":\"first\"}");
        int runs = RUNS.get();
        HttpResponse<String> sameLines = postJson("/orders", key,
                "{\"note\":\"retried\",\"currency\":\"EUR\",\"lines\":[{\"quantity\":1.25e3,\"sku\":\"A-1\"}]}");
        HttpResponse<String> otherCurrency = postJson("/orders", key,
                "{\"lines\":[{\"sku\":\"A-1\",\"quantity\":1250}],\"currency\":\"USD\",\"note\":\"first\"}");

        assertThat(first.statusCode()).as(first.body()).isEqualTo(200);
        assertThat(first.body()).isEqualTo("ordered 1 lines, note first");
        assertThat(sameLines.statusCode()).as(sameLines.body()).isEqualTo(200);
        assertThat(sameLines.headers().firstValue("Idempotent-Replayed")).as(sameLines.body()).hasValue("true");
        assertThat(sameLines.body()).isEqualTo(first.body());
        assertThat(otherCurrency.statusCode()).as(otherCurrency.body()).isEqualTo(422);
        assertThat(otherCurrency.body()).contains("idempotency-key-mismatch");
        assertThat(RUNS).as("handler runs").hasValue(runs);
    }

    /** A text member of a JSON tree is the key as it is written, without the quotes of its JSON. */
    @Test
    void aJsonTreesTextIsTheKeyWithoutQuotes() throws Exception {
        String reference = "booking-" + UUID.randomUUID();
        HttpResponse<String> first = postJson("/bookings", null, "{\"reference\":\"" + reference + "\"}");
        HttpResponse<String> retry = postJson("/bookings", null, "{ \"reference\" : \"" + reference + "\" }");

        assertThat(first.statusCode()).as(first.body()).isEqualTo(200);
        assertThat(first.body()).isEqualTo("booked " + reference);
        assertThat(TestDatabases.keyRows(DATABASE, reference)).as("records under the reference itself").isOne();
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).as(retry.body()).hasValue("true");

        // the same through an Optional
        String ticket = "ticket-" + UUID.randomUUID();
        HttpResponse<String> booked = postJson("/tickets", null, "\"" + ticket + "\"");
        assertThat(booked.statusCode()).as(booked.body()).isEqualTo(200);
        assertThat(booked.body()).isEqualTo("ticket " + ticket);
        assertThat(TestDatabases.keyRows(DATABASE, ticket)).as("records under the ticket itself").isOne();
    }

    /** An absent parameter and its retry are one request. */
    @Test
    void anEmptyOptionalIsReplayed() throws Exception {
        String key = UUID.randomUUID().toString();
        HttpResponse<String> first = post("/baskets", key);
        HttpResponse<String> retry = post("/baskets", key);

        assertThat(first.body()).isEqualTo("empty");
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).as(retry.body()).hasValue("true");
        assertThat(retry.body()).isEqualTo("empty");
    }
}
