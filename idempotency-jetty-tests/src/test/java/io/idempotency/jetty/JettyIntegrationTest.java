package io.idempotency.jetty;

import io.idempotency.spring.ProblemResponses;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.boot.web.server.context.WebServerApplicationContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import java.util.zip.Deflater;
import java.util.zip.GZIPOutputStream;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The starter on Jetty instead of Tomcat, over real HTTP, on real PostgreSQL: the answers the container takes part in
 * (errors it renders, the length it frames, forms it parses, sessions it encodes into URLs) are stored, replayed and
 * rolled back as on Tomcat.
 */
@SpringBootTest(classes = JettyApplication.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = {"idempotency.in-flight-wait=200ms", "idempotency.max-stored-body-size=64KB",
                "idempotency.replayed-headers=Content-Type,Location,ETag,Cache-Control,Content-Language"})
class JettyIntegrationTest {

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

    @Autowired
    WebServerApplicationContext context;

    final HttpClient http = HttpClient.newHttpClient();

    @Test
    void theApplicationIsServedByJetty() {
        assertThat(context.getWebServer().getClass().getName()).contains("Jetty");
    }

    @Test
    void theSameRequestIsExecutedOnceAndReplayedByteForByte() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "replay-" + key;
        String body = "{\"note\":\"" + note + "\",\"amount\":\"12.50\"}";

