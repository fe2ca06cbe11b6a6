package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;

import java.net.http.HttpResponse;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * how-it-works.md, "What the logs, answers and meters reveal": the outcomes every client meets — a first execution, a
 * replay, 409 while the key is in progress, the reused-key refusal, a handler that fails and is rolled back, a
 * malformed key, a body that cannot be fingerprinted — are logged at nothing above DEBUG, so the application's log
 * (at its default level, INFO) holds neither the key nor the body of any of them.
 */
@ExtendWith(OutputCaptureExtension.class)
class RoutineOutcomesLoggingIntegrationTest extends OrdersApplicationTest {

    @Test
    void theOutcomesEveryClientMeetsLogNeitherTheKeyNorTheBody(CapturedOutput output) throws Exception {
        String secret = UUID.randomUUID().toString().replace("-", "");
        String key = "key-" + secret;
        String note = "card-" + secret;
        String body = "{\"note\":\"" + note + "\",\"amount\":\"12.50\"}";

        assertThat(post("/orders", key, body).statusCode()).as("first execution").isEqualTo(201);
        assertThat(post("/orders", key, body).headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(post("/orders", key, "{\"note\":\"" + note + "\",\"amount\":\"99.00\"}").statusCode())
                .as("the key reused with another body").isEqualTo(422);

        // a duplicate that waits out idempotency.in-flight-wait (2 s) behind a slow first request
        String slowKey = "slow-" + key;
        CompletableFuture<HttpResponse<byte[]>> slow = http.sendAsync(request("/orders/slow?millis=4000", body)
                .header("Idempotency-Key", slowKey).build(), HttpResponse.BodyHandlers.ofByteArray());
        awaitHandlerInItsTransaction();
        assertThat(post("/orders/slow?millis=4000", slowKey, body).statusCode()).as("in progress").isEqualTo(409);
        assertThat(slow.get(20, TimeUnit.SECONDS).statusCode()).isEqualTo(201);

        assertThat(post("/orders/fail/500", "failing-" + key, body).statusCode()).as("rolled back").isEqualTo(500);
        assertThat(post("/orders", "malformed " + key, body).statusCode()).as("malformed key").isEqualTo(400);
        HttpResponse<byte[]> duplicateMember = post("/orders", "duplicate-" + key,
                "{\"note\":\"" + note + "\",\"note\":\"" + note + "\"}");
        assertThat(duplicateMember.statusCode()).as("a body with a duplicate member").isEqualTo(400);
        assertProblem(duplicateMember, "idempotency-body-invalid");

        String intentKey = "intent-" + key;
        assertThat(post("/intent/charges", intentKey, body).statusCode()).as("intent-first").isEqualTo(201);
        assertThat(post("/intent/charges", intentKey, body).headers().firstValue("Idempotent-Replayed"))
                .hasValue("true");

        assertThat(output.getAll()).doesNotContain(secret);
    }
}
