package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.springframework.test.context.TestPropertySource;

import java.net.http.HttpResponse;
import java.util.List;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Hop-by-hop headers (RFC 9110, section 7.6.1) are never stored or replayed, even when the application lists them
 * among the replayed headers: they describe the connection the first answer was sent on, and replayed on another one
 * they would tell the client about a connection it does not have (close it, upgrade it, expect trailers).
 */
@TestPropertySource(properties = {
        "idempotency.replayed-headers=Content-Type,Location,Connection,Keep-Alive,Proxy-Connection,TE,Trailer,"
                + "Transfer-Encoding,Upgrade",
        "idempotency.replay-cache.max-entries=0"})
class HopByHopHeadersIntegrationTest extends OrdersApplicationTest {

    private static final List<String> HOP_BY_HOP = List.of("Connection", "Keep-Alive", "Proxy-Connection", "TE",
            "Trailer", "Transfer-Encoding", "Upgrade");

    @Test
    void hopByHopHeadersAreNeverStoredEvenWhenListed() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"hop-" + key + "\"}";

        HttpResponse<byte[]> first = post("/orders/hop-by-hop", key, body);
        HttpResponse<byte[]> replay = post("/orders/hop-by-hop", key, body);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(first.headers().firstValue("Keep-Alive")).as("the first answer is sent as the handler made it")
                .isPresent();
        assertThat(storedHeaderNames(key)).contains("location")
                .doesNotContainAnyElementsOf(HOP_BY_HOP.stream().map(String::toLowerCase).toList());
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.headers().firstValue("Location")).isEqualTo(first.headers().firstValue("Location"));
        for (String name : List.of("Keep-Alive", "Proxy-Connection", "Upgrade", "Trailer", "TE")) {
            assertThat(replay.headers().firstValue(name)).as(name).isEmpty();
        }
    }

    @Test
    void noHopByHopHeaderIsAmongThoseStored() {
        assertThat(IdempotencyFilter.storedHeaderNames(HOP_BY_HOP)).isEmpty();
        assertThat(IdempotencyFilter.storedHeaderNames(HOP_BY_HOP.stream().map(String::toUpperCase).toList()))
                .isEmpty();
    }
}
