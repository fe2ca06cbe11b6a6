package io.idempotency.spring;

import io.idempotency.spring.app.TestApplication;
import io.idempotency.testkit.TestPostgres;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The test application ({@link TestApplication}) over real HTTP on real PostgreSQL, and what its tests read back: the
 * business rows in {@code orders} and the records in {@code idempotency_keys}. Subclasses add their own properties
 * with {@code @TestPropertySource}.
 */
@SpringBootTest(classes = TestApplication.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
abstract class OrdersApplicationTest {

    static final TestPostgres.Database DATABASE = TestDatabases.withOrders();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
    }

    @LocalServerPort
    int port;

    final HttpClient http = HttpClient.newHttpClient();

    /** Business rows written with {@code note}. */
    long rows(String note) {
        return DATABASE.queryLong("select count(*) from orders where note = '" + note + "'");
    }

    /** Idempotency records of {@code key}. */
    long keyRows(String key) {
        return DATABASE.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key + "'");
    }

    static void assertProblem(HttpResponse<byte[]> response, String type) {
        assertThat(response.headers().firstValue("Content-Type")).hasValueSatisfying(
                value -> assertThat(value).startsWith("application/problem+json"));
        assertThat(new String(response.body(), StandardCharsets.UTF_8))
                .contains("\"type\":\"" + ProblemResponses.DEFAULT_TYPE_BASE + type + "\"");
    }

    /**
     * Sends {@code request} as it is over a socket of its own and reads the answer to its end, byte for byte (the
     * request should say {@code Connection: close}). An answer shorter than its declared length fails after 10 s
     * instead of stalling.
     */
    String raw(String request) throws IOException {
        return raw(port, request);
    }

    /** {@link #raw(String)} to the application listening on {@code port}. */
    static String raw(int port, String request) throws IOException {
        try (Socket socket = new Socket("localhost", port)) {
            socket.setSoTimeout(10_000);
            OutputStream out = socket.getOutputStream();
            out.write(request.getBytes(StandardCharsets.ISO_8859_1));
            out.flush();
            ByteArrayOutputStream answer = new ByteArrayOutputStream();
            socket.getInputStream().transferTo(answer);
            return answer.toString(StandardCharsets.ISO_8859_1);
        }
    }

    HttpRequest.Builder request(String path, String body) {
        return HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                .header("Content-Type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofString(body));
    }

    HttpResponse<byte[]> post(String path, String key, String body) throws IOException, InterruptedException {
        return send(request(path, body).header("Idempotency-Key", key).build());
    }

    HttpResponse<byte[]> send(HttpRequest request) throws IOException, InterruptedException {
        return http.send(request, HttpResponse.BodyHandlers.ofByteArray());
    }
}
