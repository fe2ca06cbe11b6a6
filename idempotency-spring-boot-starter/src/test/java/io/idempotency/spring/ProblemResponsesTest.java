package io.idempotency.spring;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

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

    @Test
    void aReusedKeyMayBeAnsweredWithAnother4xxButNeverOneThatTellsTheClientToRetry() {
        ProblemResponses problems = new ProblemResponses(ProblemResponses.DEFAULT_TYPE_BASE, 400);
        assertThat(problems.render(ProblemResponses.Problem.KEY_MISMATCH, "reused", "/payments").status())
                .isEqualTo(400);

        for (int refused : new int[] {408, 409, 425, 429, 399, 500}) {
            assertThatThrownBy(() -> new ProblemResponses(ProblemResponses.DEFAULT_TYPE_BASE, refused))
                    .as("%d", refused).isInstanceOf(IllegalArgumentException.class)
                    .hasMessageContaining("not " + refused);
        }
    }
}
