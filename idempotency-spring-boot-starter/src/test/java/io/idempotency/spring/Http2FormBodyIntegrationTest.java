package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Import;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A form sent over HTTP/2 in cleartext ({@code h2c}), where a body comes in DATA frames with or without a declared
 * length, is the same request as the same form sent over HTTP/1.1 with its length: a handler that reads it as sent
 * gets every byte, one that reads its parameters gets them all, a retry over HTTP/1.1 under the key is a replay, and a
 * form above {@code idempotency.max-request-body-size} is refused either way, leaving nothing.
 */
@Tag("container")
@SpringBootTest(classes = Http2FormBodyIntegrationTest.App.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = {"server.http2.enabled=true", "idempotency.max-request-body-size=256"})
class Http2FormBodyIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestDatabases.withOrders();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(CallbacksController.class)
    static class App {
    }

    @RestController
    public static class CallbacksController {

        private final JdbcClient jdbc;

        public CallbacksController(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        @GetMapping("/ping")
        public String ping() {
            return "pong";
        }

        /** A provider's callback whose signature covers the form's bytes. */
        @PostMapping(path = "/signed-callbacks", consumes = "application/x-www-form-urlencoded")
        @Idempotent(keyRequired = false)
        public String signed(HttpServletRequest request, HttpServletResponse response) throws IOException {
            response.setHeader("Declared-Length", Long.toString(request.getContentLengthLong()));
            String form = new String(request.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            jdbc.sql("insert into orders (note) values (?)").param(note(form)).update();
            return "read:" + form + ";";
        }

        @PostMapping(path = "/read-callbacks", consumes = "application/x-www-form-urlencoded")
        @Idempotent(keyRequired = false)
        public String parameters(HttpServletRequest request, HttpServletResponse response) {
            response.setHeader("Declared-Length", Long.toString(request.getContentLengthLong()));
            String[] amounts = request.getParameterValues("amount");
            jdbc.sql("insert into orders (note) values (?)").param(request.getParameter("note")).update();
            return "amounts:" + (amounts == null ? "none" : String.join(",", amounts)) + ";";
        }

        private static String note(String form) {
            for (String pair : form.split("&")) {
                if (pair.startsWith("note=")) {
                    return pair.substring(5);
                }
            }
            return null;
        }
    }

    @LocalServerPort
    int port;

    /** The client the requests of a test go out on, over HTTP/2. */
    HttpClient h2;

    @BeforeEach
    void upgrade() throws Exception {
        h2 = upgradedClient();
    }

    /**
     * A new client whose connection took the h2c upgrade with a GET, so that every request it sends goes over HTTP/2
     * (a new client's first request would otherwise carry the upgrade, and a server may refuse to upgrade a request
     * with a body: Jetty does).
     */
    private HttpClient upgradedClient() throws Exception {
        HttpClient client = HttpClient.newBuilder().version(HttpClient.Version.HTTP_2).build();
        HttpResponse<String> upgraded = client.send(HttpRequest.newBuilder(
                URI.create("http://localhost:" + port + "/ping")).GET().build(), HttpResponse.BodyHandlers.ofString());
        assertThat(upgraded.statusCode()).isEqualTo(200);
        assertThat(upgraded.version()).as("the server took the h2c upgrade").isEqualTo(HttpClient.Version.HTTP_2);
        return client;
    }

    @Test
    void aFormReadAsSentOverHttp2IsTheSameRequestOverHttp11WithOrWithoutItsLength() throws Exception {
        for (boolean withLength : new boolean[] {true, false}) {
            String what = withLength ? "over HTTP/2 with its length" : "over HTTP/2 without a length";
            String key = UUID.randomUUID().toString();
            String note = "h2-signed-" + key.substring(0, 8);
            String form = "note=" + note + "&txn=42&amount=12.50&sig=abc";

            HttpResponse<String> withoutKey = h2Post("/signed-callbacks", null, form, withLength);
            HttpResponse<String> first = h2Post("/signed-callbacks", key, form, withLength);
            String retry = http11Post("/signed-callbacks", key, form);
            HttpResponse<String> again = h2Post("/signed-callbacks", key, form, !withLength);

            assertThat(withoutKey.statusCode()).as(what).isEqualTo(200);
            assertThat(withoutKey.body()).as(what).isEqualTo("read:" + form + ";");
            assertThat(first.statusCode()).as(what).isEqualTo(200);
            assertThat(first.body()).as(what).isEqualTo("read:" + form + ";");
            assertThat(retry).as(what + ", retried over HTTP/1.1").startsWith("HTTP/1.1 200 ")
                    .contains("Idempotent-Replayed: true").contains("read:" + form + ";");
            assertThat(again.statusCode()).as(what + ", retried over HTTP/2").isEqualTo(200);
            assertThat(again.headers().firstValue("Idempotent-Replayed")).as(what).hasValue("true");
            assertThat(again.body()).as(what + ", retried over HTTP/2").isEqualTo("read:" + form + ";");
            assertThat(TestDatabases.rows(DATABASE, note)).as(what).isEqualTo(2);

            String large = "note=large-" + note + "&padding=" + "x".repeat(300);
            HttpResponse<String> largeWithoutKey = h2Post("/signed-callbacks", null, large, withLength);
            assertThat(largeWithoutKey.statusCode()).as(what + ", above the cap without a key").isEqualTo(200);
            assertThat(largeWithoutKey.body()).as(what + ", above the cap without a key")
                    .isEqualTo("read:" + large + ";");
        }
    }

    @Test
    void aFormWhoseParametersAreReadOverHttp2IsTheSameRequestOverHttp11WithOrWithoutItsLength() throws Exception {
        for (boolean withLength : new boolean[] {true, false}) {
            String what = withLength ? "over HTTP/2 with its length" : "over HTTP/2 without a length";
            String key = UUID.randomUUID().toString();
            String note = "h2-params-" + key.substring(0, 8);
            String form = "note=" + note + "&amount=1&amount=2";

            HttpResponse<String> withoutKey = h2Post("/read-callbacks?amount=0", null, form, withLength);
            HttpResponse<String> first = h2Post("/read-callbacks?amount=0", key, form, withLength);
            String retry = http11Post("/read-callbacks?amount=0", key, form);

            assertThat(withoutKey.statusCode()).as(what + ", without a key").isEqualTo(200);
            assertThat(withoutKey.body()).as(what + ", without a key").isEqualTo("amounts:0,1,2;");
            assertThat(first.statusCode()).as(what).isEqualTo(200);
            assertThat(first.body()).as(what).isEqualTo("amounts:0,1,2;");
            assertThat(retry).as(what + ", retried over HTTP/1.1").startsWith("HTTP/1.1 200 ")
                    .contains("Idempotent-Replayed: true").contains("amounts:0,1,2;");
            assertThat(TestDatabases.rows(DATABASE, note)).as(what).isEqualTo(2);
        }
    }

    @Test
    void aFormAboveTheCapOverHttp2IsRefusedWithOrWithoutItsLengthAndLeavesNothing() throws Exception {
        for (String path : new String[] {"/signed-callbacks", "/read-callbacks"}) {
            for (boolean withLength : new boolean[] {true, false}) {
                String what = path + (withLength ? " with its length" : " without a length");
                String key = UUID.randomUUID().toString();
                String note = "h2-large-" + key.substring(0, 8);
                String form = "note=" + note + "&amount=1&padding=" + "x".repeat(300);
                HttpResponse<String> refused = refusedOnAConnectionOfItsOwn(path, key, form, withLength, what);
                HttpResponse<String> next;
                try {
                    next = h2Post(path, null, "note=after-" + note + "&amount=1", withLength);
                } catch (IOException goAway) {
                    // the refused form's second half reaches Tomcat after the refusal closed its stream; Tomcat
                    // ignores it, but now and then counts it against a window it no longer has for that stream and
                    // ends the connection (GOAWAY) — its flow control, not the library's answer. The request is
                    // served on the client's next connection
                    assertThat(goAway).as(what).hasMessageContaining("GOAWAY");
                    next = h2Post(path, null, "note=after-" + note + "&amount=1", withLength);
                }

                assertThat(refused.statusCode()).as(what).isEqualTo(413);
                assertThat(refused.body()).as(what).contains("idempotency-request-too-large");
                assertThat(TestDatabases.rows(DATABASE, note)).as(what).isZero();
                assertThat(TestDatabases.keyRows(DATABASE, key)).as(what).isZero();
                assertThat(next.statusCode()).as(what + ": the next request is served").isEqualTo(200);
            }
        }
    }

    /**
     * Sends a form the server refuses on a new connection: the GOAWAY its late second half may bring (see below) would
     * otherwise end the stream of a request that follows on the same connection. Now and then the GOAWAY comes before
     * the client has taken the refusal itself; the same request is then sent again, on another new connection (at
     * most three times): whichever attempt the client sees answered, none may have left anything.
     */
    private HttpResponse<String> refusedOnAConnectionOfItsOwn(String path, String key, String form,
            boolean withLength, String what) throws Exception {
        for (int attempt = 1; ; attempt++) {
            h2 = upgradedClient();
            try {
                return h2Post(path, key, form, withLength);
            } catch (IOException goAway) {
                assertThat(goAway).as(what).hasMessageContaining("GOAWAY");
                if (attempt == 3) {
                    throw goAway;
                }
            }
        }
    }

    private HttpResponse<String> h2Post(String target, String key, String form, boolean withLength)
            throws Exception {
        byte[] bytes = form.getBytes(StandardCharsets.UTF_8);
        // the form's second half comes in a later DATA frame, after a pause; without a known length the client sends
        // no content-length
        int half = bytes.length / 2;
        HttpRequest.BodyPublisher halves = HttpRequest.BodyPublishers.concat(
                HttpRequest.BodyPublishers.ofInputStream(() -> new ByteArrayInputStream(bytes, 0, half)),
                HttpRequest.BodyPublishers.ofInputStream(() -> new ByteArrayInputStream(bytes, half,
                        bytes.length - half) {
                    @Override
                    public synchronized int read(byte[] b, int off, int len) {
                        if (pos == half) {
                            try {
                                Thread.sleep(200);
                            } catch (InterruptedException e) {
                                Thread.currentThread().interrupt();
                            }
                        }
                        return super.read(b, off, len);
                    }
                }));
        HttpRequest.BodyPublisher body = withLength ? HttpRequest.BodyPublishers.fromPublisher(halves, bytes.length)
                : halves;
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create("http://localhost:" + port + target))
                .header("Content-Type", "application/x-www-form-urlencoded").timeout(Duration.ofSeconds(30))
                .POST(body);
        if (key != null) {
            request.header("Idempotency-Key", key);
        }
        HttpResponse<String> response = h2.send(request.build(), HttpResponse.BodyHandlers.ofString());
        assertThat(response.version()).as("sent over HTTP/2").isEqualTo(HttpClient.Version.HTTP_2);
        if (response.statusCode() == 200 && response.headers().firstValue("Idempotent-Replayed").isEmpty()) {
            assertThat(response.headers().firstValue("Declared-Length")).as("the length the handler was told")
                    .hasValue(withLength ? Integer.toString(bytes.length) : "-1");
        }
        return response;
    }

    private String http11Post(String target, String key, String form) throws IOException {
        return OrdersApplicationTest.raw(port, "POST " + target + " HTTP/1.1\r\nHost: localhost\r\n"
                + "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: " + form.length() + "\r\n"
                + "Idempotency-Key: " + key + "\r\nConnection: close\r\n\r\n" + form);
    }
}
