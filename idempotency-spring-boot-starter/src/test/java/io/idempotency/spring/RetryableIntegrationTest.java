package io.idempotency.spring;

import io.idempotency.spring.app.GatewayResolver;
import io.idempotency.spring.app.RetryingController;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.beans.factory.annotation.Autowired;

import java.net.http.HttpResponse;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Spring's {@code @Retryable} on an {@code @Idempotent} handler. Its advice sits outside the {@code @Idempotent}
 * advice, so an attempt after a failure enters the advice again: it must be a new attempt under the key — its own
 * transaction, the key claimed again — never the handler run without idempotency, whose effects would be kept with
 * no record of its answer and made again by the client's next retry.
 */
class RetryableIntegrationTest extends OrdersApplicationTest {

    @Autowired
    RetryingController controller;

    @Autowired
    GatewayResolver resolver;

    @ParameterizedTest
    @ValueSource(strings = {"/retried/orders", "/retried/declined-charges"})
    void theAttemptAfterAFailureRunsUnderTheKeyAndItsAnswerIsReplayed(String path) throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "retried-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> first = post(path, key, body);
        HttpResponse<byte[]> replay = post(path, key, body);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(controller.attempts(note)).isEqualTo(2);
        assertThat(rows(note)).isEqualTo(1); // the failed attempt's write rolled back, the second one's kept
        assertThat(DATABASE.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key
                + "' and status = 'SUCCEEDED'")).isEqualTo(1);
        assertReplayedAfterTwoAttempts(first, replay, note);
    }

    @Test
    void afterAnUnknownOutcomeIntentFirstDoesNotRunTheHandlerAgainUntilTheClaimIsResolved() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "unknown-" + key;

        HttpResponse<byte[]> first = post("/retried/unknown-charges", key, "{\"note\":\"" + note + "\"}");

        assertThat(first.statusCode()).isEqualTo(409);
        assertProblem(first, "idempotency-request-in-progress");
        assertThat(controller.attempts(note)).isEqualTo(1);
        assertThat(rows(note)).isZero();
        assertThat(DATABASE.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key
                + "' and status = 'PROCESSING'")).isEqualTo(1);
    }

    /**
     * The second attempt's claim fails with the application's own exception (the resolver of the stale claim cannot
     * reach the gateway), which its exception handler answers: that answer is the client's, although the first
     * attempt had switched the response to capture.
     */
    @Test
    void anAttemptWhoseClaimFailsAfterAnEarlierAttemptSendsTheAnswerToItsFailure() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "stale-" + key;
        resolver.decideNext(() -> {
            throw new RetryingController.GatewayUnreachable();
        });

        HttpResponse<byte[]> first = post("/retried/stale-charges", key, "{\"note\":\"" + note + "\"}");

        assertThat(first.statusCode()).isEqualTo(503);
        assertThat(new String(first.body(), java.nio.charset.StandardCharsets.UTF_8))
                .isEqualTo("the gateway cannot be asked");
        assertThat(first.headers().firstValue("Retry-After")).hasValue("5");
        assertThat(controller.attempts(note)).as("the second attempt did not run the handler").isEqualTo(1);
        assertThat(rows(note)).isZero();
        assertThat(status(key)).as("unresolved: left for a later resolution").isEqualTo("PROCESSING");
    }

    /**
     * An advice between {@code @Retryable} and {@code @Idempotent} refuses what the handler returned ({@code
     * @PostAuthorize} does): the handler did not fail, but its attempt has ended all the same, and the next one must
     * not run in the same transaction, on top of the refused attempt's writes.
     */
    @Test
    void theAttemptAfterAnAnswerRefusedOutsideTheAdviceRunsUnderTheKeyWithoutTheRefusedAttemptsWrites()
            throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "refused-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> first = post("/retried/refused-orders", key, body);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(controller.attempts(note)).isEqualTo(2);
        assertThat(rows(note)).isEqualTo(1); // the refused attempt's write rolled back

        HttpResponse<byte[]> replay = post("/retried/refused-orders", key, body);

        assertReplayedAfterTwoAttempts(first, replay, note);
    }

    /**
     * A replay does not run the handler; an advice outside refusing what the {@code @Idempotent} advice returned then
     * (nothing) makes {@code @Retryable} try again, and that attempt must meet the same answer, not run the handler.
     */
    @Test
    void anAttemptAfterAReplayWasRefusedOutsideTheAdviceIsTheReplayAgain() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "refused-replay-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> first = post("/retried/refused-replays", key, body);
        HttpResponse<byte[]> replay = post("/retried/refused-replays", key, body);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(replay.statusCode()).isEqualTo(201);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(controller.attempts(note)).isEqualTo(1);
        assertThat(rows(note)).isEqualTo(1);
    }

    /** The client's retry gets the stored answer of the second attempt; the handler does not run a third time. */
    private void assertReplayedAfterTwoAttempts(HttpResponse<byte[]> first, HttpResponse<byte[]> replay, String note) {
        assertThat(replay.statusCode()).isEqualTo(201);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(controller.attempts(note)).isEqualTo(2);
        assertThat(rows(note)).isEqualTo(1);
    }
}
