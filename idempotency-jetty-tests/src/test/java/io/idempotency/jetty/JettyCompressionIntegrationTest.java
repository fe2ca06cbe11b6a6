package io.idempotency.jetty;

import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.UUID;
import java.util.zip.Deflater;
import java.util.zip.GZIPInputStream;
import java.util.zip.GZIPOutputStream;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Boot's response compression ({@code server.compression.enabled}), which Jetty applies in a handler of its own as it
 * sends the answer, after the idempotency filter: the answer is stored as the handler rendered it, and the first answer
 * and every replay are compressed alike for a client that accepts gzip, and decode to the same bytes. Jetty's handler
 * also inflates gzip request bodies.
 */
@SpringBootTest(classes = JettyApplication.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = "server.compression.enabled=true")
class JettyCompressionIntegrationTest {

    static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    static {
        DATABASE.queryString("create table orders (id bigserial primary key, note text not null)");
    }

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DATABASE.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @LocalServerPort
    int port;

    final HttpClient http = HttpClient.newHttpClient();

    @Test
    void theFirstAnswerAndTheReplayAreCompressedAlike() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "compressed-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> unguarded = send("/unguarded/large?size=20000", null, body, true);
        HttpResponse<byte[]> first = send("/orders/large?size=20000", key, body, true);
        HttpResponse<byte[]> replay = send("/orders/large?size=20000", key, body, true);
        HttpResponse<byte[]> identityReplay = send("/orders/large?size=20000", key, body, false);

        assertThat(unguarded.headers().firstValue("Content-Encoding")).hasValue("gzip");
        assertThat(first.statusCode()).isEqualTo(200);
        assertThat(first.headers().firstValue("Content-Encoding")).hasValue("gzip");
        assertThat(replay.statusCode()).isEqualTo(200);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.headers().firstValue("Content-Encoding")).hasValue("gzip");
        String decoded = gunzip(first.body());
        assertThat(decoded).isEqualTo("x".repeat(20000));
        assertThat(gunzip(replay.body())).isEqualTo(decoded);
        assertThat(identityReplay.headers().firstValue("Content-Encoding")).isEmpty();
        assertThat(new String(identityReplay.body(), StandardCharsets.UTF_8)).isEqualTo(decoded);
        assertThat(DATABASE.queryLong("select count(*) from orders where note = '" + note + "'")).isEqualTo(1);
    }

    /**
     * With compression on, Jetty also inflates gzip request bodies before any filter: the library meets the body
     * already decompressed under its {@code Content-Encoding} header, and two compressions of one body are one request.
     */
    @Test
    void aRequestBodyJettyInflatesIsFingerprintedAsTheHandlerReadsIt() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "inflated-" + key;
        String body = "{\"note\":\"" + note + "\",\"amount\":\"1.00\"}";

        HttpResponse<byte[]> first = postGzip(key, gzip(body, Deflater.BEST_COMPRESSION));
        HttpResponse<byte[]> replay = postGzip(key, gzip(body, Deflater.NO_COMPRESSION));
        HttpResponse<byte[]> other = postGzip(key, gzip(body.replace("1.00", "2.00"), Deflater.BEST_COMPRESSION));

        assertThat(first.statusCode()).as(new String(first.body(), StandardCharsets.UTF_8)).isEqualTo(201);
        assertThat(replay.statusCode()).isEqualTo(201);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(other.statusCode()).as("another body under the key").isEqualTo(422);
        assertThat(DATABASE.queryLong("select count(*) from orders where note = '" + note + "'")).isEqualTo(1);
    }

    private HttpResponse<byte[]> postGzip(String key, byte[] body) throws IOException, InterruptedException {
        return http.send(HttpRequest.newBuilder(URI.create("http://localhost:" + port + "/orders"))
                .header("Content-Type", "application/json").header("Content-Encoding", "gzip")
                .header("Idempotency-Key", key).POST(HttpRequest.BodyPublishers.ofByteArray(body)).build(),
                HttpResponse.BodyHandlers.ofByteArray());
    }

    private static byte[] gzip(String text, int level) throws IOException {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        try (GZIPOutputStream out = new GZIPOutputStream(bytes) {
            {
                def.setLevel(level);
            }
        }) {
            out.write(text.getBytes(StandardCharsets.UTF_8));
        }
        return bytes.toByteArray();
    }

    private HttpResponse<byte[]> send(String path, String key, String body, boolean gzip)
            throws IOException, InterruptedException {
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                .header("Content-Type", "application/json").POST(HttpRequest.BodyPublishers.ofString(body));
        if (key != null) {
            request.header("Idempotency-Key", key);
        }
        if (gzip) {
            request.header("Accept-Encoding", "gzip");
        }
        return http.send(request.build(), HttpResponse.BodyHandlers.ofByteArray());
    }

    private static String gunzip(byte[] bytes) throws IOException {
        try (GZIPInputStream in = new GZIPInputStream(new ByteArrayInputStream(bytes))) {
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        }
    }
}
