package io.idempotency.sample.payment;

import com.sun.net.httpserver.HttpServer;
import io.idempotency.core.DefiniteFailureException;
import io.idempotency.testkit.FreePorts;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.mock.env.MockEnvironment;

import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicReference;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * How the gateway client classifies answers and failures: what is a charge, a decline, a definite failure (the
 * request never left) and an unknown outcome (it may have been booked). Against a tiny HTTP server whose answer each
 * test chooses.
 */
class GatewayClientTest {

    private static final String CHARGE = "{\"id\":7,\"idempotencyKey\":\"k\",\"orderId\":\"o-1\",\"amount\":\"12.50\","
            + "\"currency\":\"EUR\",\"createdAt\":\"2026-01-01T00:00:00Z\"}";

    private final AtomicReference<Answer> answer = new AtomicReference<>();
    private final AtomicReference<String> receivedKey = new AtomicReference<>();
    private final AtomicReference<String> receivedTarget = new AtomicReference<>();
    private HttpServer server;

    private record Answer(int status, String contentType, String body, long delayMs) {
    }

    @BeforeEach
    void startServer() throws Exception {
        server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
        server.createContext("/", exchange -> {
            receivedKey.set(exchange.getRequestHeaders().getFirst("Idempotency-Key"));
            receivedTarget.set(exchange.getRequestURI().toString());
            exchange.getRequestBody().readAllBytes();
            Answer current = answer.get();
            try {
                Thread.sleep(current.delayMs());
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            byte[] bytes = current.body().getBytes(StandardCharsets.UTF_8);
            exchange.getResponseHeaders().set("Content-Type", current.contentType());
            exchange.sendResponseHeaders(current.status(), bytes.length == 0 ? -1 : bytes.length);
            try (OutputStream out = exchange.getResponseBody()) {
                out.write(bytes);
            }
        });
        server.start();
    }

    @AfterEach
    void stopServer() {
        server.stop(0);
    }

    @Test
    void bookedChargeIsApprovedAndTheKeyIsSent() {
        answer.set(new Answer(201, "application/json", CHARGE, 0));

        GatewayClient.Result result = client().charge("derived-key", "o-1", new java.math.BigDecimal("12.50"), "EUR");

        assertThat(result).isEqualTo(new GatewayClient.Approved(new GatewayClient.GatewayCharge(7, "o-1", "12.50",
                "EUR")));
        assertThat(receivedKey.get()).isEqualTo("derived-key");
    }

    @Test
    void declineIsAnAnswerNotAFailure() {
        answer.set(new Answer(402, "application/problem+json", "{\"status\":402,\"detail\":\"over the limit\"}", 0));

        assertThat(client().charge("k", "o-1", java.math.BigDecimal.TEN, "EUR"))
                .isEqualTo(new GatewayClient.Declined("over the limit"));
    }

    @Test
    void serverErrorOrTimeoutIsAnUnknownOutcome() {
        answer.set(new Answer(500, "application/json", "{}", 0));
        assertThatThrownBy(() -> client().charge("k", "o-1", java.math.BigDecimal.TEN, "EUR"))
                .isInstanceOf(GatewayOutcomeUnknownException.class)
                .isNotInstanceOf(DefiniteFailureException.class);

        answer.set(new Answer(201, "application/json", CHARGE, 1_000));
        assertThatThrownBy(() -> client(Duration.ofMillis(300)).charge("k", "o-1", java.math.BigDecimal.TEN, "EUR"))
                .isInstanceOf(GatewayOutcomeUnknownException.class)
                .isNotInstanceOf(DefiniteFailureException.class);
    }

    @Test
    void approvalWhoseBodyCannotBeReadIsAnUnknownOutcome() {
        // The gateway answered, so it may have booked the charge: not a definite failure, and not a bare client error
        // that the application would answer as a failure of its own ("not carried out").
        answer.set(new Answer(201, "application/json", "<html>booked</html>", 0));

        assertThatThrownBy(() -> client().charge("k", "o-1", java.math.BigDecimal.TEN, "EUR"))
                .isInstanceOf(GatewayOutcomeUnknownException.class)
                .isNotInstanceOf(DefiniteFailureException.class);

        answer.set(new Answer(200, "application/json", "{\"id\":", 0));
        assertThatThrownBy(() -> client().findByKey("k")).isInstanceOf(GatewayOutcomeUnknownException.class);
    }

    @Test
    void noConnectionIsADefiniteFailure() throws Exception {
        int closedPort = FreePorts.outsideEphemeralRange(); // nothing listens there
        GatewayClient client = new GatewayClient(new GatewayProperties("http://127.0.0.1:" + closedPort,
                Duration.ofSeconds(1), Duration.ofMillis(300)), new MockEnvironment());

        assertThatThrownBy(() -> client.charge("k", "o-1", java.math.BigDecimal.TEN, "EUR"))
                .isInstanceOf(GatewayUnreachableException.class)
                .isInstanceOf(DefiniteFailureException.class);
        assertThatThrownBy(() -> client.findByKey("k")).isInstanceOf(GatewayUnreachableException.class);
    }

    @Test
    void lookUpFindsTheChargeOrNothing() {
        answer.set(new Answer(200, "application/json", CHARGE, 0));
        assertThat(client().findByKey("k")).contains(new GatewayClient.GatewayCharge(7, "o-1", "12.50", "EUR"));

        answer.set(new Answer(404, "application/problem+json", "{\"status\":404}", 0));
        assertThat(client().findByKey("k")).isEmpty();

        answer.set(new Answer(503, "text/plain", "busy", 0));
        assertThatThrownBy(() -> client().findByKey("k")).isInstanceOf(GatewayOutcomeUnknownException.class);
    }

    @Test
    void theLookUpKeepsTheKeyOutOfItsAddressAndOutOfItsFailures() {
        // the derived key identifies a charge at the gateway: an address ends up in access logs, and a failed call's
        // address in the failure's message, which the resolver and the sweeper log
        String key = "derived-" + java.util.UUID.randomUUID();
        answer.set(new Answer(200, "application/json", CHARGE, 0));
        assertThat(client().findByKey(key)).isPresent();
        assertThat(receivedKey.get()).isEqualTo(key);
        assertThat(receivedTarget.get()).doesNotContain(key);

        answer.set(new Answer(200, "application/json", CHARGE, 1_000)); // no answer within the read timeout
        assertThatThrownBy(() -> client(Duration.ofMillis(300)).findByKey(key))
                .isInstanceOf(GatewayOutcomeUnknownException.class)
                .satisfies(failure -> {
                    for (Throwable cause = failure; cause != null; cause = cause.getCause()) {
                        assertThat(String.valueOf(cause.getMessage())).doesNotContain(key);
                    }
                });
    }

    /** A client that waits long enough for any answer the test server gives without a delay of its own. */
    private GatewayClient client() {
        return client(Duration.ofSeconds(10));
    }

    private GatewayClient client(Duration readTimeout) {
        return new GatewayClient(new GatewayProperties("http://127.0.0.1:" + server.getAddress().getPort(),
                Duration.ofSeconds(1), readTimeout), new MockEnvironment());
    }
}
