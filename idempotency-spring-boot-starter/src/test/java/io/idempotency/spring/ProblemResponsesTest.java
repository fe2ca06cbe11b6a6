package io.idempotency.spring;

import static org.assertj.core.api.Assertions.assertThat;

import io.idempotency.core.StoredResponse;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;

/** The problem answers of an application that builds its {@link ProblemResponses} itself, with the defaults. */
class ProblemResponsesTest {

    @Test
    void aReusedKeyIsAnswered422ByDefaultNeverAStatusThatTellsTheClientToRetry() {
        ProblemResponses problems = new ProblemResponses(ProblemResponses.DEFAULT_TYPE_BASE);

        StoredResponse answer = problems.render(ProblemResponses.Problem.KEY_MISMATCH, "reused", "/payments");

        assertThat(answer.status()).isEqualTo(422);
        assertThat(problems.status(ProblemResponses.Problem.KEY_MISMATCH)).isEqualTo(422);
        assertThat(answer.headers()).containsExactly(
                new StoredResponse.Header("Content-Type", "application/problem+json"));
        assertThat(new String(answer.body(), StandardCharsets.UTF_8))
                .contains("\"type\":\"" + ProblemResponses.DEFAULT_TYPE_BASE + "idempotency-key-mismatch\"")
                .contains("\"status\":422");
    }
}
