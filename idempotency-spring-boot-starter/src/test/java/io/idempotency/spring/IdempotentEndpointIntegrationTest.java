package io.idempotency.spring;

import io.idempotency.spring.app.OrderController;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.http.MediaType;

import java.net.URI;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.Charset;
import java.nio.charset.StandardCharsets;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.IntStream;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The starter in a real application, over real HTTP, on real PostgreSQL: what is stored, what is replayed, what
 * rolls back.
 */
class IdempotentEndpointIntegrationTest extends OrdersApplicationTest {

    @Test
    void theSameRequestIsExecutedOnceAndReplayedByteForByte() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "replay-" + key;
        String body = "{\"note\":\"" + note + "\",\"amount\":\"12.50\"}";

        HttpResponse<byte[]> first = post("/orders", key, body);
        HttpResponse<byte[]> second = post("/orders", key, body);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(first.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(first.headers().firstValue("Set-Cookie")).as("the first answer is sent whole").isPresent();
        assertThat(second.statusCode()).isEqualTo(201);
        assertThat(second.body()).isEqualTo(first.body());
        assertThat(second.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(second.headers().firstValue("Location")).isEqualTo(first.headers().firstValue("Location"));
        assertThat(second.headers().firstValue("ETag")).isEqualTo(first.headers().firstValue("ETag"));
        assertThat(second.headers().firstValue("Content-Type")).isEqualTo(first.headers().firstValue("Content-Type"));
        assertThat(second.headers().firstValue("Set-Cookie")).as("credentials are never stored").isEmpty();
        assertThat(second.headers().firstValue("X-Not-Replayed")).as("headers off the allow-list").isEmpty();
        assertThat(rows(note)).isEqualTo(1);
    }

    /**
     * The README's "Reading the table": a claim of the default mode is inserted and completed in the request's one
     * transaction, so while its handler runs no other session sees a record of the key, PROCESSING or any other;
     * {@code PROCESSING} rows in the table are intent-first claims only.
     */
    @Test
    void aDefaultModeRequestInProgressLeavesNoRecordOtherSessionsSee() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "in-progress-" + key;
        CompletableFuture<HttpResponse<byte[]>> first = http.sendAsync(
                request("/orders/slow?millis=1500", "{\"note\":\"" + note + "\"}").header("Idempotency-Key", key)
                        .build(), HttpResponse.BodyHandlers.ofByteArray());
        awaitHandlerInItsTransaction();

        // the database is shared with the other test classes, whose intent-first claims may be PROCESSING: this
        // request's key alone is asked about
        assertThat(keyRows(key)).as("records of the key, seen from another session while its handler runs")
                .isZero();

        assertThat(first.get(10, TimeUnit.SECONDS).statusCode()).isEqualTo(201);
        assertThat(status(key)).isEqualTo("SUCCEEDED");
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void theSameKeyWithAnotherBodyIsRefusedAndChangesNothing() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "mismatch-" + key;
        String body = "{\"note\":\"" + note + "\",\"amount\":\"12.50\"}";
        HttpResponse<byte[]> created = post("/orders", key, body);
        assertThat(created.statusCode()).isEqualTo(201);
        String stored = storedHeaders(key);

        HttpResponse<byte[]> other = post("/orders", key, "{\"note\":\"" + note + "\",\"amount\":\"99.00\"}");

        assertThat(other.statusCode()).isEqualTo(422);
        assertProblem(other, "idempotency-key-mismatch");
        assertThat(rows(note)).isEqualTo(1);
        // the refusal left the stored answer as it was: the first request sent again is still its replay
        assertThat(storedHeaders(key)).isEqualTo(stored);
        HttpResponse<byte[]> again = post("/orders", key, body);
        assertThat(again.statusCode()).isEqualTo(201);
        assertThat(again.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(again.body()).isEqualTo(created.body());
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void theSameKeyOnAnotherPathIsAnotherRequest() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"paths-" + key + "\"}";
        assertThat(post("/orders/status/201", key, body).statusCode()).isEqualTo(201);

        HttpResponse<byte[]> other = post("/orders/status/202", key, body);

        assertThat(other.statusCode()).as("same route template, different concrete path").isEqualTo(422);
        assertProblem(other, "idempotency-key-mismatch");
        assertThat(rows("paths-" + key)).as("the refused path's handler did not run").isEqualTo(1);
        assertThat(keyRows(key)).isEqualTo(1);
    }

    @Test
    void theSameKeyWithAnotherMethodUnderASharedScopeIsAnotherRequest() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "methods-" + key;
        String body = "{\"note\":\"" + note + "\"}";
        assertThat(post("/orders/shared-scope", key, body).statusCode()).isEqualTo(201);

        HttpResponse<byte[]> patch = send(request("/orders/shared-scope", body).header("Idempotency-Key", key)
                .method("PATCH", HttpRequest.BodyPublishers.ofString(body)).build());

        assertThat(patch.statusCode()).as("same scope, path and body, another method").isEqualTo(422);
        assertProblem(patch, "idempotency-key-mismatch");
        assertThat(patch.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void aMethodSpelledInLowerCaseIsTheSameRequestAsInUpperCaseOnARouteMappedToAnyMethod() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "lower-case-" + key;
        String body = "{\"note\":\"" + note + "\"}";
        HttpResponse<byte[]> first = post("/orders/any-method", key, body);
        assertThat(first.statusCode()).isEqualTo(201);

        HttpResponse<byte[]> lower = send(request("/orders/any-method", body).header("Idempotency-Key", key)
                .method("post", HttpRequest.BodyPublishers.ofString(body)).build());

        // the default methods cover "post" as POST: under the same key it must not run the handler a second time
        assertThat(lower.statusCode()).as(new String(lower.body())).isEqualTo(201);
        assertThat(lower.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(lower.body()).isEqualTo(first.body());
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void aMissingOrMalformedKeyIsRefusedBeforeAnythingIsWritten() throws Exception {
        String note = "bad-key-" + UUID.randomUUID();
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> missing = send(request("/orders", body).build());
        HttpResponse<byte[]> tooLong = post("/orders", "k".repeat(256), body);
        HttpResponse<byte[]> repeated = send(request("/orders", body)
                .header("Idempotency-Key", "a").header("Idempotency-Key", "b").build());
        HttpResponse<byte[]> badEscape = post("/orders", "\"a\\b\"", body);

        assertThat(missing.statusCode()).isEqualTo(400);
        assertProblem(missing, "idempotency-key-missing");
        for (HttpResponse<byte[]> malformed : java.util.List.of(tooLong, repeated, badEscape)) {
            assertThat(malformed.statusCode()).isEqualTo(400);
            assertProblem(malformed, "idempotency-key-malformed");
        }
        assertThat(rows(note)).isZero();
        assertThat(DATABASE.queryLong("select count(*) from idempotency_keys where idempotency_key like 'kkkk%'")).isZero();
    }

    @Test
    void quotedAndBareFormsOfAKeyAreTheSameKey() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"quoted-" + key + "\"}";

        HttpResponse<byte[]> bare = post("/orders", key, body);
        HttpResponse<byte[]> quoted = post("/orders", "\"" + key + "\"", body);

        assertThat(bare.statusCode()).isEqualTo(201);
        assertThat(quoted.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(quoted.body()).isEqualTo(bare.body());
    }

    @Test
    void aFinal4xxAnswerIsStoredAndReplayed() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "402-" + key;

        HttpResponse<byte[]> first = post("/orders/status/402", key, "{\"note\":\"" + note + "\"}");
        HttpResponse<byte[]> second = post("/orders/status/402", key, "{\"note\":\"" + note + "\"}");

        assertThat(first.statusCode()).isEqualTo(402);
        assertThat(second.statusCode()).isEqualTo(402);
        assertThat(second.body()).isEqualTo(first.body());
        assertThat(second.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(rows(note)).isEqualTo(1);
    }

    /**
     * A 401 answers the credentials the request carried, which are no part of its fingerprint, and asks for the request
     * again with others; HTTP requires its challenge ({@code WWW-Authenticate}), which is never stored. Kept, it would
     * be replayed without the challenge to every retry, also to the one that brings the credentials it asked for.
     */
    @Test
    void anAuthenticationChallengeIsNotStoredAndTheRetryWithTheCredentialsItAskedForRuns() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "step-up-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> challenged = post("/orders/step-up", key, body);
        HttpResponse<byte[]> challengedAgain = post("/orders/step-up", key, body);
        HttpResponse<byte[]> steppedUp = send(request("/orders/step-up", body).header("Idempotency-Key", key)
                .header("Authorization", "Bearer stepped-up").build());

        assertThat(challenged.statusCode()).isEqualTo(401);
        assertThat(challenged.headers().firstValue("WWW-Authenticate")).isPresent();
        assertThat(challengedAgain.statusCode()).isEqualTo(401);
        assertThat(challengedAgain.headers().firstValue("WWW-Authenticate")).as("a 401 carries its challenge")
                .isPresent();
        assertThat(challengedAgain.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(steppedUp.statusCode()).as("the retry with the credentials asked for runs").isEqualTo(201);
        assertThat(steppedUp.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void aRetryableAnswerRollsBackAndTheRetryRunsAgain() throws Exception {
        for (int status : new int[] {503, 500, 409, 429}) {
            leavesNothingAndTheRetryRunsAgain("/orders/status/" + status, status);
        }
    }

    @Test
    void aHandlerThatThrowsLeavesNothingWhateverStatusItMapsTo() throws Exception {
        for (int status : new int[] {400, 404, 500}) {
            leavesNothingAndTheRetryRunsAgain("/orders/fail/" + status, status);
        }
    }

    @Test
    void anAnswerThatFailsToRenderLeavesNothingWhateverStatusTheFailureMapsTo() throws Exception {
        // the handler ran and returned; writing its answer failed (no converter for the Accept header), and the
        // application's exception handler answered 406 with a body of its own
        String key = UUID.randomUUID().toString();
        String note = "not-acceptable-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> refused = send(request("/orders/status/201", body).header("Idempotency-Key", key)
                .header("Accept", "application/xml").build());

        assertThat(refused.statusCode()).isEqualTo(406);
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
        HttpResponse<byte[]> retry = post("/orders/status/201", key, body);
        assertThat(retry.statusCode()).isEqualTo(201);
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).as("not stored, so run again").isEmpty();
        assertThat(rows(note)).isEqualTo(1);
    }

    /**
     * Content negotiation is not part of the fingerprint: a retry that asks for another representation is the same
     * operation, replayed as it was answered (the same media type), not run again nor refused.
     */
    @Test
    void aRetryThatAsksForAnotherRepresentationIsReplayedTheStoredOne() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "negotiated-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> first = send(request("/orders/status/201", body).header("Idempotency-Key", key)
                .header("Accept", "application/json").build());
        HttpResponse<byte[]> retry = send(request("/orders/status/201", body).header("Idempotency-Key", key)
                .header("Accept", "application/xml").header("Accept-Language", "de").build());

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(retry.statusCode()).isEqualTo(201);
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(retry.headers().firstValue("Content-Type")).isEqualTo(first.headers().firstValue("Content-Type"));
        assertThat(retry.body()).isEqualTo(first.body());
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void theLibrarysErrorsAreProblemsWhateverTheAcceptHeaderAsksFor() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "accept-" + key;
        post("/orders/status/201", key, "{\"note\":\"" + note + "\"}");

        HttpResponse<byte[]> mismatch = send(request("/orders/status/201", "{\"note\":\"other-" + note + "\"}")
                .header("Idempotency-Key", key).header("Accept", "text/html").build());
        HttpResponse<byte[]> missing = send(request("/orders/status/201", "{\"note\":\"" + note + "\"}")
                .header("Accept", "application/xml").build());

        assertThat(mismatch.statusCode()).isEqualTo(422);
        assertThat(mismatch.headers().firstValue("Content-Type")).hasValueSatisfying(
                type -> assertThat(type).startsWith("application/problem+json"));
        assertThat(missing.statusCode()).isEqualTo(400);
        assertThat(missing.headers().firstValue("Content-Type")).hasValueSatisfying(
                type -> assertThat(type).startsWith("application/problem+json"));
        assertThat(new String(missing.body(), java.nio.charset.StandardCharsets.UTF_8))
                .contains("idempotency-key-missing");
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void anExceptionHandlerThatReadsTheDatabaseRunsAfterTheFailedHandlerRolledBack() throws Exception {
        // the handler's second statement was refused, which aborts the transaction in PostgreSQL: as without the
        // library, where the handler's own transaction has ended by then, its exception handler can read the database
        String key = UUID.randomUUID().toString();
        String note = "conflict-" + key;

        HttpResponse<byte[]> answer = post("/orders/fails-in-the-database", key, "{\"note\":\"" + note + "\"}");

        assertThat(answer.statusCode()).as(new String(answer.body(), StandardCharsets.UTF_8)).isEqualTo(409);
        assertThat(new String(answer.body(), StandardCharsets.UTF_8)).as("the handler's write was rolled back first")
                .isEqualTo("{\"rows\":0}");
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
    }

    @Test
    void aHandlerThatCallsSendErrorLeavesNothingWhateverTheStatus() throws Exception {
        for (int status : new int[] {400, 503}) {
            leavesNothingAndTheRetryRunsAgain("/orders/send-error/" + status, status);
        }
    }

    /**
     * Reached through a forward, an @Idempotent handler could not send its answer after the commit (the container ends
     * the response when the forward returns): it is refused before anything is claimed or written.
     */
    @Test
    void anIdempotentHandlerReachedThroughAForwardIsRefusedAndWritesNothing() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "forwarded-" + key;

        HttpResponse<byte[]> forwarded = post("/legacy/orders", key, "{\"note\":\"" + note + "\"}");

        assertThat(forwarded.statusCode()).isEqualTo(500);
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
    }

    /**
     * A forward made by a filter before the idempotency filter is the dispatch that filter wraps: the answer is sent
     * after the commit, and replayed.
     */
    @Test
    void aRequestForwardedBeforeTheIdempotencyFilterIsExecutedOnceAndReplayed() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "rewritten-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> first = post("/rewritten/orders", key, body);
        HttpResponse<byte[]> second = post("/rewritten/orders", key, body);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(new String(first.body(), StandardCharsets.UTF_8)).contains(note);
        assertThat(second.statusCode()).isEqualTo(201);
        assertThat(second.body()).isEqualTo(first.body());
        assertThat(second.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(rows(note)).isEqualTo(1);
    }

    /**
     * A forward made by a filter before the idempotency filter, and then one made by a handler to the idempotent one:
     * the handler's forward is a dispatch the filter did not wrap, though of the same kind, and is refused as it is
     * without the filter's forward (not committed while the client gets an empty answer).
     */
    @Test
    void anIdempotentHandlerReachedThroughAForwardInsideARewrittenRequestIsRefusedAndWritesNothing() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "rewritten-forwarded-" + key;

        HttpResponse<byte[]> forwarded = post("/rewritten/legacy/orders", key, "{\"note\":\"" + note + "\"}");

        assertThat(forwarded.statusCode()).isEqualTo(500);
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
    }

