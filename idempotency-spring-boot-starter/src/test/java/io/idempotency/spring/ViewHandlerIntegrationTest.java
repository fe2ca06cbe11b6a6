package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * An {@code @Idempotent} handler of a {@code @Controller} that answers with a view name. When the library answers in
 * its place (a refusal, a replay), the handler returns nothing, and Spring MVC must not render the view it would
 * otherwise derive from the request's path instead of the library's answer.
 */
class ViewHandlerIntegrationTest extends OrdersApplicationTest {

    @Test
    void theLibrarysAnswersReachTheClientInsteadOfADefaultView() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "view-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> keyless = send(request("/views/orders", body).build());
        assertThat(keyless.statusCode()).isEqualTo(400);
        assertProblem(keyless, "idempotency-key-missing");

        HttpResponse<byte[]> first = post("/views/orders", key, body);
        HttpResponse<byte[]> replay = post("/views/orders", key, body);
        HttpResponse<byte[]> other = post("/views/orders", key, "{\"note\":\"" + note + "-other\"}");

        assertThat(first.statusCode()).isEqualTo(302);
        assertThat(first.headers().firstValue("Location")).hasValueSatisfying(
                location -> assertThat(location).contains("/orders/"));
        assertThat(replay.statusCode()).isEqualTo(302);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.headers().firstValue("Location")).isEqualTo(first.headers().firstValue("Location"));
        assertThat(other.statusCode()).isEqualTo(422);
        assertProblem(other, "idempotency-key-mismatch");
        assertThat(rows(note)).isEqualTo(1);
        assertThat(rows(note + "-other")).isZero();
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"forwarding-orders", "context-forwarding-orders"})
    void aViewThatForwardsIsRefusedAndLeavesNothing(String page) throws Exception {
        // the container ends the response when the forward returns, before the filter could send the answer after
        // the commit: kept effects with an empty answer, unless the forward is refused, whether it goes through the
        // request's dispatcher or the servlet context's
        String key = UUID.randomUUID().toString();
        String note = page + "-" + key;

        HttpResponse<byte[]> answer = post("/views/" + page, key, "{\"note\":\"" + note + "\"}");

        assertThat(answer.statusCode()).isEqualTo(500);
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
    }

    /**
     * A view that fails to render fails after the handler returned, outside Spring MVC's exception handlers. Left to
     * the container, the failure leaves the filter and rolls the request back; answered by an error filter of the
     * application's between the idempotency filter and the dispatcher, it must roll the request back all the same,
     * not keep its effects with the filter's refusal as their answer, for this client and every retry.
     */
    @Test
    void aViewThatFailsToRenderKeepsNothingAlsoWhenAFilterAnswersTheFailure() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "failing-page-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> unanswered = post("/views/failing-page-orders", key, body);
        assertThat(unanswered.statusCode()).isEqualTo(500);
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();

        for (int attempt = 0; attempt < 2; attempt++) {
            HttpResponse<byte[]> answered = send(request("/views/failing-page-orders", body)
                    .header("Idempotency-Key", key).header("X-Filter-Answers-Errors", "yes").build());

            assertThat(answered.statusCode()).as("the error filter's answer").isEqualTo(400);
            assertThat(new String(answered.body(), StandardCharsets.UTF_8)).contains("refused by the error filter");
            assertThat(answered.headers().firstValue("Idempotent-Replayed")).as("not stored: run again").isEmpty();
            assertThat(rows(note)).as("the order of a request answered as refused").isZero();
            assertThat(keyRows(key)).isZero();
        }
    }

    /**
     * A filter after the idempotency filter that fails once the chain has returned fails the request after its handler
     * answered: nothing of it is kept, and the retry runs. A replay is the library's answer, which the handler did not
     * give: it is sent all the same.
     */
    @Test
    void aFilterThatFailsAfterTheHandlerKeepsNothingButCannotStopAReplay() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "filter-fails-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> failed = send(request("/views/orders", body).header("Idempotency-Key", key)
                .header("X-Filter-Fails", "yes").build());
        assertThat(failed.statusCode()).isEqualTo(500);
        assertThat(failed.headers().firstValue("Location")).isEmpty();
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();

        HttpResponse<byte[]> first = post("/views/orders", key, body);
        assertThat(first.statusCode()).isEqualTo(302);
        assertThat(first.headers().firstValue("Idempotent-Replayed")).as("run again").isEmpty();
        assertThat(rows(note)).isEqualTo(1);

        HttpResponse<byte[]> replay = send(request("/views/orders", body).header("Idempotency-Key", key)
                .header("X-Filter-Fails", "yes").build());
        assertThat(replay.statusCode()).isEqualTo(302);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.headers().firstValue("Location")).isEqualTo(first.headers().firstValue("Location"));
        assertThat(rows(note)).isEqualTo(1);
    }

    /**
     * The container ignores the status and headers an included resource sets, and its sendError: held for the commit,
     * the fragment's 404 was the answer, stored and replayed for a request whose effects were kept, and its
     * sendError(410) made the answer an error, so the request was rolled back where the client of the page would have
     * been told it succeeded.
     */
    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"including-orders", "including-gone-orders", "context-including-orders"})
    void whatAnIncludedResourceSaysOfItselfIsNotTheAnswer(String page) throws Exception {
        String key = UUID.randomUUID().toString();
        String note = page + "-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> unguarded = send(request("/views/" + page + "/unguarded",
                "{\"note\":\"" + page + "-unguarded-" + key + "\"}").build());
        HttpResponse<byte[]> first = post("/views/" + page, key, body);
        HttpResponse<byte[]> replay = post("/views/" + page, key, body);

        assertThat(unguarded.statusCode()).isEqualTo(201);
        assertThat(unguarded.headers().firstValue("X-Fragment")).isEmpty();
        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(first.headers().firstValue("X-Fragment")).isEmpty();
        assertThat(first.headers().firstValue("Content-Type")).isEqualTo(unguarded.headers().firstValue("Content-Type"));
        assertThat(first.body()).isEqualTo(unguarded.body());
        assertThat(new String(first.body(), StandardCharsets.UTF_8)).startsWith("<p>").endsWith("</p>");
        assertThat(replay.statusCode()).isEqualTo(201);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(rows(note)).isEqualTo(1);
    }
}
