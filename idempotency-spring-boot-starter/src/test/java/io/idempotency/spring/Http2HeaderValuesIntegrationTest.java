package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.springframework.test.context.TestPropertySource;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Header values of a handler's answer over HTTP/2 ({@code h2c}), where a field value must not begin or end with a space
 * or a tab (RFC 9113, section 8.2.1): Jetty resets the stream of an answer that has one, and a strict client would
 * reset it itself. Over HTTP/1.1 the client drops that whitespace (RFC 9112, section 5.1), so a value is sent and
 * stored without it, also one that ends with a control character the library turns into a space.
 */
@TestPropertySource(properties = {"server.http2.enabled=true",
        "idempotency.replayed-headers=Content-Type,Location,X-Note"})
class Http2HeaderValuesIntegrationTest extends OrdersApplicationTest {

    final HttpClient h2 = HttpClient.newBuilder().version(HttpClient.Version.HTTP_2).build();

    HttpResponse<byte[]> h2Post(String path, String key, String body) throws Exception {
        HttpResponse<byte[]> response = h2.send(request(path, body).header("Idempotency-Key", key)
                .timeout(Duration.ofSeconds(30)).build(), HttpResponse.BodyHandlers.ofByteArray());
        assertThat(response.version()).as("sent over HTTP/2").isEqualTo(HttpClient.Version.HTTP_2);
        return response;
    }

    @Test
    void aValueEndingInAControlCharacterReachesTheClientFirstAndOnEveryReplay() throws Exception {
        h2.send(HttpRequest.newBuilder(URI.create("http://localhost:" + port + "/orders/wrapped")).GET().build(),
                HttpResponse.BodyHandlers.discarding()); // the h2c upgrade
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"h2-control-" + key + "\"}";

        // the value ends with a DEL, which is sent and stored as a space would be: not at all, at the end of a value
        HttpResponse<byte[]> first = h2Post("/orders/control-characters", key, body);
        HttpResponse<byte[]> replay = h2Post("/orders/control-characters", key, body);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(first.headers().firstValue("X-Note")).hasValue("line one  line two end\ttab");
        assertThat(storedHeaders(key)).contains("X-Note: line one  line two end\ttab\n");
        assertThat(replay.statusCode()).isEqualTo(201);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.headers().firstValue("X-Note")).isEqualTo(first.headers().firstValue("X-Note"));
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(rows("h2-control-" + key)).isOne();
    }
}
