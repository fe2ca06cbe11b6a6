package io.idempotency.jetty;

import io.idempotency.spring.ProblemResponses;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.boot.web.server.context.WebServerApplicationContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.Socket;
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
                "idempotency.replayed-headers=Content-Type,Location,ETag,Cache-Control,Content-Language,X-Note"})
class JettyIntegrationTest {

    static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    static {
        DATABASE.queryString("create table orders (id bigserial primary key, note text not null)");
        DATABASE.queryString("create table order_audit (order_id bigint not null references orders (id)"
                + " deferrable initially deferred)");
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
    void aFormWhoseTypeIsWrittenInCapitalsIsFingerprintedAndStillReadableByTheHandler() throws Exception {
        // media types are case-insensitive: Spring MVC maps this form, and its converter reads it from the body
        for (String type : List.of("Application/X-WWW-Form-Urlencoded", "application/x-www-form-urlencoded")) {
            String key = UUID.randomUUID().toString();
            String note = "form-body-" + key;
            HttpResponse<byte[]> unguarded = send(HttpRequest.newBuilder(uri("/unguarded/form-body"))
                    .header("Content-Type", type)
                    .POST(HttpRequest.BodyPublishers.ofString("note=" + note + "&amount=1")).build());
            HttpRequest.Builder request = HttpRequest.newBuilder(uri("/orders/form-body"))
                    .header("Content-Type", type).header("Idempotency-Key", key);

            HttpResponse<byte[]> first = send(request.POST(HttpRequest.BodyPublishers.ofString(
                    "note=" + note + "&amount=1")).build());
            HttpResponse<byte[]> replay = send(request.POST(HttpRequest.BodyPublishers.ofString(
                    "note=" + note + "&amount=1")).build());
            HttpResponse<byte[]> other = send(request.POST(HttpRequest.BodyPublishers.ofString(
                    "note=" + note + "&amount=999")).build());

            assertThat(text(unguarded)).as("the handler alone reads the form: " + type).contains(note);
            assertThat(first.statusCode()).as(type + ": " + text(first)).isEqualTo(201);
            assertThat(text(first)).as(type).contains("\"amount\":\"1\"");
            assertThat(rows(note)).as(type).isEqualTo(1);
            assertThat(replay.headers().firstValue("Idempotent-Replayed")).as(type).hasValue("true");
            assertThat(other.statusCode()).as(type + ": another amount under the key").isEqualTo(422);
            assertThat(rows(note)).isEqualTo(1);
        }
    }

    @Test
    void aFormTheContainerCannotParseIsRefusedAsABadBody() throws Exception {
        // a broken %-escape, bytes invalid in UTF-8, or more parameter names than the container takes (Jetty counts
        // names, not values): it parses the form on the first call that asks for a parameter, the library's own for
        // the fingerprint, and refuses it there
        String manyNames = "amount=1" + IntStream.range(0, 1_200).mapToObj(i -> "&p" + i + "=1")
                .collect(Collectors.joining());
        String overPostSize = "amount=1&note=" + "n".repeat(250_000); // server.jetty.max-http-form-post-size: 200000B
        for (String body : new String[] {"note=broken%ZZ&amount=1", "note=%FF%FE&amount=1", manyNames, overPostSize}) {
            String key = UUID.randomUUID().toString();

            HttpResponse<byte[]> answer = send(HttpRequest.newBuilder(uri("/orders/form"))
                    .header("Content-Type", "application/x-www-form-urlencoded").header("Idempotency-Key", key)
                    .POST(HttpRequest.BodyPublishers.ofString(body)).build());

            assertThat(answer.statusCode()).as(body.substring(0, 20) + ": " + text(answer)).isEqualTo(400);
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

    @Test
    void flushingAndClosingALargeAnswerSendsNothingBeforeTheCommit() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "flushing-" + key;

        String failed = raw("/capture/flushing?size=20000&failAtCommit=true", key, note, "HTTP/1.1");
        assertThat(failed).as("the commit failed: no 201, nothing of the body").startsWith("HTTP/1.1 500 ")
                .contains("idempotency-commit-failed").doesNotContain("order ");
        assertThat(rows(note)).isZero();

        String first = raw("/capture/flushing?size=20000", key, note, "HTTP/1.1");
        String replay = raw("/capture/flushing?size=20000", key, note, "HTTP/1.1");
        assertThat(head(first)).startsWith("HTTP/1.1 201 ").contains("Content-Length: 20000\r\n");
        assertThat(head(replay)).startsWith("HTTP/1.1 201 ").contains("Idempotent-Replayed: true")
                .contains("Content-Length: 20000\r\n");
        assertThat(body(replay)).isEqualTo(body(first)).hasSize(20000);
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void closingTheWriterSendsNothingBeforeTheCommit() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "writer-closed-" + key;

        String failed = raw("/capture/writer-closed?failAtCommit=true", key, note, "HTTP/1.1");
        assertThat(failed).as("the commit failed: no 201, nothing of the body").startsWith("HTTP/1.1 500 ")
                .contains("idempotency-commit-failed").doesNotContain("order ");
        assertThat(rows(note)).isZero();

        String first = raw("/capture/writer-closed", key, note, "HTTP/1.1");
        String replay = raw("/capture/writer-closed", key, note, "HTTP/1.1");
        assertThat(head(first)).startsWith("HTTP/1.1 201 ").containsIgnoringCase("charset=UTF-8");
        assertThat(body(first)).startsWith("order ").endsWith(" \u00e2\u0082\u00ac"); // the euro sign's UTF-8 bytes
        assertThat(head(replay)).startsWith("HTTP/1.1 201 ").contains("Idempotent-Replayed: true");
        assertThat(body(replay)).isEqualTo(body(first));
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void aDeclaredLengthThatIsWrongNeitherCutsNorStallsTheAnswer() throws Exception {
        for (int declared : new int[] {10, 1000}) {
            String key = UUID.randomUUID().toString();
            String note = "declared-" + key;

            String first = raw("/capture/flushing?size=100&declared=" + declared, key, note, "HTTP/1.1");
            String replay = raw("/capture/flushing?size=100&declared=" + declared, key, note, "HTTP/1.1");

            assertThat(head(first)).as("declared %s", declared).startsWith("HTTP/1.1 201 ")
                    .contains("Content-Length: 100\r\n");
            assertThat(body(first)).hasSize(100);
            assertThat(body(replay)).isEqualTo(body(first));
        }
    }

    @Test
    void aTransferEncodingPassedOnFromUpstreamDoesNotContradictTheLengthTheAnswerIsFramedWith() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "upstream-chunked-" + key;

        String first = raw("/capture/upstream-chunked", key, note, "HTTP/1.1");
        String replay = raw("/capture/upstream-chunked", key, note, "HTTP/1.1");

        assertThat(first).startsWith("HTTP/1.1 201 ");
        assertThat(body(first)).startsWith("order ");
        assertThat(head(first)).as("one framing, the one the body is sent in")
                .contains("Content-Length: " + body(first).length() + "\r\n").doesNotContain("Transfer-Encoding");
        assertThat(head(replay)).startsWith("HTTP/1.1 201 ").contains("Idempotent-Replayed: true")
                .doesNotContain("Transfer-Encoding");
        assertThat(body(replay)).isEqualTo(body(first));
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void trailerFieldsAreSentAfterTheCommitAndNeverForARolledBackAnswer() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "trailers-" + key;

        String failed = raw("/capture/trailers?failAtCommit=true", key, note, "HTTP/1.1");
        assertThat(failed).startsWith("HTTP/1.1 500 ").contains("idempotency-commit-failed")
                .as("the rolled-back order's trailer").doesNotContainIgnoringCase("x-checksum");
        assertThat(rows(note)).isZero();

        String first = raw("/capture/trailers", key, note, "HTTP/1.1");
        assertThat(first).startsWith("HTTP/1.1 201 ").containsIgnoringCase("x-checksum: order-");
        assertThat(rows(note)).isEqualTo(1);

        String key10 = UUID.randomUUID().toString();
        String note10 = "trailers-http10-" + key10;
        String http10 = raw("/capture/trailers", key10, note10, "HTTP/1.0");
        assertThat(http10).as("refused to the handler, which answers with a header instead").startsWith("HTTP/1.1 201 ")
                .containsIgnoringCase("X-Checksum: order-");
        assertThat(body(http10)).startsWith("order ");
        assertThat(rows(note10)).isEqualTo(1);
    }

    @Test
    void aHeadRequestNeverRunsTheHandlerWithoutIdempotency() throws Exception {
        String token = UUID.randomUUID().toString();
        String key = UUID.randomUUID().toString();

        String withoutKey = rawHead(token, null);
        String first = rawHead(token, key);
        String again = rawHead(token, key);

        assertThat(withoutKey).as("a key is required, as for GET").startsWith("HTTP/1.1 400 ");
        assertThat(first).startsWith("HTTP/1.1 200 ").doesNotContain("Idempotent-Replayed");
        assertThat(again).startsWith("HTTP/1.1 200 ").contains("Idempotent-Replayed: true");
        assertThat(first).as("no body").endsWith("\r\n\r\n");
        assertThat(again).as("no body").endsWith("\r\n\r\n");
        String length = first.substring(first.indexOf("Content-Length: "));
        assertThat(again).contains(length.substring(0, length.indexOf("\r\n") + 2));
        assertThat(rows(token)).as("the handler ran once").isEqualTo(1);
    }

    @Test
    void anAnswerLargerThanTheResponseBufferIsSentWholeWithItsLengthFirstAndOnReplay() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "buffer-" + key;

        String first = raw("/orders/large?size=60000", key, note, "HTTP/1.1");
        String replay = raw("/orders/large?size=60000", key, note, "HTTP/1.1");

        assertThat(head(first)).startsWith("HTTP/1.1 200 ").contains("Content-Length: 60000\r\n")
                .doesNotContain("Transfer-Encoding");
        assertThat(body(first)).isEqualTo("x".repeat(60000));
        assertThat(head(replay)).startsWith("HTTP/1.1 200 ").contains("Idempotent-Replayed: true")
                .contains("Content-Length: 60000\r\n").doesNotContain("Transfer-Encoding");
        assertThat(body(replay)).isEqualTo(body(first));
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void anExceptionAnsweredByTheErrorPageKeepsNothingOfWhatTheHandlerWrote() throws Exception {
        for (boolean flushFirst : new boolean[] {false, true}) {
            failureIsAnsweredByTheErrorPageAndKeepsNothing("flushFirst=" + flushFirst, 422);
            failureIsAnsweredByTheErrorPageAndKeepsNothing("unresolved=true&flushFirst=" + flushFirst, 500);
        }
    }

    @Test
    void anExceptionHandlersAnswerReplacesWhatTheHandlerWroteAndFlushedBeforeItThrew() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "problem-" + key;

        String first = raw("/orders/rejected?problem=true&flushFirst=true", key, note, "HTTP/1.1");

        assertThat(head(first)).startsWith("HTTP/1.1 409 ").contains("Content-Type: application/problem+json")
                .contains("Content-Length: " + body(first).length() + "\r\n");
        assertThat(body(first)).as("the exception handler's answer alone, not after the handler's")
                .startsWith("{\"").endsWith("}").contains("\"status\":409");
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
    }

    private void failureIsAnsweredByTheErrorPageAndKeepsNothing(String query, int status) throws IOException {
        String key = UUID.randomUUID().toString();
        String note = "rejected-" + key;
        String path = "/orders/rejected?" + query;

        String first = raw(path, key, note, "HTTP/1.1");
        String retry = raw(path, key, note, "HTTP/1.1");

        assertThat(first).as(query).startsWith("HTTP/1.1 " + status + " ")
                .as("nothing the handler wrote before it threw").doesNotContain("order ");
        assertThat(body(first)).as(query).contains("\"status\":" + status)
                .contains("\"path\":\"/orders/rejected\"");
        assertThat(retry).as(query).startsWith("HTTP/1.1 " + status + " ").doesNotContain("Idempotent-Replayed");
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
    }

    @Test
    void textIsEncodedAsTheContainerWouldEncodeItAndReplayedAlike() throws Exception {
        for (String style : List.of("none", "english", "german")) {
            String key = UUID.randomUUID().toString();
            String body = "{\"note\":\"encoded-" + key + "\"}";

            HttpResponse<byte[]> unguarded = post("/unguarded/encoded/" + style, UUID.randomUUID().toString(),
                    "{\"note\":\"encoded-unguarded-" + key + "\"}");
            HttpResponse<byte[]> first = post("/encoded/" + style, key, body);
            HttpResponse<byte[]> replay = post("/encoded/" + style, key, body);

            assertThat(first.statusCode()).as(style).isEqualTo(201);
            assertThat(first.body()).as(style).isEqualTo(unguarded.body());
            assertThat(first.headers().firstValue("Content-Type")).as(style)
                    .isEqualTo(unguarded.headers().firstValue("Content-Type"));
            assertThat(replay.headers().firstValue("Idempotent-Replayed")).as(style).hasValue("true");
            assertThat(replay.body()).as(style).isEqualTo(unguarded.body());
            assertThat(replay.headers().firstValue("Content-Type")).as(style)
                    .isEqualTo(unguarded.headers().firstValue("Content-Type"));
            assertThat(first.headers().firstValue("Content-Language")).as(style)
                    .isEqualTo(unguarded.headers().firstValue("Content-Language"));
            assertThat(replay.headers().firstValue("Content-Language")).as(style)
                    .isEqualTo(unguarded.headers().firstValue("Content-Language"));
            assertThat(rows("encoded-" + key)).isEqualTo(1);
        }
    }

    @Test
    void earlyHintsNeitherRollBackTheRequestNorLoseItsAnswer() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "early-hints-" + key;

        String first = raw("/early-hints", key, note, "HTTP/1.1");
        String replay = raw("/early-hints", key, note, "HTTP/1.1");

        assertThat(first).as("no interim answer before the commit").startsWith("HTTP/1.1 201 ")
                .doesNotContain("HTTP/1.1 103");
        assertThat(body(first)).startsWith("order ");
        assertThat(rows(note)).isEqualTo(1);
        assertThat(replay).startsWith("HTTP/1.1 201 ").contains("Idempotent-Replayed: true");
        assertThat(body(replay)).isEqualTo(body(first));
    }