        HttpResponse<byte[]> first = post("/orders", key, body);
        HttpResponse<byte[]> second = post("/orders", key, body);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(first.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(first.headers().firstValue("Set-Cookie")).as("the first answer is sent whole").isPresent();
        assertThat(second.statusCode()).isEqualTo(201);
        assertThat(second.body()).isEqualTo(first.body());
        assertThat(second.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(second.headers().firstValue("Content-Length")).hasValue(String.valueOf(first.body().length));
        for (String header : List.of("Location", "ETag", "Content-Type")) {
            assertThat(second.headers().firstValue(header)).as(header).isEqualTo(first.headers().firstValue(header));
        }
        assertThat(second.headers().firstValue("Set-Cookie")).as("credentials are never stored").isEmpty();
        assertThat(second.headers().firstValue("X-Not-Replayed")).as("headers off the allow-list").isEmpty();
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void theSameKeyWithAnotherBodyIsRefusedAndChangesNothing() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "mismatch-" + key;
        assertThat(post("/orders", key, "{\"note\":\"" + note + "\",\"amount\":\"12.50\"}").statusCode()).isEqualTo(201);

        HttpResponse<byte[]> other = post("/orders", key, "{\"note\":\"" + note + "\",\"amount\":\"99.00\"}");

        assertThat(other.statusCode()).isEqualTo(422);
        assertProblem(other, "idempotency-key-mismatch");
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void aDuplicateWhileTheFirstRunsGets409AndNothingRunsTwice() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "in-flight-" + key;
        String body = "{\"note\":\"" + note + "\"}";
        JettyApplication.Gate.entered = new CountDownLatch(1);
        JettyApplication.Gate.release = new CountDownLatch(1);

        CompletableFuture<HttpResponse<byte[]>> first = CompletableFuture.supplyAsync(() -> {
            try {
                return post("/orders/gated", key, body);
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
        assertThat(JettyApplication.Gate.entered.await(20, TimeUnit.SECONDS)).isTrue();
        HttpResponse<byte[]> duplicate = post("/orders/gated", key, body);
        JettyApplication.Gate.release.countDown();

        assertThat(duplicate.statusCode()).isEqualTo(409);
        assertProblem(duplicate, "idempotency-request-in-progress");
        assertThat(duplicate.headers().firstValue("Retry-After")).isPresent();
        assertThat(first.get(20, TimeUnit.SECONDS).statusCode()).isEqualTo(201);
        assertThat(post("/orders/gated", key, body).headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void aHandlerThatCallsSendErrorLeavesNothingWhateverTheStatus() throws Exception {
        for (int status : new int[] {400, 503}) {
            leavesNothingAndTheRetryRunsAgain("/orders/send-error/" + status, status);
        }
    }

    @Test
    void aHandlerThatThrowsLeavesNothingWhateverStatusItsExceptionHandlerAnswers() throws Exception {
        for (int status : new int[] {400, 404, 500}) {
            leavesNothingAndTheRetryRunsAgain("/orders/fail/" + status, status);
        }
    }

    @Test
    void aRetryableAnswerRollsBackAndAFinalOneIsStored() throws Exception {
        leavesNothingAndTheRetryRunsAgain("/orders/status/503", 503);

        String key = UUID.randomUUID().toString();
        String note = "402-" + key;
        HttpResponse<byte[]> first = post("/orders/status/402", key, "{\"note\":\"" + note + "\"}");
        HttpResponse<byte[]> second = post("/orders/status/402", key, "{\"note\":\"" + note + "\"}");
        assertThat(first.statusCode()).isEqualTo(402);
        assertThat(second.statusCode()).isEqualTo(402);
        assertThat(second.body()).isEqualTo(first.body());
        assertThat(second.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void aFormIsFingerprintedByItsParametersAndStillReadableByTheHandler() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "form-" + key;
        HttpRequest.Builder request = HttpRequest.newBuilder(uri("/orders/form"))
                .header("Content-Type", "application/x-www-form-urlencoded").header("Idempotency-Key", key);

        HttpResponse<byte[]> first = send(request.POST(HttpRequest.BodyPublishers.ofString(
                "note=" + note + "&amount=1")).build());
        HttpResponse<byte[]> replay = send(request.POST(HttpRequest.BodyPublishers.ofString(
                "amount=1&note=" + note)).build());
        HttpResponse<byte[]> other = send(request.POST(HttpRequest.BodyPublishers.ofString(
                "note=" + note + "&amount=999")).build());

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(text(first)).contains("\"amount\":\"1\"");
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).as("parameter order does not matter")
                .hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(other.statusCode()).as("another amount under the key").isEqualTo(422);
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void aFormTheContainerCannotParseIsRefusedAsABadBody() throws Exception {
        // a broken %-escape, bytes invalid in UTF-8, or more parameter names than the container takes (Jetty counts
        // names, not values): it parses the form on the first call that asks for a parameter, the library's own for
        // the fingerprint, and refuses it there
        String manyNames = "amount=1" + IntStream.range(0, 1_200).mapToObj(i -> "&p" + i + "=1")
                .collect(Collectors.joining());
        for (String body : new String[] {"note=broken%ZZ&amount=1", "note=%FF%FE&amount=1", manyNames}) {
            String key = UUID.randomUUID().toString();

            HttpResponse<byte[]> answer = send(HttpRequest.newBuilder(uri("/orders/form"))
                    .header("Content-Type", "application/x-www-form-urlencoded").header("Idempotency-Key", key)
                    .POST(HttpRequest.BodyPublishers.ofString(body)).build());

            assertThat(answer.statusCode()).as(text(answer)).isEqualTo(400);
            assertProblem(answer, "idempotency-body-invalid");
            assertThat(keyRows(key)).isZero();
        }
    }

    @Test
    void aQueryTheContainerCannotParseIsRefusedWhereTheExpressionsReadTheParameters() throws Exception {
        // an endpoint keyed by an expression offers it the parameters, which makes the container parse the query: here
        // bytes that are no UTF-8
        String transaction = UUID.randomUUID().toString();

        HttpResponse<byte[]> answer = send(HttpRequest.newBuilder(uri("/orders/callbacks?trace=%FF%FE"))
                .header("Content-Type", "application/json").POST(HttpRequest.BodyPublishers.ofString(
                        "{\"transactionId\":\"" + transaction + "\",\"amount\":\"1.00\",\"currency\":\"EUR\"}"))
                .build());

        assertThat(answer.statusCode()).as(text(answer)).isEqualTo(400);
        assertProblem(answer, "idempotency-body-invalid");
        assertThat(keyRows(transaction)).isZero();
    }

    @Test
    void twoCompressionsOfOneBodyAreOneRequest() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "gzip-" + key + "-" + "note ".repeat(200);

        HttpResponse<byte[]> first = postGzip(key, gzip(note, Deflater.BEST_COMPRESSION));
        HttpResponse<byte[]> replay = postGzip(key, gzip(note, Deflater.NO_COMPRESSION));
        HttpResponse<byte[]> other = postGzip(key, gzip(note + "!", Deflater.NO_COMPRESSION));

        assertThat(first.statusCode()).as(text(first)).isEqualTo(201);
        assertThat(replay.statusCode()).as(text(replay)).isEqualTo(201);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(other.statusCode()).as(text(other)).isEqualTo(422);
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void anAnswerAboveTheStoredBodyCapIsRolledBackNotCut() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "large-" + key;

        HttpResponse<byte[]> fits = post("/orders/large?size=65536", UUID.randomUUID().toString(),
                "{\"note\":\"" + note + "\"}");
        HttpResponse<byte[]> tooLarge = post("/orders/large?size=65537", key, "{\"note\":\"" + note + "\"}");

        assertThat(fits.statusCode()).isEqualTo(200);
        assertThat(fits.body()).hasSize(65536);
        assertThat(tooLarge.statusCode()).isEqualTo(500);
        assertProblem(tooLarge, "idempotency-response-too-large");
        assertThat(rows(note)).as("only the answer that fits was kept").isEqualTo(1);
        assertThat(keyRows(key)).isZero();
    }

    @Test
    void textWrittenThroughTheServletWriterIsReplayedInItsEncoding() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"text-" + key + "\"}";

        HttpResponse<byte[]> first = post("/orders/text", key, body);
        HttpResponse<byte[]> replay = post("/orders/text", key, body);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(text(first)).endsWith(": caf\u00e9 \u20ac");
        assertThat(first.headers().firstValue("Content-Type")).hasValueSatisfying(
                type -> assertThat(type.toLowerCase().replace(" ", "")).isEqualTo("text/plain;charset=utf-8"));
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(replay.headers().firstValue("Content-Type")).isEqualTo(first.headers().firstValue("Content-Type"));
        assertThat(replay.headers().firstValue("Content-Language"))
                .isEqualTo(first.headers().firstValue("Content-Language"));
    }

    @Test
    void aHeaderTheHandlerSetsAgainIsSentOnceWithItsValue() throws Exception {
        String key = UUID.randomUUID().toString();

        HttpResponse<byte[]> first = send(HttpRequest.newBuilder(uri("/reports")).header("Idempotency-Key", key)
                .POST(HttpRequest.BodyPublishers.noBody()).build());
        HttpResponse<byte[]> replay = send(HttpRequest.newBuilder(uri("/reports")).header("Idempotency-Key", key)
                .POST(HttpRequest.BodyPublishers.noBody()).build());

        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        for (HttpResponse<byte[]> answer : List.of(first, replay)) {
            assertThat(answer.statusCode()).isEqualTo(200);
            assertThat(answer.headers().allValues("Cache-Control")).containsExactly("no-store");
        }
        assertThat(first.headers().allValues("X-Default")).as("a header only set before").containsExactly("kept");
    }

    @Test
    void aSessionIdInAnEncodedUrlIsNeitherStoredNorReplayed() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "session-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> unguarded = post("/unguarded/session", UUID.randomUUID().toString(), body);
        HttpResponse<byte[]> first = post("/orders/session", key, body);
        HttpResponse<byte[]> replay = post("/orders/session", key, body);

        assertThat(unguarded.headers().firstValue("Location")).as("the container encodes the session into URLs")
                .hasValueSatisfying(location -> assertThat(location).containsIgnoringCase(";jsessionid="));
        assertThat(first.statusCode()).isEqualTo(302);
        assertThat(first.headers().firstValue("Set-Cookie")).as("the session is the first client's")
                .hasValueSatisfying(cookie -> assertThat(cookie).startsWith("JSESSIONID="));
        String stored = DATABASE.queryString(
                "select response_headers from idempotency_keys where idempotency_key = '" + key + "'");
        assertThat(stored).containsIgnoringCase("Location:").doesNotContainIgnoringCase("jsessionid");
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.headers().firstValue("Location")).isEqualTo(first.headers().firstValue("Location"))
                .hasValueSatisfying(location -> assertThat(location).contains("/orders/")
                        .doesNotContainIgnoringCase("jsessionid"));
        assertThat(replay.headers().firstValue("Set-Cookie")).as("never the first client's session")
                .isNotEqualTo(first.headers().firstValue("Set-Cookie"));
        assertThat(rows(note)).isEqualTo(1);
    }

    private void leavesNothingAndTheRetryRunsAgain(String path, int status) throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "nothing-" + key;

        HttpResponse<byte[]> first = post(path, key, "{\"note\":\"" + note + "\"}");
        assertThat(first.statusCode()).as(path).isEqualTo(status);
        assertThat(rows(note)).as("rows after %s", path).isZero();
        assertThat(keyRows(key)).as("key rows after %s", path).isZero();

        HttpResponse<byte[]> retry = post(path, key, "{\"note\":\"" + note + "\"}");
        assertThat(retry.statusCode()).as(path).isEqualTo(status);
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).as("%s: not stored, so run again", path)
                .isEmpty();
    }

    private long rows(String note) {
        return DATABASE.queryLong("select count(*) from orders where note = '" + note + "'");
    }

    private long keyRows(String key) {
        return DATABASE.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key + "'");
    }

