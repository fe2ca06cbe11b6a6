package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.springframework.test.context.TestPropertySource;

import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.Locale;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Boot's {@code CharacterEncodingFilter} forcing the response encoding: it runs before the idempotency filter and sets
 * UTF-8 on the response before any handler. Text a handler writes through the servlet's writer must come out as it
 * does without {@code @Idempotent}, on the first execution and on every replay.
 */
@TestPropertySource(properties = "spring.servlet.encoding.force-response=true")
class ForcedResponseEncodingIntegrationTest extends OrdersApplicationTest {

    @Test
    void textIsEncodedAsTheContainerWouldEncodeItAndReplayedAlike() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"forced-" + key + "\"}";

        HttpResponse<byte[]> unguarded = send(request("/orders/container-text/unguarded",
                "{\"note\":\"forced-unguarded-" + key + "\"}").build());
        HttpResponse<byte[]> first = post("/orders/container-text", key, body);
        HttpResponse<byte[]> replay = post("/orders/container-text", key, body);

        assertThat(unguarded.body()).as("the container alone").isEqualTo("caf\u00e9 \u20ac".getBytes(StandardCharsets.UTF_8));
        assertThat(contentType(unguarded)).isEqualTo("text/plain;charset=utf-8");
        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(first.body()).isEqualTo(unguarded.body());
        assertThat(contentType(first)).isEqualTo(contentType(unguarded));
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(unguarded.body());
        assertThat(contentType(replay)).isEqualTo(contentType(unguarded));
        assertThat(rows("forced-" + key)).isEqualTo(1);
    }

    private static String contentType(HttpResponse<byte[]> response) {
        return response.headers().firstValue("Content-Type").orElseThrow().toLowerCase(Locale.ROOT).replace(" ", "");
    }
}