    /** A request to {@code path}, whose handler writes a row and answers {@code status}, leaves nothing behind. */
    private void leavesNothingAndTheRetryRunsAgain(String path, int status) throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "nothing-" + key;

        HttpResponse<byte[]> first = post(path, key, "{\"note\":\"" + note + "\"}");
        assertThat(first.statusCode()).as(path).isEqualTo(status);
        assertThat(rows(note)).as("rows after %s", path).isZero();
        assertThat(keyRows(key)).as("key rows after %s", path).isZero();

        HttpResponse<byte[]> retry = post(path, key, "{\"note\":\"" + note + "\"}");
        assertThat(retry.statusCode()).as(path).isEqualTo(status);
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).as("%s: not stored, so run again", path).isEmpty();
    }

    @Test
    void aHandlerWritingThroughAWriterArgumentIsHeldUntilTheCommitAndReplayed() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "writer-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> first = post("/orders/writer", key, body);
        HttpResponse<byte[]> replay = post("/orders/writer", key, body);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(new String(first.body(), StandardCharsets.UTF_8)).startsWith("order ").endsWith(note + " \u20ac");
        assertThat(replay.statusCode()).isEqualTo(201);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(replay.headers().firstValue("Content-Type")).isEqualTo(first.headers().firstValue("Content-Type"));
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void aCookieTheHandlerAddsIsHeldWithItsAnswerAndDroppedWithIt() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "cookie-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> failed = post("/orders/cookie?failAtCommit=true", key, body);

        assertThat(failed.statusCode()).isEqualTo(500);
        assertProblem(failed, "idempotency-commit-failed");
        assertThat(failed.headers().firstValue("Set-Cookie")).as("nothing of the rolled-back answer").isEmpty();
        assertThat(rows(note)).isZero();

        String kept = "cookie-kept-" + key;
        HttpResponse<byte[]> first = post("/orders/cookie", key + "-kept", "{\"note\":\"" + kept + "\"}");
        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(first.headers().firstValue("Set-Cookie")).as("the committed answer is sent whole")
                .hasValueSatisfying(cookie -> assertThat(cookie).startsWith("order=secret-"));
        assertThat(rows(kept)).isEqualTo(1);
    }

    @Test
    void aHandlerReadingItsBodyFromAnInputStreamReadsAllOfIt() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "streams-" + key;
        HttpRequest.Builder request = HttpRequest.newBuilder(java.net.URI.create("http://localhost:" + port
                        + "/orders/streams")).header("Content-Type", "text/plain").header("Idempotency-Key", key);

        HttpResponse<byte[]> first = send(request.POST(HttpRequest.BodyPublishers.ofString(note)).build());
        HttpResponse<byte[]> replay = send(request.POST(HttpRequest.BodyPublishers.ofString(note)).build());
        HttpResponse<byte[]> other = send(request.POST(HttpRequest.BodyPublishers.ofString(note + "-other")).build());

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(new String(first.body(), StandardCharsets.UTF_8)).endsWith(" for " + note);
        assertThat(rows(note)).as("the handler read the whole body").isEqualTo(1);
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(other.statusCode()).as("another body under the key").isEqualTo(422);
    }

    @Test
    void aFormIsFingerprintedByItsParametersAndStillReadableByTheHandler() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "form-" + key;
        HttpRequest.Builder request = HttpRequest.newBuilder(java.net.URI.create("http://localhost:" + port
                + "/orders/form")).header("Content-Type", "application/x-www-form-urlencoded")
                .header("Idempotency-Key", key);

        HttpResponse<byte[]> first = send(request.POST(HttpRequest.BodyPublishers.ofString(
                "note=" + note + "&amount=1")).build());
        HttpResponse<byte[]> replay = send(request.POST(HttpRequest.BodyPublishers.ofString(
                "amount=1&note=" + note)).build());
        HttpResponse<byte[]> other = send(request.POST(HttpRequest.BodyPublishers.ofString(
                "note=" + note + "&amount=999")).build());

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(new String(first.body(), StandardCharsets.UTF_8)).contains("\"amount\":\"1\"");
        assertThat(rows(note)).as("the handler read the parameters").isEqualTo(1);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).as("parameter order does not matter")
                .hasValue("true");
        assertThat(other.statusCode()).as("another amount under the key").isEqualTo(422);
        assertThat(rows(note)).isEqualTo(1);
    }

    /**
     * A form that declares its length is read by the library, so that a handler can read it as sent as well; a chunked
     * one, whose length is not known before it is read, is parsed by the container. Parts without a name
     * ({@code =x}, {@code &&}) are where the two could read the form apart: Tomcat refuses a form with a named value
     * without a name and skips an empty part, Jetty takes both as parameters named "". Whichever the container does,
     * the form is the same request however it is framed: a retry sent the other way is replayed, or refused alike.
     */
    @ParameterizedTest
    @ValueSource(strings = {"note=N&=x&amount=1", "=&note=N&amount=1", "note=N&&amount=1", "&note=N&amount=1&"})
    void aFormIsTheSameRequestWhetherItDeclaresItsLengthOrComesInChunks(String form) throws Exception {
        assertTheSameRequestHoweverFramed("application/x-www-form-urlencoded", form);
    }

    /**
     * {@link #aFormIsTheSameRequestWhetherItDeclaresItsLengthOrComesInChunks}, for a form that names its charset
     * where Spring Boot sets the request's encoding to UTF-8: {@code %C3%A9} is text in both, other text in each.
     * Tomcat reads the form in the request's encoding, Jetty in the charset the form names.
     */
    @Test
    void aFormThatNamesItsCharsetIsTheSameRequestWhetherItDeclaresItsLengthOrComesInChunks() throws Exception {
        assertTheSameRequestHoweverFramed("application/x-www-form-urlencoded;charset=ISO-8859-1",
                "note=N&amount=%C3%A9");
    }

    /**
     * {@link #aFormThatNamesItsCharsetIsTheSameRequestWhetherItDeclaresItsLengthOrComesInChunks}, for a form that
     * names its charset twice: Jetty reads it in the first charset named, and the library, reading the same form
     * when it declares its length, must too ({@code %E9} is text in ISO-8859-1, none in UTF-8).
     */
    @ParameterizedTest
    @ValueSource(strings = {"application/x-www-form-urlencoded;charset=UTF-8;charset=ISO-8859-1",
            "application/x-www-form-urlencoded;charset=ISO-8859-1;charset=UTF-8"})
    void aFormThatNamesTwoCharsetsIsTheSameRequestWhetherItDeclaresItsLengthOrComesInChunks(String type)
            throws Exception {
        assertTheSameRequestHoweverFramed(type, "note=N&amount=%E9");
    }

    /**
     * {@link #aFormIsTheSameRequestWhetherItDeclaresItsLengthOrComesInChunks}, for a form of more values than the
     * containers take parameters, but of three names: Tomcat counts values and refuses it, Jetty counts names.
     */
    @Test
    void aFormOfManyValuesOfOneNameIsTheSameRequestWhetherItDeclaresItsLengthOrComesInChunks() throws Exception {
        assertTheSameRequestHoweverFramed("application/x-www-form-urlencoded",
                "note=N&amount=1" + "&tag=x".repeat(1_100));
    }

    private void assertTheSameRequestHoweverFramed(String type, String form) throws Exception {
        for (boolean chunkedFirst : new boolean[] {false, true}) {
            String key = UUID.randomUUID().toString();
            String body = form.replace("N", "framed-" + key);
            String what = body + (chunkedFirst ? ", chunked first" : ", with its length first");

            String first = raw(framedForm(key, type, body, chunkedFirst));
            String retry = raw(framedForm(key, type, body, !chunkedFirst));

            int status = Integer.parseInt(first.substring(9, 12));
            assertThat(status).as(what + ":\n" + first).isLessThan(500);
            assertThat(retry.substring(9, 12)).as(what + ", the retry:\n" + retry).isEqualTo(first.substring(9, 12));
            if (status < 300) {
                assertThat(retry).as(what).containsIgnoringCase("Idempotent-Replayed: true");
                assertThat(rows("framed-" + key)).as(what).isEqualTo(1);
            } else {
                assertThat(retry).as(what).doesNotContainIgnoringCase("Idempotent-Replayed");
                assertThat(keyRows(key)).as(what).isZero();
            }
        }
    }

    /** A form post to {@code /orders/form}, with a Content-Length or in two chunks, as raw HTTP/1.1. */
    private static String framedForm(String key, String type, String body, boolean chunked) {
        String head = "POST /orders/form HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                + "Content-Type: " + type + "\r\nIdempotency-Key: " + key + "\r\n";
        if (!chunked) {
            return head + "Content-Length: " + body.length() + "\r\n\r\n" + body;
        }
        String start = body.substring(0, body.length() / 2);
        String end = body.substring(body.length() / 2);
        return head + "Transfer-Encoding: chunked\r\n\r\n" + Integer.toHexString(start.length()) + "\r\n" + start
                + "\r\n" + Integer.toHexString(end.length()) + "\r\n" + end + "\r\n0\r\n\r\n";
    }

    @Test
    void aFormTheContainerCannotParseIsRefusedAsABadBody() throws Exception {
        // a broken %-escape, bytes that are no UTF-8, or more parameters than the container takes (Tomcat counts
        // values, Jetty names: 1,200 distinct names are too many for both): it parses the form on the first call that
        // asks for a parameter, the library's own for the fingerprint, and refuses it there
        String manyNames = "amount=1" + IntStream.range(0, 1_200).mapToObj(i -> "&p" + i + "=1")
                .collect(Collectors.joining());
        for (String body : new String[] {"note=broken%ZZ&amount=1", "note=%FF%FE&amount=1", manyNames}) {
            String key = UUID.randomUUID().toString();

            HttpResponse<byte[]> answer = send(HttpRequest.newBuilder(java.net.URI.create("http://localhost:" + port
                    + "/orders/form")).header("Content-Type", "application/x-www-form-urlencoded")
                    .header("Idempotency-Key", key).POST(HttpRequest.BodyPublishers.ofString(body)).build());

            assertThat(answer.statusCode()).as(new String(answer.body(), StandardCharsets.UTF_8)).isEqualTo(400);
            assertProblem(answer, "idempotency-body-invalid");
            assertThat(keyRows(key)).isZero();
        }
    }

    @Test
    void aQueryTheContainerCannotParseIsRefusedWhereTheExpressionsReadTheParameters() throws Exception {
        // an endpoint keyed by an expression offers it the parameters, which makes the container parse the query: here
        // bytes that are no UTF-8
        String transaction = UUID.randomUUID().toString();

        HttpResponse<byte[]> answer = send(HttpRequest.newBuilder(java.net.URI.create("http://localhost:" + port
                        + "/orders/callbacks?trace=%FF%FE")).header("Content-Type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofString("{\"transactionId\":\"" + transaction
                        + "\",\"amount\":\"1.00\",\"currency\":\"EUR\"}")).build());

        assertThat(answer.statusCode()).as(new String(answer.body(), StandardCharsets.UTF_8)).isEqualTo(400);
        assertProblem(answer, "idempotency-body-invalid");
        assertThat(keyRows(transaction)).isZero();
    }

    @Test
    void aFormTheContainerDidNotParseIsFingerprintedByItsBody() throws Exception {
        // media types are case-insensitive: Spring MVC maps this form, and its converter reads it from the body (it
        // takes the container's parameters for the lower-case type only) before the container parses it, so the
        // parameters it offers do not include the body; in lower case the container parses it for the fingerprint,
        // and the handler, which takes the form as its body, still reads it whole
        for (String type : new String[] {"Application/X-WWW-Form-Urlencoded", "application/x-www-form-urlencoded"}) {
            String key = UUID.randomUUID().toString();
            String note = "unparsed-form-" + key;
            HttpRequest.Builder request = HttpRequest.newBuilder(java.net.URI.create("http://localhost:" + port
                    + "/orders/form-body")).header("Content-Type", type).header("Idempotency-Key", key);

            HttpResponse<byte[]> first = send(request.POST(HttpRequest.BodyPublishers.ofString(
                    "note=" + note + "&amount=1")).build());
            HttpResponse<byte[]> replay = send(request.POST(HttpRequest.BodyPublishers.ofString(
                    "note=" + note + "&amount=1")).build());
            HttpResponse<byte[]> other = send(request.POST(HttpRequest.BodyPublishers.ofString(
                    "note=" + note + "&amount=999")).build());

            assertThat(first.statusCode()).as(type).isEqualTo(201);
            assertThat(new String(first.body(), StandardCharsets.UTF_8)).as(type).contains("\"amount\":\"1\"");
            assertThat(replay.headers().firstValue("Idempotent-Replayed")).as(type).hasValue("true");
            assertThat(other.statusCode()).as(type + ": another amount under the key").isEqualTo(422);
            assertProblem(other, "idempotency-key-mismatch");
            assertThat(rows(note)).as(type).isEqualTo(1);
        }
    }

    @Test
    void aFormTheContainerDidNotParseIsComparedWithTheCharsetItDeclares() throws Exception {
        // Spring MVC's form converter decodes %C3%A9 as the two characters \u00c3\u00a9 in ISO-8859-1 and as the one
        // character \u00e9 in UTF-8: the same bytes, two requests
        String key = UUID.randomUUID().toString();
        String note = "unparsed-form-charset-" + key;
        String body = "note=%C3%A9" + note + "&amount=1";

        HttpResponse<byte[]> first = send(unparsedForm(key, "ISO-8859-1", body));
        HttpResponse<byte[]> other = send(unparsedForm(key, "UTF-8", body));
        HttpResponse<byte[]> same = send(unparsedForm(key, "iso-8859-1", body));

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(rows("\u00c3\u00a9" + note)).isEqualTo(1);
        assertThat(other.statusCode()).as("the same bytes in another charset").isEqualTo(422);
        assertProblem(other, "idempotency-key-mismatch");
        assertThat(rows("\u00e9" + note)).isZero();
        assertThat(same.headers().firstValue("Idempotent-Replayed")).as("the same charset, spelled otherwise")
                .hasValue("true");
    }

    private HttpRequest unparsedForm(String key, String charset, String body) {
        return HttpRequest.newBuilder(java.net.URI.create("http://localhost:" + port + "/orders/form-body"))
                .header("Content-Type", "Application/X-WWW-Form-Urlencoded;charset=" + charset)
                .header("Idempotency-Key", key).POST(HttpRequest.BodyPublishers.ofString(body)).build();
    }

    @Test
    void textWrittenWithTheServletsOwnCallsIsReplayedWithItsEncodingLanguageAndFileName() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"text-" + key + "\"}";

        HttpResponse<byte[]> first = post("/orders/text", key, body);
        HttpResponse<byte[]> replay = post("/orders/text", key, body);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(new String(first.body(), StandardCharsets.UTF_8)).endsWith(": caf\u00e9 \u20ac");
        assertThat(first.headers().firstValue("Content-Type").orElseThrow().toLowerCase(java.util.Locale.ROOT)
                .replace(" ", "")).isEqualTo("text/plain;charset=utf-8");
        assertThat(first.headers().firstValue("Content-Language")).hasValue("de-DE");
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(replay.headers().firstValue("Content-Type")).isEqualTo(first.headers().firstValue("Content-Type"));
        assertThat(replay.headers().firstValue("Content-Language")).hasValue("de-DE");
        assertThat(first.headers().firstValue("Content-Disposition")).hasValueSatisfying(
                disposition -> assertThat(disposition).startsWith("attachment; filename=\"bestellung-"));
        assertThat(replay.headers().firstValue("Content-Disposition"))
                .isEqualTo(first.headers().firstValue("Content-Disposition"));
    }

    @Test
    void textEncodedAsTheResponsesLocaleMapsIsSentAndReplayedAsTheContainerWouldSendIt() throws Exception {
        // Spring Boot maps English to UTF-8 on Tomcat; Jetty keeps ISO-8859-1, which has no euro sign; German and no
        // locale get the container's default
        for (String query : new String[] {"?locale=en", "?locale=de-DE", ""}) {
            String key = UUID.randomUUID().toString();
            String body = "{\"note\":\"localized-" + key + "\"}";

            HttpResponse<byte[]> unguarded = send(request("/orders/localized-text/unguarded" + query,
                    "{\"note\":\"localized-unguarded-" + key + "\"}").build());
            HttpResponse<byte[]> first = post("/orders/localized-text" + query, key, body);
            HttpResponse<byte[]> replay = post("/orders/localized-text" + query, key, body);

            Charset containers = MediaType.parseMediaType(
                    unguarded.headers().firstValue("Content-Type").orElseThrow()).getCharset();
            assertThat(new String(unguarded.body(), containers)).as(query + ": the container alone, in the charset"
                    + " it names").startsWith("caf\u00e9 ");
            assertThat(first.statusCode()).as(query).isEqualTo(201);
            assertThat(first.body()).as(query).isEqualTo(unguarded.body());
            for (String header : new String[] {"Content-Type", "Content-Language"}) {
                assertThat(first.headers().firstValue(header)).as(query + " " + header)
                        .isEqualTo(unguarded.headers().firstValue(header));
                assertThat(replay.headers().firstValue(header)).as(query + " " + header + " replayed")
                        .isEqualTo(unguarded.headers().firstValue(header));
            }
            assertThat(replay.headers().firstValue("Idempotent-Replayed")).as(query).hasValue("true");
            assertThat(replay.body()).as(query).isEqualTo(unguarded.body());
            assertThat(rows("localized-" + key)).as(query).isEqualTo(1);
            if (!query.isEmpty()) {
                assertThat(first.headers().firstValue("Content-Language")).as(query)
                        .hasValue(query.substring("?locale=".length()));
            }
        }
    }

    /**
     * A 303 See Other is how a POST says "done, see the result there": the effect the redirect points to is kept and
     * the redirect replayed, never rolled back behind an answer that claims it happened.
     */
    @Test
    void aRedirectWithAStatusIsCapturedStoredAndReplayedLikeAnyOtherAnswer() throws Exception {
        for (int status : new int[] {302, 303, 307}) {
            String key = UUID.randomUUID().toString();
            String note = "redirect-" + key;

            HttpResponse<byte[]> first = post("/orders/redirect/" + status, key, "{\"note\":\"" + note + "\"}");
            HttpResponse<byte[]> again = post("/orders/redirect/" + status, key, "{\"note\":\"" + note + "\"}");

            assertThat(first.statusCode()).isEqualTo(status);
            assertThat(first.headers().firstValue("Location")).as("as the handler gave it, not made absolute")
                    .hasValueSatisfying(l -> assertThat(l).startsWith("/orders/"));
            assertThat(rows(note)).as("the effect the redirect points to").isEqualTo(1);
            assertThat(again.statusCode()).isEqualTo(status);
            assertThat(again.headers().firstValue("Idempotent-Replayed")).hasValue("true");
            assertThat(again.headers().firstValue("Location")).isEqualTo(first.headers().firstValue("Location"));
            assertThat(again.body()).as("the body the container wrote with the redirect, if any")
                    .isEqualTo(first.body());
        }
    }

    @Test
    void anIdempotentMethodCalledByTheHandlerInsteadOfBeingItIsRefusedLoudly() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "via-service-" + key;

        HttpResponse<byte[]> answer = post("/orders/via-service", key, "{\"note\":\"" + note + "\"}");

        // a replay could not have stopped the controller's own write after the call: refused before anything ran
        assertThat(answer.statusCode()).isEqualTo(500);
        assertThat(rows(note)).isZero();
        assertThat(rows(note + "-after")).isZero();
        assertThat(keyRows(key)).isZero();
    }

    @Test
    void aHandlerThatGoesAsyncIsRolledBackAndAnsweredWithAnError() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "async-" + key;

        HttpResponse<byte[]> answer = post("/orders/async-servlet", key, "{\"note\":\"" + note + "\"}");

        assertThat(answer.statusCode()).as("never an empty 200 for effects that were rolled back").isEqualTo(500);
        assertProblem(answer, "idempotency-commit-failed");
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
    }

    /**
     * A handler that starts async processing without arguments gets a context holding the container's own response:
     * what it writes and flushes there, on its own thread or in a task, before the library answers, must not reach the
     * client as a 200 for effects the library then rolls back.
     */
    @ParameterizedTest
    @ValueSource(strings = {"thread", "task"})
    void aHandlerWritingToTheContainersResponseOfItsAsyncContextGetsNothingThrough(String on) throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "async-raw-" + on + "-" + key;

        HttpResponse<byte[]> answer = post("/orders/async-servlet-raw?on=" + on, key, "{\"note\":\"" + note + "\"}");

        assertThat(answer.statusCode()).as(new String(answer.body(), StandardCharsets.UTF_8)).isEqualTo(500);
        assertThat(new String(answer.body(), StandardCharsets.UTF_8)).doesNotContain("ok from async work");
        assertProblem(answer, "idempotency-commit-failed");
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
        HttpResponse<byte[]> retry = post("/orders/async-servlet-raw?on=" + on, key, "{\"note\":\"" + note + "\"}");
        assertThat(retry.statusCode()).as("a retry runs again, and is answered alike").isEqualTo(500);
        assertThat(keyRows(key)).isZero();
    }

    /**
     * The handler's async work runs after the library has answered and ended the request, when the container may
     * already serve another request with the same objects: what it does then must not reach that request, whether
     * it writes and completes through its async context, fails with a checked exception it does not declare, or
     * writes to or reads from the container's response or request, taken from its context before the answer (Jetty
     * would serve the next request on the connection with them, were it not closed; see
     * {@code Http2CleartextIntegrationTest} for the next stream of an HTTP/2 connection).
     */
    @ParameterizedTest
    @ValueSource(strings = {"write", "checked", "raw", "read"})
    void asyncWorkThatOutlivesTheAnswerLeavesLaterRequestsAlone(String kind) throws Exception {
        for (int i = 0; i < 3; i++) {
            OrderController.LateAsyncWork.reset();
            String key = UUID.randomUUID().toString();
            String note = "async-late-" + kind + "-" + key;

            HttpResponse<byte[]> answer = post("/orders/async-servlet-late?kind=" + kind, key,
                    "{\"note\":\"" + note + "\"}");
            HttpResponse<byte[]> next = send(request("/orders/after-late-async", "{\"next\":" + i + "}").build());

            assertThat(answer.statusCode()).isEqualTo(500);
            assertProblem(answer, "idempotency-commit-failed");
            assertThat(next.statusCode()).as("round %d", i).isEqualTo(200);
            assertThat(new String(next.body(), StandardCharsets.UTF_8)).as("round %d", i)
                    .isEqualTo("{\"next\":" + i + "}");
            assertThat(rows(note)).isZero();
            assertThat(keyRows(key)).isZero();
        }
    }

    /** The filter passes a request it wraps but does not make idempotent on to async processing as it is. */
    @ParameterizedTest
    @ValueSource(strings = {"servlet", "servlet-unwrapped", "future", "callable", "stream", "sse", "timeout",
            "deferred", "emitter", "error"})
    void anEndpointWithoutIdempotentAnswersAsynchronouslyAsItWould(String kind) throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "plain-async-" + kind + "-" + key;

        HttpResponse<byte[]> answer = post("/orders/plain-async?kind=" + kind, key, "{\"note\":\"" + note + "\"}");

        if (kind.equals("timeout")) {
            assertThat(answer.statusCode()).as("Spring MVC's answer to async processing that timed out").isEqualTo(503);
        } else if (kind.equals("error")) {
            assertThat(answer.statusCode()).as("the error page's answer to the async work's exception").isEqualTo(418);
            assertThat(new String(answer.body(), StandardCharsets.UTF_8)).contains("\"status\":418")
                    .contains("\"path\":\"/orders/plain-async\"");
        } else {
            assertThat(answer.statusCode()).isEqualTo(200);
            assertThat(new String(answer.body(), StandardCharsets.UTF_8)).isEqualTo(switch (kind) {
                case "future", "callable", "deferred" -> "{\"late\":\"" + note + "\"}";
                case "sse" -> "data:late\n\ndata:" + note + "\n\n";
                default -> "late " + note;
            });
        }
        assertThat(rows(note)).isEqualTo(1);
        assertThat(keyRows(key)).isZero();
    }

    /** Non-blocking reads and writes through the filter's request and response, on an endpoint it does not answer. */
    @Test
    void anEndpointWithoutIdempotentReadsAndWritesWithoutBlockingAsItWould() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"plain-nonblocking-" + key + "\"}";

        HttpResponse<byte[]> answer = post("/orders/plain-nonblocking", key, body);

        assertThat(answer.statusCode()).isEqualTo(200);
        assertThat(new String(answer.body(), StandardCharsets.UTF_8)).isEqualTo("echo:" + body);
        assertThat(keyRows(key)).isZero();
    }

    @Test
    void anAsyncAnswerTheHandlerLeavesOpenEndsWithTheErrorItIsAnsweredWith() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "async-left-open-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        // read to the end of the connection, which the answer says is closed: it ends with the answer, not when the
        // async processing the handler started times out
        String answer = raw("POST /orders/async-left-open HTTP/1.1\r\nHost: localhost\r\n"
                + "Content-Type: application/json\r\nIdempotency-Key: " + key + "\r\nContent-Length: "
                + body.length() + "\r\nConnection: close\r\n\r\n" + body);

        assertThat(answer).startsWith("HTTP/1.1 500").contains("idempotency-commit-failed");
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
    }

    /** A Callable, and a streaming body whose class implements an interface of the application's extending it. */
    @ParameterizedTest
    @ValueSource(strings = {"callable", "export", "publisher-entity"})
    void anAsyncValueBehindADeclaredObjectIsNeverRun(String kind) throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "async-value-" + kind + "-" + key;

        HttpResponse<byte[]> answer = post("/orders/async-value?kind=" + kind, key, "{\"note\":\"" + note + "\"}");
        Thread.sleep(1000); // time for Spring MVC's async executor, had it been given the value

        assertThat(answer.statusCode()).isEqualTo(500);
        assertProblem(answer, "idempotency-commit-failed");
        assertThat(rows(note)).isZero();
        assertThat(rows(note + "-late")).as("the answer says nothing was kept, and a retry runs again")
                .isZero();
        assertThat(keyRows(key)).isZero();
    }

    /**
     * An emitter behind a declared {@code Object}, refused as the values above: Spring MVC never gets it, so nothing
     * would ever send what the application's threads go on sending to it, nor fail their sends. The library completes
     * it, and they fail as sends to an emitter whose request has ended do.
     */
    @Test
    void anEmitterBehindADeclaredObjectIsCompletedSoThatSendsToItFail() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "async-value-emitter-" + key;

        HttpResponse<byte[]> answer = post("/orders/async-value?kind=emitter", key, "{\"note\":\"" + note + "\"}");

        assertThat(answer.statusCode()).isEqualTo(500);
        assertProblem(answer, "idempotency-commit-failed");
        assertThat(rows(note)).isZero();
        var emitter = OrderController.RETURNED_EMITTERS.remove(note);
        assertThat(emitter).isNotNull();
        assertThatThrownBy(() -> emitter.send("an event no one will read"))
                .isInstanceOf(IllegalStateException.class).hasMessageContaining("already completed");
    }

    @Test
    void anOptionalKeyHandlerWithoutAKeyMayCallIdempotentMethods() throws Exception {
        String note = "optional-nested-" + UUID.randomUUID();

        HttpResponse<byte[]> answer = send(request("/orders/optional-via-service", "{\"note\":\"" + note + "\"}")
                .build());

        assertThat(answer.statusCode()).isEqualTo(201);
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void aTransactionalHandlerJoinsTheIdempotentTransaction() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "tx-" + key;

        HttpResponse<byte[]> answer = post("/orders/transactional/503", key, "{\"note\":\"" + note + "\"}");

        assertThat(answer.statusCode()).isEqualTo(503);
        assertThat(rows(note)).as("the @Transactional method did not commit on its own").isZero();

        String stored = UUID.randomUUID().toString();
        assertThat(post("/orders/transactional/201", stored, "{\"note\":\"" + note + "\"}").statusCode()).isEqualTo(201);
        assertThat(rows(note)).isEqualTo(1);
        assertThat(keyRows(stored)).isEqualTo(1);
    }

    @Test
    void aFailureAtCommitIsAnErrorAndLeavesNothing() throws Exception {
        // the second handler writes and flushes its answer through a Writer argument before the commit fails
        for (String path : new String[] {"/orders/fails-at-commit", "/orders/writer?failAtCommit=true"}) {
            String key = UUID.randomUUID().toString();
            String note = "commit-" + key;

            HttpResponse<byte[]> answer = post(path, key, "{\"note\":\"" + note + "\"}");

            assertThat(answer.statusCode()).as(path).isEqualTo(500);
            assertProblem(answer, "idempotency-commit-failed");
            assertThat(new String(answer.body(), StandardCharsets.UTF_8)).as(path).doesNotContain(note)
                    .as("the database refused the commit: known to have kept nothing").contains("none were kept");
            assertThat(rows(note)).as(path).isZero();
            assertThat(keyRows(key)).as(path).isZero();
        }
    }

    @Test
    void aTransactionMarkedRollbackOnlyIsKnownToHaveKeptNothing() throws Exception {
        // a @Transactional method the handler called failed and the handler carried on: the commit rolls back,
        // which nothing about a lost connection makes uncertain
        String key = UUID.randomUUID().toString();
        String note = "rollback-only-" + key;

        HttpResponse<byte[]> answer = post("/orders/caught-inner-failure", key, "{\"note\":\"" + note + "\"}");

        assertThat(answer.statusCode()).isEqualTo(500);
        assertProblem(answer, "idempotency-commit-failed");
        assertThat(new String(answer.body(), StandardCharsets.UTF_8)).contains("none were kept")
                .doesNotContain("unknown");
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
    }

    @Test
    void aRefusalInATransactionMarkedRollbackOnlyIsSentAsTheHandlerAnsweredAndNotStored() throws Exception {
        // the handler answers 422 for a @Transactional method it called that failed: nothing can be kept, so its
        // refusal is answered as one its exception handler made, not as a commit that failed
        String note = assertRefusalSentAndNotStored("/orders/caught-inner-refusal", "rollback-only-refusal-",
                "{\"refused\":\"refused\"}", "inner");
        assertThat(rows(note + "-inner")).isZero();
    }

    @Test
    void aRefusalInATransactionTheHandlerMarkedRollbackOnlyIsSentAsTheHandlerAnsweredAndNotStored() throws Exception {
        // marked through the handler's own transaction status, which Spring carries over to the request's
        // transaction only as the handler's @Transactional ends, before the filter decides
        assertRefusalSentAndNotStored("/orders/marked-rollback-only?status=422", "marked-refusal-",
                "{\"refused\":\"marked\"}", "marked");
    }

    @Test
    void aSuccessInATransactionTheHandlerMarkedRollbackOnlyIsAFailedCommit() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "marked-success-" + key;

        HttpResponse<byte[]> answer = post("/orders/marked-rollback-only?status=201", key,
                "{\"note\":\"" + note + "\"}");

        assertThat(answer.statusCode()).as("a success would report what was not kept").isEqualTo(500);
        assertProblem(answer, "idempotency-commit-failed");
        assertThat(new String(answer.body(), StandardCharsets.UTF_8)).contains("none were kept");
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
    }

    @Test
    void aRefusalAfterAFailedStatementTheHandlerCaughtIsSentAsTheHandlerAnsweredAndNotStored() throws Exception {
        // PostgreSQL aborted the transaction when the statement failed, and Spring does not know it: the answer's
        // write fails on it. Nothing can be kept, so the refusal is answered as one its exception handler made
        assertRefusalSentAndNotStored("/orders/caught-own-refusal", "own-refusal-", "{\"refused\":\"duplicate\"}",
                "own");
    }

    /**
     * Posts a note to {@code path}, whose handler answers 422 in a transaction that can no longer commit: the refusal
     * is sent as made, nothing is kept, and a retry runs again. Returns the note.
     */
    private String assertRefusalSentAndNotStored(String path, String notePrefix, String refusal, String refusedBy)
            throws Exception {
        String key = UUID.randomUUID().toString();
        String note = notePrefix + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> answer = post(path, key, body);

        assertThat(answer.statusCode()).as("the handler's refusal").isEqualTo(422);
        assertThat(new String(answer.body(), StandardCharsets.UTF_8)).isEqualTo(refusal);
        assertThat(answer.headers().firstValue("X-Refused")).hasValue(refusedBy);
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).as("not stored: a retry runs again").isZero();
        HttpResponse<byte[]> retry = post(path, key, body);
        assertThat(retry.statusCode()).isEqualTo(422);
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(keyRows(key)).isZero();
        return note;
    }

    @Test
    void aSuccessAfterAFailedStatementTheHandlerCaughtIsAFailedCommit() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "own-failure-" + key;

        HttpResponse<byte[]> answer = post("/orders/caught-own-refusal?status=201", key,
                "{\"note\":\"" + note + "\"}");

        assertThat(answer.statusCode()).isEqualTo(500);
        assertProblem(answer, "idempotency-commit-failed");
        assertThat(new String(answer.body(), StandardCharsets.UTF_8)).contains("none were kept")
                .doesNotContain("unknown");
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
    }

    @Test
    void withoutAKeyAnOptionalKeyEndpointTakesBodiesItCouldNotFingerprint() throws Exception {
        String note = "optional-body-" + UUID.randomUUID();
        String duplicateMembers = "{\"note\":\"ignored\",\"note\":\"" + note + "\"}";
        String large = "{\"note\":\"" + note + "-" + "x".repeat(1_100_000) + "\"}"; // over the 1 MB cap

        HttpResponse<byte[]> duplicate = send(request("/orders/optional", duplicateMembers).build());
        HttpResponse<byte[]> tooLarge = send(request("/orders/optional", large).build());

        assertThat(duplicate.statusCode()).as("as without the library: the last member wins").isEqualTo(201);
        assertThat(rows(note)).isEqualTo(1);
        assertThat(tooLarge.statusCode()).isEqualTo(201);
        assertThat(DATABASE.queryLong("select count(*) from orders where note like '" + note + "-x%'")).isEqualTo(1);

        HttpResponse<byte[]> keyed = post("/orders/optional", UUID.randomUUID().toString(), duplicateMembers);
        assertThat(keyed.statusCode()).as("with a key the body must be fingerprinted").isEqualTo(400);
        assertProblem(keyed, "idempotency-body-invalid");
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void aMultipartBodyIsRefusedWith415AndLeavesNothing() throws Exception {
        // a media type is case-insensitive (RFC 9110, section 8.3.1): the container and Spring MVC parse the parts of
        // "Multipart/Form-Data" too, which leave nothing of the body to fingerprint
        for (String type : java.util.List.of("multipart/form-data", "Multipart/Form-Data")) {
            String key = UUID.randomUUID().toString();
            String note = "multipart-" + key;
            String boundary = "----part" + key;
            String body = "--" + boundary + "\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\n" + note
                    + "\r\n--" + boundary + "--\r\n";

            HttpResponse<byte[]> answer = send(HttpRequest.newBuilder(URI.create("http://localhost:" + port
                            + "/orders/multipart"))
                    .header("Content-Type", type + "; boundary=" + boundary)
                    .header("Idempotency-Key", key)
                    .POST(HttpRequest.BodyPublishers.ofString(body)).build());

            assertThat(answer.statusCode()).as(type).isEqualTo(415);
            assertProblem(answer, "idempotency-body-unsupported");
            assertThat(rows(note)).as(type).isZero();
            assertThat(keyRows(key)).as(type).isZero();
        }
    }

    @Test
    void aMultipartBodyWithoutAKeyIsToldOfTheKeyOrRunsWhereTheKeyIsOptional() throws Exception {
        // the key header is checked before the body: a required key is what the client must fix first, and a request
        // without an optional key runs as it would without the library, whatever its body
        String note = "multipart-keyless-" + UUID.randomUUID();

        HttpResponse<byte[]> required = send(multipart("/orders/multipart", note).build());
        HttpResponse<byte[]> optional = send(multipart("/orders/multipart/optional", note).build());

        assertThat(required.statusCode()).isEqualTo(400);
        assertProblem(required, "idempotency-key-missing");
        assertThat(optional.statusCode()).as("run without idempotency").isEqualTo(201);
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void aMultipartBodyLargerThanSpringMvcTakesIsRefusedBeforeTheKeyIsLookedAt() throws Exception {
        // Spring MVC parses the parts before it calls the handler, and refuses a file larger than
        // spring.servlet.multipart.max-file-size (1 MB by default) itself: with a key or without, nothing is claimed
        String note = "multipart-large-" + UUID.randomUUID();
        String key = UUID.randomUUID().toString();

        HttpResponse<byte[]> keyed = send(multipart("/orders/multipart", note, 2 * 1024 * 1024)
                .header("Idempotency-Key", key).build());
        HttpResponse<byte[]> keyless = send(multipart("/orders/multipart", note, 2 * 1024 * 1024).build());

        assertThat(keyed.statusCode()).isEqualTo(413);
        assertThat(keyless.statusCode()).as("not idempotency-key-missing").isEqualTo(413);
        assertThat(new String(keyless.body(), StandardCharsets.UTF_8)).doesNotContain("idempotency-key-missing");
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
    }

    /** A multipart request to {@code path} with the part {@code note}, and no key. */
    private HttpRequest.Builder multipart(String path, String note) {
        return multipart(path, note, 0);
    }

    /** The same, with a file part of {@code fileSize} bytes besides {@code note}, when that is more than 0. */
    private HttpRequest.Builder multipart(String path, String note, int fileSize) {
        String boundary = "----part" + UUID.randomUUID();
        String body = "--" + boundary + "\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\n" + note
                + (fileSize > 0 ? "\r\n--" + boundary + "\r\nContent-Disposition: form-data; name=\"file\";"
                + " filename=\"large.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n" + "x".repeat(fileSize)
                : "")
                + "\r\n--" + boundary + "--\r\n";
        return HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                .header("Content-Type", "multipart/form-data; boundary=" + boundary)
                .POST(HttpRequest.BodyPublishers.ofString(body));
    }

    @Test
    void anOptionalKeyMayBeLeftOut() throws Exception {
        String note = "optional-" + UUID.randomUUID();
        String body = "{\"note\":\"" + note + "\"}";

        assertThat(send(request("/orders/optional", body).build()).statusCode()).isEqualTo(201);
        assertThat(send(request("/orders/optional", body).build()).statusCode()).isEqualTo(201);
        assertThat(rows(note)).as("without a key there is no idempotency").isEqualTo(2);

        String key = UUID.randomUUID().toString();
        post("/orders/optional", key, body);
        assertThat(post("/orders/optional", key, body).headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(rows(note)).isEqualTo(3);
    }

    @Test
    void onlyRequestsWithAMethodOfSomeIdempotentEndpointAreWrapped() throws Exception {
        // POST and PATCH by default, PUT because one endpoint opts in, DELETE because a method a functional route
        // calls does; nothing declares GET
        for (String method : new String[] {"GET", "POST", "PUT", "DELETE"}) {
            HttpResponse<byte[]> answer = send(request("/orders/wrapped", "{}")
                    .method(method, HttpRequest.BodyPublishers.ofString("{}")).build());
            boolean expected = method.equals("POST") || method.equals("PUT") || method.equals("DELETE");
            assertThat(new String(answer.body())).as(method).isEqualTo("{\"wrapped\":" + expected + "}");
        }
    }

    @Test
    void endpointsWithoutTheAnnotationIgnoreTheHeader() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "plain-" + key;

        post("/orders/plain", key, "{\"note\":\"" + note + "\"}");
        HttpResponse<byte[]> second = post("/orders/plain", key, "{\"note\":\"" + note + "\"}");

        assertThat(second.statusCode()).isEqualTo(201);
        assertThat(rows(note)).isEqualTo(2);
        assertThat(keyRows(key)).isZero();
    }

    @Test
    void aBodyAboveTheCapIsRefusedBeforeTheClaim() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "big-" + key;
        String body = "{\"note\":\"" + note + "\",\"amount\":\"" + "9".repeat(1024 * 1024) + "\"}";

        HttpResponse<byte[]> answer = post("/orders", key, body);

        assertThat(answer.statusCode()).isEqualTo(413);
        assertProblem(answer, "idempotency-request-too-large");
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
    }

    // ---------------------------------------------------------------- helpers

}