    private static void assertProblem(HttpResponse<byte[]> response, String type) {
        assertThat(response.headers().firstValue("Content-Type")).hasValueSatisfying(
                value -> assertThat(value).startsWith("application/problem+json"));
        assertThat(text(response)).contains("\"type\":\"" + ProblemResponses.DEFAULT_TYPE_BASE + type + "\"");
    }

    private static String text(HttpResponse<byte[]> response) {
        return new String(response.body(), StandardCharsets.UTF_8);
    }

    private URI uri(String path) {
        return URI.create("http://localhost:" + port + path);
    }

    private HttpResponse<byte[]> post(String path, String key, String body) throws IOException, InterruptedException {
        return send(HttpRequest.newBuilder(uri(path)).header("Content-Type", "application/json")
                .header("Idempotency-Key", key).POST(HttpRequest.BodyPublishers.ofString(body)).build());
    }

    private HttpResponse<byte[]> postGzip(String key, byte[] body) throws IOException, InterruptedException {
        return send(HttpRequest.newBuilder(uri("/orders/compressed")).header("Content-Type", "text/plain")
                .header("Content-Encoding", "gzip").header("Idempotency-Key", key)
                .POST(HttpRequest.BodyPublishers.ofByteArray(body)).build());
    }

    private HttpResponse<byte[]> send(HttpRequest request) throws IOException, InterruptedException {
        return http.send(request, HttpResponse.BodyHandlers.ofByteArray());
    }

    private static byte[] gzip(String text, int level) {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        try (GZIPOutputStream out = new GZIPOutputStream(bytes) {
            {
                def.setLevel(level);
            }
        }) {
            out.write(text.getBytes(StandardCharsets.UTF_8));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return bytes.toByteArray();
    }
}
