package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.springframework.test.context.TestPropertySource;

import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Boot's problem details for Spring MVC's exceptions ({@code spring.mvc.problemdetails.enabled}): a handler that throws
 * {@code ResponseStatusException} or {@code ErrorResponseException} is answered with the application's RFC 9457
 * document, as without {@code @Idempotent}, and nothing of it is kept or replayed, whatever the status.
 */
@TestPropertySource(properties = "spring.mvc.problemdetails.enabled=true")
class ProblemDetailsIntegrationTest extends OrdersApplicationTest {

    @Test
    void aResponseStatusExceptionIsAnsweredAsWithoutTheLibraryAndRolledBack() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"status-exception-" + key + "\"}";

        HttpResponse<byte[]> unguarded = send(request("/mvc/unguarded/status-exception",
                "{\"note\":\"status-exception-u-" + key + "\"}").build());
        HttpResponse<byte[]> first = post("/mvc/status-exception", key, body);
        HttpResponse<byte[]> retry = post("/mvc/status-exception", key, body);

        assertThat(unguarded.statusCode()).isEqualTo(422);
        assertThat(unguarded.headers().firstValue("Content-Type")).hasValue("application/problem+json");
        for (HttpResponse<byte[]> response : java.util.List.of(first, retry)) {
            assertThat(response.statusCode()).isEqualTo(422);
            assertThat(response.headers().firstValue("Content-Type")).hasValue("application/problem+json");
            assertThat(new String(response.body(), StandardCharsets.UTF_8))
                    .isEqualTo(new String(unguarded.body(), StandardCharsets.UTF_8).replace("/unguarded", ""));
            assertThat(response.headers().firstValue("Idempotent-Replayed")).isEmpty();
        }
        assertThat(rows("status-exception-u-" + key)).isEqualTo(1);
        assertThat(rows("status-exception-" + key)).isZero();
        assertThat(keyRows(key)).isZero();
    }

    @Test
    void anErrorResponseExceptionIsRolledBackEvenWithAStorableStatus() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"error-response-" + key + "\"}";

        HttpResponse<byte[]> first = post("/mvc/error-response", key, body);
        HttpResponse<byte[]> retry = post("/mvc/error-response", key, body);

        for (HttpResponse<byte[]> response : java.util.List.of(first, retry)) {
            assertThat(response.statusCode()).isEqualTo(400);
            assertThat(response.headers().firstValue("Content-Type")).hasValue("application/problem+json");
            assertThat(new String(response.body(), StandardCharsets.UTF_8))
                    .contains("\"status\":400", "\"instance\":\"/mvc/error-response\"");
            assertThat(response.headers().firstValue("Idempotent-Replayed")).isEmpty();
        }
        assertThat(rows("error-response-" + key)).isZero();
        assertThat(keyRows(key)).isZero();
    }
}
