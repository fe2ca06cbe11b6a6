package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.springframework.test.context.TestPropertySource;

import java.net.http.HttpResponse;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Boot's response compression ({@code server.compression.enabled}), which the container applies as it sends the
 * answer, after the idempotency filter: the answer is stored as the handler rendered it, and the first answer and
 * every replay are compressed alike for a client that accepts gzip, and decode to the same bytes. The endpoint also
 * passes through {@code ShallowEtagHeaderFilter} inside the idempotency filter, which tags no POST.
 */
@TestPropertySource(properties = "server.compression.enabled=true")
class CompressedResponsesIntegrationTest extends OrdersApplicationTest {

    @Test
    void theFirstAnswerAndTheReplayAreCompressedAlike() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"compressed-" + key + "\"}";

        HttpResponse<byte[]> unguarded = send(request("/mvc/unguarded/large", "{\"note\":\"compressed-u-" + key + "\"}")
                .header("Accept-Encoding", "gzip").build());
        HttpResponse<byte[]> first = send(request("/mvc/large", body).header("Idempotency-Key", key)
                .header("Accept-Encoding", "gzip").build());
        HttpResponse<byte[]> replay = send(request("/mvc/large", body).header("Idempotency-Key", key)
                .header("Accept-Encoding", "gzip").build());
        HttpResponse<byte[]> identityReplay = post("/mvc/large", key, body);

        assertThat(unguarded.headers().firstValue("Content-Encoding")).hasValue("gzip");
        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(first.headers().firstValue("Content-Encoding")).hasValue("gzip");
        assertThat(first.headers().firstValue("ETag")).isEmpty();
        assertThat(replay.statusCode()).isEqualTo(201);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.headers().firstValue("Content-Encoding")).hasValue("gzip");
        String decoded = MvcFeaturesIntegrationTest.gunzip(first.body());
        assertThat(decoded).contains("\"padding\":\"xxxx");
        assertThat(MvcFeaturesIntegrationTest.gunzip(replay.body())).isEqualTo(decoded);
        assertThat(identityReplay.headers().firstValue("Content-Encoding")).isEmpty();
        assertThat(new String(identityReplay.body(), java.nio.charset.StandardCharsets.UTF_8)).isEqualTo(decoded);
        assertThat(rows("compressed-" + key)).isEqualTo(1);
    }
}
