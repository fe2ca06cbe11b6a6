package io.idempotency.spring;

import io.idempotency.spring.app.ValidatedController;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.beans.factory.annotation.Autowired;

import java.net.http.HttpResponse;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A controller whose arguments Spring's method-validation proxy checks (class-level {@code @Validated}): Spring MVC
 * leaves the checking to the proxy, whose advice runs inside the {@code @Idempotent} advice. A request it refuses
 * must leave nothing that holds the key, as a request Spring MVC refuses while binding does: the client corrects it
 * and sends it again under the same key.
 */
class MethodValidationIntegrationTest extends OrdersApplicationTest {

    @Autowired
    ValidatedController controller;

    @ParameterizedTest
    @ValueSource(strings = {"/validated/orders", "/validated/charges"})
    void aRequestTheValidationRefusesLeavesNothingAndTheCorrectedRequestRunsUnderTheSameKey(String path)
            throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "validated-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> refused = send(request(path, body).header("Idempotency-Key", key)
                .header("X-Quantity", "11").build());

        assertThat(refused.statusCode()).isEqualTo(400);
        assertThat(rows(note)).isZero();
        // the default mode rolls the claim back; intent-first had committed it, and releases it: nothing ran
        assertThat(DATABASE.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key + "'"))
                .isZero();

        HttpResponse<byte[]> corrected = send(request(path, body).header("Idempotency-Key", key)
                .header("X-Quantity", "3").build());
        HttpResponse<byte[]> replay = send(request(path, body).header("Idempotency-Key", key)
                .header("X-Quantity", "3").build());

        assertThat(corrected.statusCode()).isEqualTo(201);
        assertThat(replay.statusCode()).isEqualTo(201);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void aRefusedAnswerCameAfterTheHandlerRanSoIntentFirstKeepsItsClaimForTheResolver() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "unanswered-" + key;

        HttpResponse<byte[]> refused = post("/validated/unanswered-charges", key, "{\"note\":\"" + note + "\"}");

        assertThat(refused.statusCode()).isEqualTo(400);
        assertThat(rows(note)).isZero(); // the local write rolled back
        assertThat(DATABASE.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key
                + "' and status = 'PROCESSING'")).isEqualTo(1);
    }

    /**
     * The handler calls itself through its proxy, and the validation refuses that call's arguments: the refusal names
     * the handler's own method and object, but comes after its body ran (and made its external call), so the outcome
     * is unknown and the claim stays for the resolver.
     */
    @Test
    void aRefusalOfACallTheHandlerMadeToItselfCameAfterItsBodyRanSoIntentFirstKeepsItsClaim() throws Exception {
        String key = UUID.randomUUID().toString();
        int calls = controller.relayedCalls();

        HttpResponse<byte[]> refused = send(request("/validated/relayed-charges", "{\"note\":\"relayed-" + key + "\"}")
                .header("Idempotency-Key", key).header("X-Quantity", "3").build());

        assertThat(refused.statusCode()).isEqualTo(400);
        assertThat(controller.relayedCalls()).isEqualTo(calls + 1);
        assertThat(DATABASE.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key
                + "' and status = 'PROCESSING'")).isEqualTo(1);
    }
}
