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
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.RestController;

import java.math.BigDecimal;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A key expression naming a {@code BigDecimal} parameter, which Spring MVC binds from any decimal text, also one with
 * an exponent of hundreds of millions: the key is the number's plain decimal text, and a number whose plain text is
 * longer than a key may be is refused as a malformed key without writing that text out.
 */
@SpringBootTest(classes = NumericKeyParameterIntegrationTest.App.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
@Tag("container")
class NumericKeyParameterIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();
    private static final AtomicInteger RUNS = new AtomicInteger();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(TransfersController.class)
    static class App {
    }

    @RestController
    public static class TransfersController {

        @PostMapping("/transfers")
        @Idempotent(key = "#reference")
        public String transfer(@RequestParam BigDecimal reference) {
            RUNS.incrementAndGet();
            return "booked " + reference.toPlainString();
        }

        @PostMapping("/quotes")
        @Idempotent(fingerprint = "#amount")
        public String quote(@RequestParam BigDecimal amount) {
            RUNS.incrementAndGet();
            return "quoted " + amount.precision() + " digits, scale " + amount.scale();
        }
    }

    @LocalServerPort
    int port;

    final HttpClient http = HttpClient.newHttpClient();

    private HttpResponse<String> post(String reference) throws Exception {
        return http.send(HttpRequest.newBuilder(URI.create("http://localhost:" + port + "/transfers?reference="
                        + reference)).POST(HttpRequest.BodyPublishers.noBody()).build(),
                HttpResponse.BodyHandlers.ofString());
    }

    /**
     * Exponents as large as an int holds: their plain text would be longer than any Java string, so writing it out
     * fails (and a billion digits fewer, it takes gigabytes and seconds). Each is a malformed key, answered 400.
     */
    @Test
    void aNumberWithAHugeExponentIsAMalformedKey() throws Exception {
        int runs = RUNS.get();
        for (String reference : new String[] {"1e2147483647", "-1e2147483647", "1e-2147483647", "9.99e-2147483600"}) {
            HttpResponse<String> answer = post(reference);

            assertThat(answer.statusCode()).as(reference + ": " + answer.body()).isEqualTo(400);
            assertThat(answer.body()).as(reference).contains("idempotency-key-malformed");
        }
        assertThat(RUNS).as("handler runs").hasValue(runs);
    }

    /**
     * A number whose value has more trailing zeros than its scale has room to drop (10^2147483649, written with its
     * coefficient's zeros) is fingerprinted as its value, however it is written, like any other.
     */
    @Test
    void aNumberBeyondTheScalesOfABigDecimalIsFingerprintedAsItsValue() throws Exception {
        String key = java.util.UUID.randomUUID().toString();
        HttpResponse<String> first = post("/quotes?amount=100e2147483647", key);
        HttpResponse<String> sameValue = post("/quotes?amount=1000e2147483646", key);
        HttpResponse<String> another = post("/quotes?amount=200e2147483647", key);

        assertThat(first.statusCode()).as(first.body()).isEqualTo(200);
        assertThat(first.body()).isEqualTo("quoted 3 digits, scale -2147483647");
        assertThat(sameValue.headers().firstValue("Idempotent-Replayed")).as(sameValue.body()).hasValue("true");
        assertThat(sameValue.body()).isEqualTo(first.body());
        assertThat(another.statusCode()).as(another.body()).isEqualTo(422);
    }

    private HttpResponse<String> post(String pathAndQuery, String key) throws Exception {
        return http.send(HttpRequest.newBuilder(URI.create("http://localhost:" + port + pathAndQuery))
                .header("Idempotency-Key", key).POST(HttpRequest.BodyPublishers.noBody()).build(),
                HttpResponse.BodyHandlers.ofString());
    }

    @Test
    void aNumberIsKeyedAsItsPlainDecimalValue() throws Exception {
        HttpResponse<String> first = post("1.2500e3");
        HttpResponse<String> replay = post("1250");

        assertThat(first.statusCode()).isEqualTo(200);
        assertThat(first.body()).isEqualTo("booked 1250.0");
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
    }
}
