package io.idempotency.core;

import static java.nio.charset.StandardCharsets.UTF_8;
import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.api.Test;

/**
 * A result is a value: its bytes, and whether an earlier execution stored them. A redelivery's result holds a copy of
 * the stored bytes, never the array the first execution returned, so results compare, and print, by their bytes.
 */
class IdempotencyTemplateResultTest {

    @Test
    void resultsWithTheSameBytesAreEqual() {
        IdempotencyTemplate.Result first = new IdempotencyTemplate.Result("applied".getBytes(UTF_8), true);
        IdempotencyTemplate.Result again = new IdempotencyTemplate.Result("applied".getBytes(UTF_8), true);

        assertThat(first).isEqualTo(again).hasSameHashCodeAs(again);
        assertThat(first).isNotEqualTo(new IdempotencyTemplate.Result("declined".getBytes(UTF_8), true))
                .isNotEqualTo(new IdempotencyTemplate.Result("applied".getBytes(UTF_8), false));
    }

    /**
     * A listener's log line shows what it can tell about a result: its length and whether it was replayed — not the
     * array's identity, which says nothing, nor its bytes, which may be a payment's details (as a stored answer's
     * bytes are not shown either).
     */
    @Test
    void aResultPrintsItsLengthAndWhetherItWasReplayed() {
        assertThat(new IdempotencyTemplate.Result("applied".getBytes(UTF_8), true))
                .hasToString("Result[value=7 bytes, replayed=true]");
    }
}
