package io.idempotency.spring;

import org.junit.jupiter.api.Test;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.UUID;
import java.util.zip.GZIPInputStream;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * What Spring MVC does around a handler — a {@code ResponseBodyAdvice}, a {@code HandlerInterceptor},
 * {@code @ResponseStatus}, {@code ShallowEtagHeaderFilter} — with and without {@code @Idempotent}: the first answer is
 * the one the application gives without the library, and the replay has its status and bytes.
 */
@org.junit.jupiter.api.extension.ExtendWith(org.springframework.boot.test.system.OutputCaptureExtension.class)
class MvcFeaturesIntegrationTest extends OrdersApplicationTest {

    private static String text(HttpResponse<byte[]> response) {
        return new String(response.body(), StandardCharsets.UTF_8);
    }

    @Test
    void aBodyAdviceWrapsTheFirstAnswerAndTheReplayRepeatsIt() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"wrapped-" + key + "\"}";

        HttpResponse<byte[]> unguarded = send(request("/mvc/unguarded/wrapped", "{\"note\":\"wrapped-u-" + key + "\"}").build());
        HttpResponse<byte[]> first = post("/mvc/wrapped", key, body);
        HttpResponse<byte[]> replay = post("/mvc/wrapped", key, body);

        assertThat(text(unguarded)).contains("\"wrapped\":true").contains("\"data\":{\"id\":");
        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(text(first)).contains("\"wrapped\":true").contains("\"data\":{\"id\":");
        assertThat(first.headers().firstValue("X-Wrapped")).hasValue("yes");
        assertThat(first.headers().firstValue("ETag")).as("ShallowEtagHeaderFilter tags GET only")
                .isEqualTo(unguarded.headers().firstValue("ETag")).isEmpty();
        assertThat(replay.statusCode()).isEqualTo(201);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(replay.headers().firstValue("Content-Length")).hasValue(String.valueOf(first.body().length));
        assertThat(rows("wrapped-" + key)).isEqualTo(1);
    }

    @Test
    void aBodyAdviceThatCannotTakeTheNullOfAnAnsweredRequestLosesNeitherTheReplayNorTheRefusal(
            org.springframework.boot.test.system.CapturedOutput output) throws Exception {
        // the advice's Map.of refuses the null that Spring MVC renders when the handler did not run; nothing resolves
        // that exception, which would otherwise leave the servlet as a 500 to every retry under the key
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"ok-wrapped-" + key + "\"}";

        HttpResponse<byte[]> first = post("/mvc/ok/wrapped", key, body);
        HttpResponse<byte[]> replay = post("/mvc/ok/wrapped", key, body);
        HttpResponse<byte[]> reused = post("/mvc/ok/wrapped", key, "{\"note\":\"ok-wrapped-other-" + key + "\"}");

        assertThat(first.statusCode()).isEqualTo(200);
        assertThat(text(first)).contains("\"wrapped\":true").contains("\"data\":{\"id\":");
        assertThat(replay.statusCode()).as(text(replay)).isEqualTo(200);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(reused.statusCode()).as(text(reused)).isEqualTo(422);
        assertProblem(reused, "idempotency-key-mismatch");
        assertThat(rows("ok-wrapped-" + key)).isEqualTo(1);
        // any client can send replays at will: the same failure is not warned of on each
        for (int i = 0; i < 5; i++) {
            assertThat(post("/mvc/ok/wrapped", key, body).statusCode()).isEqualTo(200);
        }
        assertThat(output.getOut().lines().filter(line -> line.contains(" WARN ")
                && line.contains("was answered without running its handler"))).hasSizeLessThanOrEqualTo(1);
    }

    @Test
    void aBodyAdviceThatFailsRollsTheRequestBack() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"advice-fails-" + key + "\"}";

        HttpResponse<byte[]> unguarded = send(request("/mvc/unguarded/advice-fails",
                "{\"note\":\"advice-fails-u-" + key + "\"}").build());
        HttpResponse<byte[]> first = post("/mvc/advice-fails", key, body);
        HttpResponse<byte[]> retry = post("/mvc/advice-fails", key, body);

        assertThat(unguarded.statusCode()).isEqualTo(500);
        assertThat(first.statusCode()).isEqualTo(500);
        assertThat(retry.statusCode()).isEqualTo(500);
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(rows("advice-fails-" + key)).isZero();
        assertThat(keyRows(key)).isZero();
    }

    @Test
    void anInterceptorThatAnswersInPreHandleClaimsNothing() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"refused-" + key + "\"}";

        HttpResponse<byte[]> refused = send(request("/mvc/intercepted", body).header("Idempotency-Key", key)
                .header("X-Refuse", "1").build());

        assertThat(refused.statusCode()).isEqualTo(403);
        assertThat(text(refused)).isEqualTo("refused by interceptor");
        assertThat(rows("refused-" + key)).isZero();
        assertThat(keyRows(key)).isZero();
    }

    @Test
    void aHeaderAddedInPostHandleReachesTheFirstAnswerButIsNotReplayed() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"post-handle-" + key + "\"}";

        HttpResponse<byte[]> unguarded = send(request("/mvc/unguarded/intercepted",
                "{\"note\":\"post-handle-u-" + key + "\"}").build());
        HttpResponse<byte[]> first = post("/mvc/intercepted", key, body);
        HttpResponse<byte[]> replay = post("/mvc/intercepted", key, body);

        assertThat(unguarded.headers().firstValue("X-Post-Handle")).hasValue("seen");
        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(first.headers().firstValue("X-Post-Handle")).hasValue("seen");
        assertThat(replay.headers().firstValue("X-Post-Handle")).isEmpty();
        assertThat(replay.body()).isEqualTo(first.body());
    }

    @Test
    void anAfterCompletionWriteIsPartOfTheRequestsTransaction() throws Exception {
        String key = UUID.randomUUID().toString();
        HttpResponse<byte[]> stored = send(request("/mvc/intercepted", "{\"note\":\"audited-" + key + "\"}")
                .header("Idempotency-Key", key).header("X-Audit", "audit-" + key).build());

        assertThat(stored.statusCode()).isEqualTo(201);
        assertThat(rows("audit-" + key)).isEqualTo(1);
        assertThat(DATABASE.queryLong("select count(distinct xmin::text) from orders where note in ('audited-" + key
                + "', 'audit-" + key + "')")).as("committed in one transaction").isEqualTo(1);

        // an answer that is not stored rolls back what afterCompletion wrote too
        String unstored = UUID.randomUUID().toString();
        HttpResponse<byte[]> unavailable = send(request("/mvc/intercepted/unavailable",
                "{\"note\":\"unavailable-" + unstored + "\"}").header("Idempotency-Key", unstored)
                .header("X-Audit", "audit-" + unstored).build());

        assertThat(unavailable.statusCode()).isEqualTo(503);
        assertThat(rows("unavailable-" + unstored)).isZero();
        assertThat(rows("audit-" + unstored)).isZero();
    }

    @Test
    void aStatementThatFailsInAfterCompletionFailsTheCommit() throws Exception {
        String key = UUID.randomUUID().toString();

        HttpResponse<byte[]> unguarded = send(request("/mvc/unguarded/intercepted",
                "{\"note\":\"audit-fails-u-" + key + "\"}").header("X-Audit-Fails", "1").build());
        HttpResponse<byte[]> guarded = send(request("/mvc/intercepted", "{\"note\":\"audit-fails-" + key + "\"}")
                .header("Idempotency-Key", key).header("X-Audit-Fails", "1").build());

        assertThat(unguarded.statusCode()).as("Spring MVC logs the failure and keeps the answer").isEqualTo(201);
        assertThat(rows("audit-fails-u-" + key)).isEqualTo(1);
        assertThat(guarded.statusCode()).isEqualTo(500);
        assertProblem(guarded, "idempotency-commit-failed");
        assertThat(rows("audit-fails-" + key)).isZero();
        assertThat(keyRows(key)).isZero();
    }

    @Test
    void aBodyTheHandlerCompressedIsReplayedWithItsContentEncoding() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"gzipped-" + key + "\"}";

        HttpResponse<byte[]> first = post("/mvc/gzipped", key, body);
        HttpResponse<byte[]> replay = post("/mvc/gzipped", key, body);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(first.headers().firstValue("Content-Encoding")).hasValue("gzip");
        assertThat(gunzip(first.body())).startsWith("{\"id\":");
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(replay.headers().firstValue("Content-Encoding")).hasValue("gzip");
    }

    @Test
    void cachingHeadersReachTheFirstAnswerOnly() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"caching-" + key + "\"}";

        HttpResponse<byte[]> first = post("/mvc/caching", key, body);
        HttpResponse<byte[]> replay = post("/mvc/caching", key, body);

        assertThat(first.headers().firstValue("Cache-Control")).hasValue("no-store");
        assertThat(first.headers().firstValue("Vary")).hasValue("Accept-Language");
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.headers().firstValue("Cache-Control")).isEmpty();
        assertThat(replay.headers().firstValue("Vary")).isEmpty();
        assertThat(replay.body()).isEqualTo(first.body());
    }

    @Test
    void headAndOptionsOnAnIdempotentPostPathAreAnsweredAsWithoutTheLibrary() throws Exception {
        for (String method : new String[] {"HEAD", "OPTIONS"}) {
            HttpResponse<byte[]> guarded = send(HttpRequest.newBuilder(URI.create("http://localhost:" + port + "/mvc/wrapped"))
                    .method(method, HttpRequest.BodyPublishers.noBody()).header("Idempotency-Key", "k").build());
            HttpResponse<byte[]> unguarded = send(HttpRequest.newBuilder(URI.create("http://localhost:" + port
                    + "/mvc/unguarded/wrapped")).method(method, HttpRequest.BodyPublishers.noBody()).build());

            assertThat(guarded.statusCode()).as(method).isEqualTo(unguarded.statusCode());
            assertThat(guarded.headers().firstValue("Allow")).as(method).isEqualTo(unguarded.headers().firstValue("Allow"))
                    .isPresent();
            assertThat(guarded.body()).isEqualTo(unguarded.body());
        }
        assertThat(keyRows("k")).isZero();
    }

    static String gunzip(byte[] bytes) throws IOException {
        try (GZIPInputStream in = new GZIPInputStream(new ByteArrayInputStream(bytes))) {
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        }
    }

    /**
     * An interceptor's {@code postHandle} calls an {@code @Idempotent} service method after the handler returned:
     * it is part of the request (neither the handler run again nor a misplaced annotation), and its write is kept
     * with the handler's.
     */
    @Test
    void anIdempotentMethodCalledInPostHandleIsPartOfTheRequest() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "post-handled-" + key;

        HttpResponse<byte[]> first = send(request("/mvc/post-handled", "{\"note\":\"" + note + "\"}")
                .header("Idempotency-Key", key).header("X-Post-Note", note + "-post").build());

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(rows(note)).isEqualTo(1);
        assertThat(rows(note + "-post")).isEqualTo(1);
        assertThat(keyRows(key)).isEqualTo(1);
    }

    /**
     * An {@code @ExceptionHandler} calls an {@code @Idempotent} service method after the handler failed: the call is
     * not taken for a retry of the handler, the handler's write is rolled back, and the exception handler's answer
     * reaches the client.
     */
    @Test
    void anIdempotentMethodCalledByAnExceptionHandlerIsNoRetryOfTheHandler() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "refused-note-" + key;

        HttpResponse<byte[]> first = post("/mvc/refused-note", key, "{\"note\":\"" + note + "\"}");

        assertThat(first.statusCode()).isEqualTo(422);
        assertThat(text(first)).contains("\"refusal\":");
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
    }
}
