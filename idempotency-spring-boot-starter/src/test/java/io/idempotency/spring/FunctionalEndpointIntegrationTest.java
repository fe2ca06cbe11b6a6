package io.idempotency.spring;

import org.junit.jupiter.api.Test;

import java.net.URI;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A functional endpoint has no controller method to carry {@code @Idempotent}; the {@code @Idempotent} service method
 * it calls first takes the request on, and a second one it calls after the first returned is part of that request, not
 * an attempt that starts it again.
 */
class FunctionalEndpointIntegrationTest extends OrdersApplicationTest {

    @Test
    void aSecondIdempotentMethodCalledAfterTheFirstReturnedRunsInTheSameRequest() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "functional-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> first = post("/functional/two-orders", key, body);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(rows(note)).as("the first method's write is kept with the second's").isEqualTo(2);
        assertThat(keyRows(key)).isEqualTo(1);

        HttpResponse<byte[]> replay = post("/functional/two-orders", key, body);

        assertThat(replay.statusCode()).isEqualTo(201);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(rows(note)).isEqualTo(2);
    }

    @Test
    void theSameIdempotentMethodCalledAgainAfterItReturnedIsPartOfTheRequest() throws Exception {
        String key = UUID.randomUUID().toString();
        String a = "each-a-" + key;
        String b = "each-b-" + key;
        String c = "each-c-" + key;
        String body = "{\"notes\":[\"" + a + "\",\"" + b + "\",\"" + c + "\"]}";

        HttpResponse<byte[]> first = post("/functional/each-order", key, body);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(rows(a) + rows(b) + rows(c)).as("every call's write is kept, as the answer says").isEqualTo(3);
        assertThat(keyRows(key)).isEqualTo(1);

        HttpResponse<byte[]> replay = post("/functional/each-order", key, body);

        assertThat(replay.statusCode()).isEqualTo(201);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(rows(a) + rows(b) + rows(c)).isEqualTo(3);
    }

    @Test
    void aReplayStopsTheHandlerFunctionSoItsOwnWorkAfterTheCallDoesNotRunAgain() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "audited-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> first = post("/functional/order-with-audit", key, body);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(rows(note)).isEqualTo(1);
        assertThat(rows(note + "-audit")).as("the function's own write commits with the claim").isEqualTo(1);

        HttpResponse<byte[]> replay = post("/functional/order-with-audit", key, body);

        assertThat(replay.statusCode()).as(new String(replay.body(), StandardCharsets.UTF_8)).isEqualTo(201);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(rows(note)).isEqualTo(1);
        assertThat(rows(note + "-audit")).as("the function's own write is not made again").isEqualTo(1);

        HttpResponse<byte[]> mismatch = post("/functional/order-with-audit", key,
                "{\"note\":\"" + note + "-other\"}");

        assertThat(mismatch.statusCode()).isEqualTo(422);
        assertProblem(mismatch, "idempotency-key-mismatch");
        assertThat(rows(note + "-other-audit")).as("nor after a refusal").isZero();
    }

    @Test
    void aFailureTheFunctionAnswersItselfLeavesNothingAndTheRetryRunsAgain() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "refused-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> first = post("/functional/refused-order", key, body);

        assertThat(first.statusCode()).as(new String(first.body(), StandardCharsets.UTF_8)).isEqualTo(400);
        assertThat(new String(first.body(), StandardCharsets.UTF_8)).contains("refused: " + note);
        assertThat(rows(note)).as("the failed method's write is rolled back").isZero();
        assertThat(keyRows(key)).as("the key is released").isZero();

        HttpResponse<byte[]> retry = post("/functional/refused-order", key, body);

        assertThat(retry.statusCode()).isEqualTo(400);
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).as("run again, not replayed").isEmpty();
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
    }

    @Test
    void anIdempotentMethodForAVerbNoControllerServesIsReachedThroughTheFilter() throws Exception {
        String key = UUID.randomUUID().toString();
        long id = Math.floorMod(UUID.randomUUID().getMostSignificantBits(), 1_000_000_000L);
        HttpRequest delete = HttpRequest.newBuilder(URI.create("http://localhost:" + port + "/functional/orders/" + id))
                .header("Idempotency-Key", key).DELETE().build();

        HttpResponse<byte[]> first = send(delete);

        assertThat(first.statusCode()).as(new String(first.body(), StandardCharsets.UTF_8)).isEqualTo(200);
        assertThat(rows("cancel-" + id)).isEqualTo(1);
        assertThat(keyRows(key)).isEqualTo(1);

        HttpResponse<byte[]> replay = send(delete);

        assertThat(replay.statusCode()).isEqualTo(200);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(rows("cancel-" + id)).isEqualTo(1);
    }

    @Test
    void twoRoutesCallingOneIdempotentMethodHaveScopesOfTheirOwn() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "two-routes-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> one = post("/functional/two-orders", key, body);
        HttpResponse<byte[]> other = post("/functional/order-with-audit", key, body);

        assertThat(one.statusCode()).isEqualTo(201);
        assertThat(other.statusCode()).as("not the other route's answer").isEqualTo(201);
        assertThat(other.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(rows(note)).isEqualTo(3);
        assertThat(DATABASE.queryString("select string_agg(scope, ',' order by scope) from idempotency_keys"
                + " where idempotency_key = '" + key + "'"))
                .isEqualTo("POST /functional/order-with-audit,POST /functional/two-orders");
    }

    @Test
    void anAsyncServerResponseAlreadyCompletedIsAnAnswerLikeAnyOther() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "completed-async-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> first = post("/functional/completed-async-order", key, body);
        HttpResponse<byte[]> replay = post("/functional/completed-async-order", key, body);

        assertThat(first.statusCode()).isEqualTo(200);
        assertThat(new String(first.body(), StandardCharsets.UTF_8)).isEqualTo("late");
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(rows(note)).isEqualTo(1);
        assertThat(keyRows(key)).isEqualTo(1);
    }

    @Test
    void anAsyncServerResponseIsRolledBack() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "async-" + key;

        HttpResponse<byte[]> answer = post("/functional/async-order", key, "{\"note\":\"" + note + "\"}");

        assertThat(answer.statusCode()).isEqualTo(500);
        assertProblem(answer, "idempotency-commit-failed");
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
    }

    @Test
    void aBodyTheFunctionReadsAfterTheCallIsFingerprinted() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "late-body-" + key;

        HttpResponse<byte[]> first = post("/functional/notes/" + note, key, "{\"amount\":100}");

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(new String(first.body(), StandardCharsets.UTF_8)).contains("amount");
        assertThat(post("/functional/notes/" + note, key, "{ \"amount\": 100 }").statusCode()).isEqualTo(201);
        HttpResponse<byte[]> other = post("/functional/notes/" + note, key, "{\"amount\":200}");
        assertThat(other.statusCode()).isEqualTo(422);
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void aKeyTakenFromTheRoutesPathVariablesIsTheVariableOfTheRequest() throws Exception {
        String reference = "ref-" + UUID.randomUUID();
        String note = "by-reference-" + reference;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> first = send(request("/functional/by-reference/" + reference, body).build());
        HttpResponse<byte[]> again = send(request("/functional/by-reference/" + reference, body).build());

        assertThat(first.statusCode()).as(new String(first.body(), StandardCharsets.UTF_8)).isEqualTo(201);
        assertThat(again.statusCode()).isEqualTo(201);
        assertThat(again.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(again.body()).isEqualTo(first.body());
        assertThat(rows(note)).isEqualTo(1);
        assertThat(DATABASE.queryString("select scope from idempotency_keys where idempotency_key = '" + reference
                + "'")).isEqualTo("POST /functional/by-reference/{reference}");

        HttpResponse<byte[]> other = send(request("/functional/by-reference/" + reference + "-2", body).build());

        assertThat(other.statusCode()).as("another reference is another key").isEqualTo(201);
        assertThat(other.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(rows(note)).isEqualTo(2);
    }

    @Test
    void aKeyTakenFromANestedRoutesPathVariablesIsScopedByTheWholeRoute() throws Exception {
        String reference = "nested-" + UUID.randomUUID();
        String note = "nested-reference-" + reference;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> first = send(request("/functional/groups/g1/by-reference/" + reference, body).build());
        HttpResponse<byte[]> again = send(request("/functional/groups/g1/by-reference/" + reference, body).build());
        HttpResponse<byte[]> otherGroup = send(request("/functional/groups/g2/by-reference/" + reference, body)
                .build());

        assertThat(first.statusCode()).as(new String(first.body(), StandardCharsets.UTF_8)).isEqualTo(201);
        assertThat(again.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(again.body()).isEqualTo(first.body());
        assertThat(otherGroup.statusCode()).as("the same key on another concrete path").isEqualTo(422);
        assertProblem(otherGroup, "idempotency-key-mismatch");
        assertThat(rows(note)).isEqualTo(1);
        assertThat(DATABASE.queryString("select scope from idempotency_keys where idempotency_key = '" + reference
                + "'")).isEqualTo("POST /functional/groups/{group}/by-reference/{reference}");
    }
}
