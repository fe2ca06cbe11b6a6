package io.idempotency.spring;

import org.junit.jupiter.api.Test;

import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * What a retry that negotiates otherwise than the first request gets (docs/how-it-works.md, "Content negotiation"):
 * the stored answer, as it was first given, whatever the retry's {@code Accept}, {@code Accept-Encoding} or
 * conditional headers say; but an endpoint that declares what it produces is refused by Spring MVC, before the
 * library, to a retry whose {@code Accept} does not admit it.
 */
class RetryNegotiationIntegrationTest extends OrdersApplicationTest {

    @Test
    void aRetryWhoseAcceptTheEndpointDoesNotProduceGets406AndTheKeyStaysAnswered() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "negotiated-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> first = send(request("/shapes/text", body).header("Idempotency-Key", key)
                .header("Accept", "text/plain").build());
        HttpResponse<byte[]> json = send(request("/shapes/text", body).header("Idempotency-Key", key)
                .header("Accept", "application/json").build());
        HttpResponse<byte[]> any = send(request("/shapes/text", body).header("Idempotency-Key", key)
                .header("Accept", "*/*").build());

        assertThat(first.statusCode()).isEqualTo(200);
        assertThat(json.statusCode()).as("refused by the mapping's produces, before the replay").isEqualTo(406);
        assertThat(json.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(any.statusCode()).isEqualTo(200);
        assertThat(any.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(any.body()).isEqualTo(first.body());
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void aReplayIsSentWholeWhateverTheRetrysConditionalHeaders() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "conditional-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> first = post("/orders", key, body);
        String etag = first.headers().firstValue("ETag").orElseThrow();
        HttpResponse<byte[]> conditional = send(request("/orders", body).header("Idempotency-Key", key)
                .header("If-None-Match", etag).header("If-Modified-Since", "Fri, 01 Jan 2100 00:00:00 GMT").build());

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(conditional.statusCode()).as("neither 304 nor 412").isEqualTo(201);
        assertThat(conditional.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(conditional.headers().firstValue("ETag")).hasValue(etag);
        assertThat(conditional.body()).isEqualTo(first.body());
        assertThat(rows(note)).isEqualTo(1);
    }

    /**
     * A refusal of the request's precondition (412, or 428 for a request without one) answers headers the fingerprint
     * leaves out: it is not stored, and the retry under the same key with the precondition it asked for runs.
     */
    @Test
    void answersToPreconditionsAreNotStoredAndTheRetryWithTheRightOneRuns() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "precondition-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> required = send(patch(key, body).build());
        HttpResponse<byte[]> stale = send(patch(key, body).header("If-Match", "\"v1\"").build());
        HttpResponse<byte[]> current = send(patch(key, body).header("If-Match", "\"v2\"").build());
        HttpResponse<byte[]> replay = send(patch(key, body).header("If-Match", "\"v2\"").build());

        assertThat(required.statusCode()).isEqualTo(428);
        assertThat(stale.statusCode()).isEqualTo(412);
        assertThat(stale.headers().firstValue("Idempotent-Replayed")).as("the 428 was not stored").isEmpty();
        assertThat(current.statusCode()).as("the 412 was not stored").isEqualTo(200);
        assertThat(current.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(replay.statusCode()).isEqualTo(200);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(rows(note)).as("the refused attempts' rows rolled back").isEqualTo(1);
    }

    private HttpRequest.Builder patch(String key, String body) {
        return request("/orders/conditional", body).header("Idempotency-Key", key)
                .method("PATCH", HttpRequest.BodyPublishers.ofString(body));
    }

    @Test
    void aBodyTheHandlerCompressedIsReplayedCompressedToARetryThatAcceptsNoCoding() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "coded-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> first = send(request("/mvc/gzipped", body).header("Idempotency-Key", key)
                .header("Accept-Encoding", "gzip").build());
        HttpResponse<byte[]> identity = send(request("/mvc/gzipped", body).header("Idempotency-Key", key)
                .header("Accept-Encoding", "identity").build());

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(identity.statusCode()).isEqualTo(201);
        assertThat(identity.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(identity.headers().firstValue("Content-Encoding")).hasValue("gzip");
        assertThat(identity.body()).isEqualTo(first.body());
        assertThat(MvcFeaturesIntegrationTest.gunzip(identity.body())).startsWith("{\"id\":");
        assertThat(new String(identity.body(), StandardCharsets.ISO_8859_1)).doesNotContain("\"id\"");
        assertThat(rows(note)).isEqualTo(1);
    }
}
