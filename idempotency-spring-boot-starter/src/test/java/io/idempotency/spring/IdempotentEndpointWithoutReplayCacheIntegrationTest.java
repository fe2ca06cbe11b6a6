package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.springframework.test.context.TestPropertySource;

import java.net.http.HttpResponse;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@link IdempotentEndpointIntegrationTest} with the in-memory replay cache off — neither answers nor completed
 * requests remembered — so that every replay and every refused reuse of a key is decided by a claim in PostgreSQL, not
 * by the instance's memory of it.
 */
@TestPropertySource(properties = {"idempotency.replay-cache.max-entries=0",
        "idempotency.replay-cache.completed-keys=0"})
class IdempotentEndpointWithoutReplayCacheIntegrationTest extends IdempotentEndpointIntegrationTest {

    @Test
    void everyAnswerComesFromTheStoredRecord() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "no-cache-" + key;
        String body = "{\"note\":\"" + note + "\"}";
        assertThat(post("/orders", key, body).statusCode()).isEqualTo(201);
        assertThat(post("/orders", key, body).headers().firstValue("Idempotent-Replayed")).hasValue("true");

        // with the record gone, nothing remembers the key: the request runs again (a cache would have replayed it)
        DATABASE.queryString("delete from idempotency_keys where idempotency_key = '" + key + "'");
        HttpResponse<byte[]> again = post("/orders", key, body);

        assertThat(again.statusCode()).isEqualTo(201);
        assertThat(again.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(rows(note)).isEqualTo(2);
    }
}