    @Test
    void aRedirectOfAChosenStatusIsStoredAndReplayed() throws Exception {
        for (int status : new int[] {302, 303, 307}) {
            String key = UUID.randomUUID().toString();
            String note = "redirect-" + key;

            HttpResponse<byte[]> first = post("/redirect/" + status, key, "{\"note\":\"" + note + "\"}");
            HttpResponse<byte[]> replay = post("/redirect/" + status, key, "{\"note\":\"" + note + "\"}");

            assertThat(first.statusCode()).isEqualTo(status);
            assertThat(first.headers().firstValue("Location")).hasValueSatisfying(
                    location -> assertThat(location).contains("/orders/"));
            assertThat(replay.statusCode()).isEqualTo(status);
            assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
            assertThat(replay.headers().firstValue("Location")).isEqualTo(first.headers().firstValue("Location"));
            assertThat(replay.body()).isEqualTo(first.body());
            assertThat(rows(note)).isEqualTo(1);
        }
    }

    @Test
    void expectContinueFirstAndOnReplayOnOneConnection() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"expect-" + key + "\"}";
        String head = headers("/orders", key, "application/json",
                "Expect: 100-continue\r\nContent-Length: " + body.length());
        try (Connection connection = new Connection()) {
            connection.send(head);
            assertThat(connection.answer()).startsWith("HTTP/1.1 100 ");
            connection.send(body);
            String first = connection.answer();
            connection.send(head);
            assertThat(connection.answer()).startsWith("HTTP/1.1 100 ");
            connection.send(body);
            String replay = connection.answer();
            String next = UUID.randomUUID().toString();
            connection.send(post("/orders", next, "application/json", "{\"note\":\"expect-" + next + "\"}"));
            String afterwards = connection.answer();

            assertThat(first).startsWith("HTTP/1.1 201 ");
            assertThat(replay).startsWith("HTTP/1.1 201 ").contains("Idempotent-Replayed: true");
            assertThat(body(replay)).isEqualTo(body(first));
            assertThat(afterwards).as("the connection serves the next request").startsWith("HTTP/1.1 201 ")
                    .doesNotContain("Idempotent-Replayed");
        }
        assertThat(rows("expect-" + key)).isEqualTo(1);
    }

    @Test
    void aBodyTheAdviceReadsAheadIsReadWholeOnReplayAndMismatch() throws Exception {
        // on a replay or a mismatch the advice is the only reader of the body, and what it leaves unread would be
        // taken for the next request on the connection
        String key = UUID.randomUUID().toString();
        String note = "streamed-" + key + "-" + "s".repeat(20_000);
        try (Connection connection = new Connection()) {
            connection.send(post("/orders/streams", key, "text/plain", note));
            String first = connection.answer();
            connection.send(headers("/orders/streams", key, "text/plain", "Transfer-Encoding: chunked")
                    + chunked(note, 4096));
            String replay = connection.answer();
            connection.send(post("/orders/streams", key, "text/plain", note + "!"));
            String mismatch = connection.answer();
            connection.send(post("/orders/streams", key, "text/plain", note));
            String again = connection.answer();

            assertThat(first).startsWith("HTTP/1.1 201 ");
            assertThat(replay).as("chunked or not, one request").startsWith("HTTP/1.1 201 ")
                    .contains("Idempotent-Replayed: true");
            assertThat(body(replay)).isEqualTo(body(first));
            assertThat(mismatch).startsWith("HTTP/1.1 422 ");
            assertThat(again).startsWith("HTTP/1.1 201 ").contains("Idempotent-Replayed: true");
        }
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void aClientThatLeavesMidBodyLeavesNothingAndItsRetryRuns() throws Exception {
        for (String path : new String[] {"/orders", "/orders/streams"}) {
            String key = UUID.randomUUID().toString();
            String note = "mid-body-" + key;
            String body = "{\"note\":\"" + note + "\"}";
            try (Connection connection = new Connection()) {
                connection.send(headers(path, key, "application/json", "Content-Length: " + (body.length() + 50))
                        + body);
            }
            try (Connection connection = new Connection()) {
                connection.send(headers(path, key, "application/json", "Transfer-Encoding: chunked")
                        + Integer.toHexString(body.length()) + "\r\n" + body + "\r\n");
            }
            Thread.sleep(500);
            assertThat(rows(note)).as(path).isZero();
            assertThat(keyRows(key)).as(path).isZero();

            try (Connection connection = new Connection()) {
                connection.send(post(path, key, "application/json", body));
                assertThat(connection.answer()).as(path).startsWith("HTTP/1.1 201 ")
                        .doesNotContain("Idempotent-Replayed");
            }
            assertThat(rows(path.equals("/orders") ? note : body)).as(path).isEqualTo(1);
        }
    }

    @Test
    void aClientStalledMidBodyHoldsNoKey() throws Exception {
        // the body is read whole before the key is claimed: a client that stops sending holds nothing, and its retry
        // on another connection runs at once instead of waiting for it and getting 409
        for (String path : new String[] {"/orders", "/orders/streams", "/orders/form"}) {
            String key = UUID.randomUUID().toString();
            String note = "stalled-" + key;
            boolean form = path.endsWith("form");
            String type = form ? "application/x-www-form-urlencoded" : "application/json";
            String body = form ? "note=" + note : "{\"note\":\"" + note + "\"}";
            try (Connection stalled = new Connection(); Connection retry = new Connection()) {
                stalled.send(headers(path, key, type, "Content-Length: " + (body.length() + 50)) + body);

                retry.send(post(path, key, type, body));

                assertThat(retry.answer()).as(path).startsWith("HTTP/1.1 201 ").doesNotContain("Idempotent-Replayed");
            }
            assertThat(rows(path.equals("/orders/streams") ? body : note)).as(path).isEqualTo(1);
            assertThat(keyRows(key)).as(path).isEqualTo(1);
        }
    }

    @Test
    void anHttp10ClientGetsTheReplayWithItsLength() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"http10-" + key + "\"}";
        String request = "POST /orders HTTP/1.0\r\nContent-Type: application/json\r\nIdempotency-Key: " + key
                + "\r\nContent-Length: " + body.length() + "\r\n\r\n" + body;

        String first = raw(request);
        String replay = raw(request);

        assertThat(first).startsWith("HTTP/1.1 201 ");
        assertThat(replay).startsWith("HTTP/1.1 201 ").contains("Idempotent-Replayed: true")
                .contains("Content-Length: " + body(first).length() + "\r\n");
        assertThat(body(replay)).isEqualTo(body(first));
    }

    @Test
    void theLibrarysRefusalsKeepTheConnectionOpen() throws Exception {
        // unlike Tomcat, which closes the connection after a 400, 413, 500 or 503 whoever wrote it
        String key = UUID.randomUUID().toString();
        String note = "refusals-" + key;
        String body = "{\"note\":\"" + note + "\"}";
        try (Connection connection = new Connection()) {
            connection.send("POST /orders HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                    + "Content-Length: " + body.length() + "\r\n\r\n" + body);
            String missing = connection.answer();
            connection.send(post("/orders/large?size=65537", key, "application/json", body));
            String tooLarge = connection.answer();
            connection.send(post("/orders", key, "application/json", body));
            String created = connection.answer();

            assertThat(missing).startsWith("HTTP/1.1 400 ").doesNotContain("Connection: close");
            assertThat(tooLarge).startsWith("HTTP/1.1 500 ").contains("idempotency-response-too-large")
                    .doesNotContain("Connection: close");
            assertThat(created).as("the connection serves the next request").startsWith("HTTP/1.1 201 ");
        }
    }

    /**
     * A header value with control characters, and one cut inside a character: the replay carries what the first
     * answer carried.
     */
    @ParameterizedTest
    @CsvSource({"/orders/control-characters, control-", "/orders/cut-header, cut-"})
    void aHeaderValueIsReplayedAsTheFirstAnswerCarriedIt(String path, String prefix) throws Exception {
        String key = UUID.randomUUID().toString();
        String note = prefix + key;

        String first = raw(path, key, note, "HTTP/1.1");
        String replay = raw(path, key, note, "HTTP/1.1");

        assertThat(first).startsWith("HTTP/1.1 201 ");
        assertThat(rows(note)).isOne();
        assertThat(replay).contains("Idempotent-Replayed: true");
        assertThat(header(replay, "X-Note")).isEqualTo(header(first, "X-Note"));
        assertThat(body(replay)).isEqualTo(body(first));
    }

    @Test
    void aHeaderNameNoStoredLineCouldHoldDoesNotFailTheAnswer() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "pseudo-" + key;

        HttpResponse<byte[]> first = post("/orders/pseudo-header", key, "{\"note\":\"" + note + "\"}");
        HttpResponse<byte[]> replay = post("/orders/pseudo-header", key, "{\"note\":\"" + note + "\"}");

        assertThat(first.statusCode()).as(text(first)).isEqualTo(201);
        assertThat(rows(note)).isOne();
        assertThat(replay.statusCode()).isEqualTo(201);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.headers().firstValue("Location")).isEqualTo(first.headers().firstValue("Location"));
        assertThat(replay.body()).isEqualTo(first.body());
    }

    private static String header(String answer, String name) {
        return head(answer).lines().filter(line -> line.regionMatches(true, 0, name + ":", 0, name.length() + 1))
                .findFirst().orElse(null);
    }

    /** One connection, kept open for several requests. */
    private final class Connection implements AutoCloseable {

        final Socket socket;
        final OutputStream out;
        final java.io.InputStream in;

        Connection() throws IOException {
            socket = new Socket("localhost", port);
            socket.setSoTimeout(10_000);
            out = socket.getOutputStream();
            in = socket.getInputStream();
        }

        void send(String text) throws IOException {
            out.write(text.getBytes(StandardCharsets.ISO_8859_1));
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

        /** Head and body of the next answer; a 1xx answer is returned alone. */
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
            if (status.split(" ")[1].startsWith("1")) {
                return head.toString();
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

    private static String post(String path, String key, String contentType, String body) {
        return headers(path, key, contentType, "Content-Length: " + body.getBytes(StandardCharsets.ISO_8859_1).length)
                + body;
    }

    private static String headers(String path, String key, String contentType, String framing) {
        return "POST " + path + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: " + contentType
                + "\r\nIdempotency-Key: " + key + "\r\n" + framing + "\r\n\r\n";
    }

    private static String chunked(String body, int chunk) {
        StringBuilder chunks = new StringBuilder();
        for (int at = 0; at < body.length(); at += chunk) {
            String part = body.substring(at, Math.min(body.length(), at + chunk));
            chunks.append(Integer.toHexString(part.length())).append("\r\n").append(part).append("\r\n");
        }
        return chunks.append("0\r\n\r\n").toString();
    }

    private String rawHead(String token, String key) throws IOException {
        return raw("HEAD /confirmations?token=" + token + " HTTP/1.1\r\nHost: localhost\r\n"
                + (key == null ? "" : "Idempotency-Key: " + key + "\r\n") + "Connection: close\r\n\r\n");
    }

    private String raw(String path, String key, String note, String protocol) throws IOException {
        String body = "{\"note\":\"" + note + "\"}";
        return raw("POST " + path + " " + protocol + "\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                + "TE: trailers\r\nIdempotency-Key: " + key + "\r\nContent-Length: " + body.length()
                + "\r\nConnection: close\r\n\r\n" + body);
    }

    /**
     * Sends {@code request} as it is over a socket of its own and reads the answer to its end, byte for byte. An answer
     * shorter than its declared length fails after 10 s instead of stalling.
     */
    private String raw(String request) throws IOException {
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

    private static String head(String answer) {
        return answer.substring(0, answer.indexOf("\r\n\r\n") + 2);
    }

    private static String body(String answer) {
        return answer.substring(answer.indexOf("\r\n\r\n") + 4);
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
