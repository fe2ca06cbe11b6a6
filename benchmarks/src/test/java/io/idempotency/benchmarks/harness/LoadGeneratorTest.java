package io.idempotency.benchmarks.harness;

import com.sun.net.httpserver.HttpServer;
import io.idempotency.benchmarks.harness.LoadGenerator.Kind;
import io.idempotency.benchmarks.harness.LoadGenerator.Round;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Queue;
import java.util.UUID;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;

/** The load generator against a small HTTP server that answers 201 to everything and keeps what it was sent. */
class LoadGeneratorTest {

    private static final Pattern REFERENCE = Pattern.compile("\"reference\":\"([^\"]*)\"");

    private final Queue<String> plainBodies = new ConcurrentLinkedQueue<>();
    private final Queue<String> idempotentBodies = new ConcurrentLinkedQueue<>();
    private HttpServer server;

    @BeforeEach
    void start() throws IOException {
        server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        server.createContext("/", exchange -> {
            String body = new String(exchange.getRequestBody().readAllBytes(), StandardCharsets.UTF_8);
            (exchange.getRequestURI().getPath().equals("/plain") ? plainBodies : idempotentBodies).add(body);
            byte[] answer = "{}".getBytes(StandardCharsets.UTF_8);
            exchange.sendResponseHeaders(201, answer.length);
            exchange.getResponseBody().write(answer);
            exchange.close();
        });
        server.start();
    }

    @AfterEach
    void stop() {
        server.stop(0);
    }

    @Test
    void aPlainRequestSendsWhatAFirstExecutionSendsButTheKey() throws Exception {
        try (LoadGenerator load = new LoadGenerator("127.0.0.1", server.getAddress().getPort(), 2, 2)) {
            Round plain = load.steady("plain", Kind.PLAIN, Duration.ofMillis(200));
            Round first = load.steady("first", Kind.FIRST, Duration.ofMillis(200));
            load.single(Kind.PLAIN, "explain-plain", null, false);
            assertThat(plain.errors()).isZero();
            assertThat(first.errors()).isZero();
        }

        assertThat(plainBodies).hasSizeGreaterThan(1);
        int firstLength = idempotentBodies.peek().length();
        // the same bytes to parse and the same row to insert: a reference as long as a key and, like a key, random,
        // so that both endpoints insert into the reference index at random places, not one at its end
        for (String body : plainBodies) {
            assertThat(body).hasSize(firstLength);
            String reference = reference(body);
            assertThat(UUID.fromString(reference).toString()).as("a random UUID").isEqualTo(reference);
        }
        List<String> references = plainBodies.stream().map(LoadGeneratorTest::reference).toList();
        assertThat(references).doesNotHaveDuplicates();
    }

    private static String reference(String body) {
        Matcher matcher = REFERENCE.matcher(body);
        assertThat(matcher.find()).as("a reference in %s", body).isTrue();
        return matcher.group(1);
    }
}
