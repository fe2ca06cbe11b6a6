package io.idempotency.spring;

import io.idempotency.spring.app.TestApplication;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Tag;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Locale;
import java.util.UUID;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The test application ({@link TestApplication}) over real HTTP on real PostgreSQL, and what its tests read back: the
 * business rows in {@code orders} and the records in {@code idempotency_keys}. Subclasses add their own properties
 * with {@code @TestPropertySource}.
 * <p>
 * Tests tagged {@code container} (these, and others that talk to the application over HTTP) run twice: here on Tomcat,
 * and in {@code idempotency-jetty-tests} on Jetty, from this module's test jar, but for those whose behaviour lives in
 * the database, the engine or Spring's advice, which that module's pom leaves out. They assert what the library does,
 * and where the container decides (a charset, a limit, a header of its own) compare with what it does alone.
 */
@SpringBootTest(classes = TestApplication.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
@Tag("container")
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
        return TestDatabases.rows(DATABASE, note);
    }

    /** Idempotency records of {@code key}. */
    long keyRows(String key) {
        return TestDatabases.keyRows(DATABASE, key);
    }

    /** The status of the record of {@code key} (PROCESSING, SUCCEEDED, FAILED), or null when there is none. */
    String status(String key) {
        return DATABASE.queryString("select status from idempotency_keys where idempotency_key = '" + key + "'");
    }

    /** The header lines stored with the answer under {@code key}, one a line, as the database holds them. */
    String storedHeaders(String key) {
        return DATABASE.queryString(
                "select response_headers from idempotency_keys where idempotency_key = '" + key + "'");
    }

    /** The names of the header lines stored with the answer under {@code key}, in lower case. */
    List<String> storedHeaderNames(String key) {
        return storedHeaders(key).lines().map(line -> line.substring(0, line.indexOf(':')).toLowerCase(Locale.ROOT))
                .toList();
    }

    /** Waits until the slow handler holds its transaction open (it sleeps after its insert), instead of guessing. */
    void awaitHandlerInItsTransaction() throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (DATABASE.queryLong("select count(*) from pg_stat_activity where application_name = '"
                + DATABASE.schema() + "' and state = 'idle in transaction'") == 0) {
            assertThat(System.nanoTime() - deadline).as("the slow handler started").isNegative();
            Thread.sleep(10);
        }
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

    /** One keep-alive connection, read answer by answer. */
    final class KeepAliveConnection implements AutoCloseable {
        final Socket socket;
        final OutputStream out;
        final InputStream in;

        KeepAliveConnection() throws IOException {
            socket = new Socket("localhost", port);
            socket.setSoTimeout(10_000);
            out = socket.getOutputStream();
            in = socket.getInputStream();
        }

        void send(String text) throws IOException {
            send(text.getBytes(StandardCharsets.ISO_8859_1));
        }

        void send(byte[] bytes) throws IOException {
            out.write(bytes);
            out.flush();
        }

        String line() throws IOException {
            ByteArrayOutputStream line = new ByteArrayOutputStream();
            int b;
            while ((b = in.read()) != -1) {
                if (b == '\n') {
                    break;
                }
                if (b != '\r') {
                    line.write(b);
                }
            }
            if (b == -1 && line.size() == 0) {
                return null;
            }
            return line.toString(StandardCharsets.ISO_8859_1);
        }

        /** Head and body of the next answer; a 1xx, 204 or 304 answer is its head alone. */
        String answer() throws IOException {
            StringBuilder head = new StringBuilder();
            String status = line();
            if (status == null) {
                return null;
            }
            head.append(status).append("\r\n");
            long length = -1;
            boolean chunked = false;
            String line;
            while ((line = line()) != null && !line.isEmpty()) {
                head.append(line).append("\r\n");
                String lower = line.toLowerCase();
                if (lower.startsWith("content-length:")) {
                    length = Long.parseLong(line.substring(15).trim());
                } else if (lower.startsWith("transfer-encoding:") && lower.contains("chunked")) {
                    chunked = true;
                }
            }
            head.append("\r\n");
            String code = status.split(" ")[1];
            if (code.startsWith("1") || code.equals("204") || code.equals("304")) {
                return head.toString(); // answers that end with their header section (RFC 9112, section 6.3)
            }
            ByteArrayOutputStream body = new ByteArrayOutputStream();
            if (chunked) {
                while (true) {
                    int size = Integer.parseInt(line().trim(), 16);
                    if (size == 0) {
                        while (!(line = line()).isEmpty()) {
                            head.append(line).append("\r\n");
                        }
                        break;
                    }
                    body.write(in.readNBytes(size));
                    line();
                }
            } else if (length >= 0) {
                body.write(in.readNBytes((int) length));
            } else {
                in.transferTo(body);
            }
            return head + body.toString(StandardCharsets.ISO_8859_1);
        }

        @Override
        public void close() throws IOException {
            socket.close();
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

    /** Posts an order under a key, as some caller. */
    @FunctionalInterface
    interface PostAs {
        HttpResponse<byte[]> post(String key, String body) throws IOException, InterruptedException;
    }

    /**
     * A caller the library cannot name, posting under a key the same order an anonymous request stored, is refused
     * (500), twice, rather than replayed the anonymous answer, and leaves nothing of its own.
     */
    void assertRefusedRatherThanReplayedTheAnonymousAnswer(String caller, PostAs unnamed) throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "unnamed-" + key;
        String body = "{\"note\":\"" + note + "\",\"amount\":\"3.00\"}";

        HttpResponse<byte[]> anonymous = post("/orders", key, body);
        List<HttpResponse<byte[]>> refused = List.of(unnamed.post(key, body), unnamed.post(key, body));

        assertThat(anonymous.statusCode()).as(caller).isEqualTo(201);
        for (HttpResponse<byte[]> response : refused) {
            assertThat(response.statusCode()).as(caller + ": not the anonymous caller's answer").isEqualTo(500);
            assertThat(response.headers().firstValue("Idempotent-Replayed")).as(caller).isEmpty();
            assertThat(new String(response.body(), StandardCharsets.UTF_8)).as(caller)
                    .doesNotContain(new String(anonymous.body(), StandardCharsets.UTF_8));
        }
        assertThat(rows(note)).as(caller + ": the anonymous request's row only").isEqualTo(1);
        assertThat(keyRows(key)).as(caller + ": the anonymous request's record only").isEqualTo(1);
    }

    /**
     * A caller the library cannot name, posting first, keeps nothing: the key stays free, and the same order posted
     * under it by {@code then} runs.
     */
    void assertARefusedCallerKeepsNothingAndLeavesTheKeyFree(PostAs unnamed, PostAs then) throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "unnamed-first-" + key;
        String body = "{\"note\":\"" + note + "\",\"amount\":\"4.00\"}";

        HttpResponse<byte[]> refused = unnamed.post(key, body);

        assertThat(refused.statusCode()).isEqualTo(500);
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();

        HttpResponse<byte[]> named = then.post(key, body);

        assertThat(named.statusCode()).as("nothing stored under the key").isEqualTo(201);
        assertThat(named.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(rows(note)).isEqualTo(1);
    }
}
