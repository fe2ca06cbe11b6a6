package io.idempotency.spring;

import io.idempotency.core.DownstreamKeys;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.core.StaleClaimSweeper;
import io.idempotency.spring.app.FakeGateway;
import io.idempotency.spring.app.GatewayResolver;
import io.idempotency.testkit.Async;
import io.idempotency.testkit.Await;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.test.context.TestPropertySource;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Side effects outside the database, over real HTTP on real PostgreSQL: the intent is committed before the handler
 * calls the gateway; duplicates wait for the lease; an unknown outcome is resolved by asking the gateway once the
 * lease ran out; a definite failure frees the key at once; and a holder whose lease was taken over cannot record
 * its late result.
 */
// a Retry-After other than the default, to tell the lease-lost answer's own (1) from the setting's
@TestPropertySource(properties = {"idempotency.in-flight-wait=300ms", "idempotency.sweeper.enabled=false",
        "idempotency.retry-after=3s"})
@ExtendWith(OutputCaptureExtension.class)
class IntentFirstIntegrationTest extends OrdersApplicationTest {

    /**
     * The charges of a 3 s lease, for tests that need more of a lease than a loaded machine leaves of the 1 s lease of
     * {@code /intent/charges}: a duplicate sent right after the answer that must come within the lease (the two
     * requests can take most of a second), and a lease that renewals must keep while the test looks at it or while
     * the handler sleeps (each renewal of the 1 s lease could be no more than 667 ms late).
     */
    private static final String LONGER_LEASE = "/intent/charges-with-a-longer-lease";

    @Autowired
    FakeGateway gateway;

    @Autowired
    GatewayResolver resolver;

    @Autowired
    IdempotencyStore store;

    @Autowired
    DownstreamKeys downstreamKeys;

    @Test
    void theIntentIsCommittedBeforeTheChargeAndTheResultWithTheLocalWrites() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "intent-" + key;
        int chargesBefore = gateway.charges();

        // the longer lease: renewals of the 1 s one may run late on a loaded machine while the handler sleeps
        CompletableFuture<HttpResponse<String>> first = Async.supply(
                () -> charge(LONGER_LEASE, key, note, "X-Sleep-Ms", "2000"));
        // the intent is visible to everyone while the handler runs (it sleeps 2 s after the claim is committed)
        awaitStatus(key, "PROCESSING");
        HttpResponse<String> duplicate = charge(LONGER_LEASE, key, note);
        HttpResponse<String> answer = first.get(30, TimeUnit.SECONDS);
        HttpResponse<String> replay = charge(LONGER_LEASE, key, note);

        assertThat(duplicate.statusCode()).as("a duplicate during the lease").isEqualTo(409);
        assertThat(duplicate.headers().firstValue("Retry-After")).as("idempotency.retry-after").hasValue("3");
        assertThat(answer.statusCode()).isEqualTo(201);
        assertThat(replay.statusCode()).isEqualTo(201);
        assertThat(replay.body()).isEqualTo(answer.body());
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(gateway.charges() - chargesBefore).isEqualTo(1);
        assertThat(rows(note)).as("the local write committed with the result").isEqualTo(1);
        assertThat(status(key)).isEqualTo("SUCCEEDED");
    }

    @Test
    void anUnknownOutcomeWaitsForTheLeaseThenTheResolverAsksTheGateway() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "unknown-" + key;
        int consultedBefore = resolver.consultations();

        HttpResponse<String> timeout = charge(LONGER_LEASE, key, note, "X-Fail", "unknown");
        HttpResponse<String> tooEarly = charge(LONGER_LEASE, key, note);
        awaitLeaseExpired(key); // the lease runs out; nobody renews it
        HttpResponse<String> retry = charge(LONGER_LEASE, key, note);
        HttpResponse<String> again = charge(LONGER_LEASE, key, note);

        assertThat(timeout.statusCode()).isEqualTo(500);
        assertThat(rows(note)).as("the local write of the failed attempt rolled back").isZero();
        assertThat(tooEarly.statusCode()).as("unknown is not failure: the claim holds until its lease ends")
                .isEqualTo(409);
        assertThat(retry.statusCode()).isEqualTo(201);
        assertThat(retry.body()).contains("\"resolved\":true");
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(again.body()).isEqualTo(retry.body());
        assertThat(resolver.consultations() - consultedBefore).as("consulted once").isEqualTo(1);
        assertThat(gateway.chargeFor(downstreamKeyOf(LONGER_LEASE, key))).isNotNull();
    }

    @Test
    void aFailedCommitAfterTheChargeLeavesTheClaimForTheResolverAndSaysSo() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "commit-fails-" + key;
        int chargesBefore = gateway.charges();

        HttpResponse<String> failed = charge(LONGER_LEASE, key, note, "X-Fail", "at-commit");
        String status = status(key);
        HttpResponse<String> tooEarly = charge(LONGER_LEASE, key, note);
        awaitLeaseExpired(key);
        HttpResponse<String> retry = charge(LONGER_LEASE, key, note);

        assertThat(failed.statusCode()).isEqualTo(500);
        assertThat(failed.body()).contains("idempotency-commit-failed").contains("answered 409 until then")
                .doesNotContain("safe to retry");
        assertThat(status).as("the charge was made: its outcome is for the resolver").isEqualTo("PROCESSING");
        assertThat(tooEarly.statusCode()).isEqualTo(409);
        assertThat(retry.statusCode()).isEqualTo(201);
        assertThat(retry.body()).as("the resolver found the charge").contains("\"resolved\":true");
        assertThat(rows(note)).as("the failed attempt's local write rolled back").isZero();
        assertThat(gateway.charges() - chargesBefore).isEqualTo(1);
    }

    @Test
    void aDefiniteFailureFreesTheKeyAtOnce() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "definite-" + key;

        HttpResponse<String> declined = charge("/intent/charges", key, note, "X-Fail", "definite-before");
        assertThat(status(key)).isEqualTo("FAILED");
        HttpResponse<String> retry = charge("/intent/charges", key, note);

        assertThat(declined.statusCode()).isEqualTo(500);
        assertThat(retry.statusCode()).as("no waiting for the lease").isEqualTo(201);
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(rows(note)).isEqualTo(1);
    }

    /**
     * An intent-first answer too large to store rolls back the local writes and leaves the committed claim for its
     * resolver: the line that says so names the claim, which the resolver's line names later.
     */
    @Test
    void aTooLargeAnswerOfAnIntentFirstRequestNamesItsClaim(CapturedOutput output) throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "too-large-" + key;

        HttpResponse<String> tooLarge = charge(LONGER_LEASE, key, note, "X-Fail", "too-large");

        assertThat(tooLarge.statusCode()).isEqualTo(500);
        assertThat(tooLarge.body()).contains("idempotency-response-too-large");
        assertThat(rows(note)).as("the local write rolled back").isZero();
        assertThat(status(key)).isEqualTo("PROCESSING");
        assertThat(output.getOut().lines().filter(line -> line.contains("more than idempotency.max-stored-body-size")))
                .singleElement().asString().contains("the claim of caller '' on 'POST " + LONGER_LEASE
                        + "' with key '" + key + "' stays PROCESSING for its resolver");
        // not left for the sweeps of the other tests, which count what they resolve
        DATABASE.queryString("delete from idempotency_keys where idempotency_key = '" + key + "'");
    }

    @Test
    void anotherBodyUnderADefinitelyFailedKeyIsRefused() throws Exception {
        // the gateway may have seen the key: only the request that failed may run under it again
        String key = UUID.randomUUID().toString();
        String note = "definite-other-" + key;

        HttpResponse<String> declined = charge("/intent/charges", key, note, "X-Fail", "definite-before");
        HttpResponse<String> other = charge("/intent/charges", key, "other-" + note);

        assertThat(declined.statusCode()).isEqualTo(500);
        assertThat(other.statusCode()).isEqualTo(422);
        assertThat(other.body()).contains("idempotency-key-mismatch");
        assertThat(status(key)).isEqualTo("FAILED");
        assertThat(rows("other-" + note)).isZero();
    }

    @Test
    void aHolderWhoseLeaseWasTakenOverCannotRecordItsLateResult(CapturedOutput output) throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "fenced-" + key;
        int chargesBefore = gateway.charges();

        // the holder sleeps 3 s before its commit, short of its lease's first renewal (a third of its 10 s), which
        // would put back the end of the lease the test sets in the past
        CompletableFuture<HttpResponse<String>> slow = Async.supply(
                () -> charge("/intent/long-lease", key, note, "X-Sleep-Ms", "3000"));
        // the slow holder has charged and is writing locally (then sleeps 3 s before its commit)
        Await.until("the slow holder charges", Duration.ofSeconds(10), () -> gateway.charges() != chargesBefore);
        // its lease ends (as if it had hung past it) and another instance's sweeper takes the claim over
        DATABASE.queryString("update idempotency_keys set locked_until = now() - interval '1 second'"
                + " where idempotency_key = '" + key + "'");
        StaleClaimSweeper.Sweep sweep = new StaleClaimSweeper(store, resolver, downstreamKeys, Duration.ofSeconds(30),
                100).sweep();
        HttpResponse<String> late = slow.get(30, TimeUnit.SECONDS);
        HttpResponse<String> after = charge("/intent/long-lease", key, note);

        assertThat(sweep.completed()).as("the resolver found the charge").isEqualTo(1);
        assertThat(late.statusCode()).as("the late holder is fenced out").isEqualTo(409);
        assertThat(late.body()).contains("idempotency-lease-lost");
        assertThat(late.headers().firstValue("Retry-After")).as("the recorded result can be had at once, whatever"
                + " idempotency.retry-after says").hasValue("1");
        assertThat(after.statusCode()).isEqualTo(201);
        assertThat(after.body()).as("the recorded result is the new holder's").contains("\"resolved\":true");
        assertThat(rows(note)).as("the late holder's local write rolled back").isZero();
        assertThat(gateway.charges() - chargesBefore).isEqualTo(1);
        // the late holder's result (what the gateway told it) is discarded: the operator can match the line with the
        // new holder's resolution by the claim it names
        assertThat(output.getOut().lines().filter(line -> line.contains("finished after its lease was taken over")))
                .singleElement().asString().contains("caller '' on 'POST /intent/long-lease' with key '" + key + "'");
    }

    @Test
    void aReusedKeyIsRefusedWhileTheClaimIsOpenAndAfterItsLease() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "reused-" + key;
        int consultedBefore = resolver.consultations();
        long callsBefore = gateway.calls();

        assertThat(charge("/intent/charges", key, note, "X-Fail", "unknown").statusCode()).isEqualTo(500);
        HttpResponse<String> during = charge("/intent/charges", key, note + "-other");
        awaitLeaseExpired(key);
        HttpResponse<String> after = charge("/intent/charges", key, note + "-other");

        assertThat(during.statusCode()).as("another body while the claim holds").isEqualTo(422);
        assertThat(after.statusCode()).as("another body after the lease ran out").isEqualTo(422);
        assertThat(after.body()).contains("idempotency-key-mismatch");
        assertThat(resolver.consultations() - consultedBefore).as("a mismatch never takes the claim over").isZero();
        assertThat(gateway.calls() - callsBefore).as("the other body never reached the gateway").isEqualTo(1);
        assertThat(rows(note + "-other")).isZero();

        HttpResponse<String> original = charge("/intent/charges", key, note);
        assertThat(original.statusCode()).isEqualTo(201);
        assertThat(original.body()).as("the original request is resolved").contains("\"resolved\":true");
        assertThat(resolver.consultations() - consultedBefore).isEqualTo(1);
    }

    @Test
    void aHandlerRunningLongerThanItsLeaseKeepsItByRenewal() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "renewed-" + key;
        int consultedBefore = resolver.consultations();
        long callsBefore = gateway.calls();

        // the lease is 3 s, renewed every second; the handler takes 6 s after charging, so that the duplicate, sent
        // after the lease's first end and answered after the 300 ms in-flight wait, finds it still running
        CompletableFuture<HttpResponse<String>> slow = Async.supply(
                () -> charge(LONGER_LEASE, key, note, "X-Sleep-Ms", "6000"));
        awaitStatus(key, "PROCESSING");
        Thread.sleep(3_500);
        assertThat(DATABASE.queryString("select locked_until > now() and locked_until > created_at + interval '3 second'"
                + " from idempotency_keys where idempotency_key = '" + key + "'"))
                .as("the lease was renewed past its first end").isEqualTo("t");
        HttpResponse<String> duplicate = charge(LONGER_LEASE, key, note);
        HttpResponse<String> answer = slow.get(30, TimeUnit.SECONDS);

        assertThat(duplicate.statusCode()).as("still in progress").isEqualTo(409);
        assertThat(answer.statusCode()).as("the holder records its result").isEqualTo(201);
        assertThat(resolver.consultations() - consultedBefore).isZero();
        assertThat(gateway.calls() - callsBefore).isEqualTo(1);
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void aResolverThatSaysFailLetsTheRetryRunAgain() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "resolver-fail-" + key;
        int consultedBefore = resolver.consultations();

        unknownOutcomeWithItsLeaseRunOut(key, note);
        resolver.decideNext(io.idempotency.core.StaleClaimResolver.Resolution::fail);
        HttpResponse<String> retry = charge("/intent/charges", key, note);

        assertThat(retry.statusCode()).isEqualTo(201);
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).as("run again, not replayed").isEmpty();
        assertThat(retry.body()).doesNotContain("resolved");
        assertThat(resolver.consultations() - consultedBefore).isEqualTo(1);
        assertThat(rows(note)).isEqualTo(1);
        assertThat(status(key)).isEqualTo("SUCCEEDED");
    }

    /**
     * side-effects.md: each stale claim a retry resolves is logged at INFO, in the engine's logger, with its caller,
     * scope and key and what was decided — the run that follows a rerun or a FAILED mark overwrites the row, so the log
     * is what a reconciliation with the gateway has — and neither the answer nor the downstream key is logged.
     */
    @Test
    void eachStaleClaimARetryResolvesIsLoggedWithItsIdentityAndTheDecision(CapturedOutput output) throws Exception {
        String charged = UUID.randomUUID().toString();
        String failed = UUID.randomUUID().toString();
        String rerun = UUID.randomUUID().toString();
        for (String key : new String[] {charged, failed, rerun}) {
            unknownOutcomeWithItsLeaseRunOut(key, "logged-" + key);
        }

        assertThat(charge("/intent/charges", charged, "logged-" + charged).body()).contains("\"resolved\":true");
        resolver.decideNext(io.idempotency.core.StaleClaimResolver.Resolution::fail);
        assertThat(charge("/intent/charges", failed, "logged-" + failed).statusCode()).isEqualTo(201);
        resolver.decideNext(io.idempotency.core.StaleClaimResolver.Resolution::rerun);
        assertThat(charge("/intent/charges", rerun, "logged-" + rerun).statusCode()).isEqualTo(201);

        assertThat(resolutionLine(output, charged)).contains("completed with the resolver's answer")
                .doesNotContain("resolved\":true");
        assertThat(resolutionLine(output, failed)).contains("marked FAILED");
        assertThat(resolutionLine(output, rerun)).contains("run its request again");
        for (String key : new String[] {charged, failed, rerun}) {
            assertThat(output).as("the key sent to the gateway is not given away")
                    .doesNotContain(downstreamKeyOf(key));
        }
    }

    /**
     * side-effects.md: a decision the claim's fencing token kept out of the record — the retry's lease ran out while
     * its resolver asked the gateway, and another holder took the claim over — is logged as a warning naming the claim,
     * and the new holder's outcome stands.
     */
    @Test
    void aRetrysDecisionKeptOutOfTheRecordByANewHolderIsLogged(CapturedOutput output) throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "superseded-" + key;
        unknownOutcomeWithItsLeaseRunOut(key, note);
        resolver.decideNext(() -> {
            // meanwhile, the retry's lease has run out and a sweeper has taken the claim over
            DATABASE.queryString("update idempotency_keys set fencing_token = gen_random_uuid()"
                    + " where idempotency_key = '" + key + "' returning 'taken over'");
            return io.idempotency.core.StaleClaimResolver.Resolution.complete(new io.idempotency.core.StoredResponse(
                    201, java.util.List.of(), "{\"charge\":0}".getBytes(java.nio.charset.StandardCharsets.UTF_8)));
        });

        HttpResponse<String> retry = charge("/intent/charges", key, note);

        assertThat(retry.statusCode()).as("the new holder has the claim").isEqualTo(409);
        assertThat(status(key)).as("the decision was not recorded").isEqualTo("PROCESSING");
        assertThat(output.getOut().lines().filter(line -> line.contains(key)))
                .singleElement().asString()
                .contains("WARN", "IdempotencyEngine", "decided to complete the claim of caller '' on"
                        + " 'POST /intent/charges' with key '" + key + "'", "not recorded");

        // resolved by the next retry, so that no stale claim is left for the other tests' sweeps
        awaitLeaseExpired(key);
        assertThat(charge("/intent/charges", key, note).statusCode()).isEqualTo(201);
    }

    /**
     * side-effects.md: a "rerun" decided after another holder took the claim over (the retry's lease ran out while its
     * resolver asked the gateway) is kept out as a "complete" is: the handler does not run beside the new holder's
     * run, and the retry is told the request is in progress, not that its own run lost the claim.
     */
    @Test
    void aRetrysRerunDecidedAfterANewHolderTookTheClaimOverDoesNotRunTheHandler(CapturedOutput output)
            throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "superseded-rerun-" + key;
        unknownOutcomeWithItsLeaseRunOut(key, note);
        long callsBefore = gateway.calls();
        resolver.decideNext(() -> {
            // meanwhile, the retry's lease has run out and another instance's retry has taken the claim over
            DATABASE.queryString("update idempotency_keys set fencing_token = gen_random_uuid()"
                    + " where idempotency_key = '" + key + "' returning 'taken over'");
            return io.idempotency.core.StaleClaimResolver.Resolution.rerun();
        });

        HttpResponse<String> retry = charge("/intent/charges", key, note);

        assertThat(retry.statusCode()).as("the new holder has the claim").isEqualTo(409);
        assertThat(retry.body()).contains("idempotency-request-in-progress");
        assertThat(gateway.calls() - callsBefore).as("the handler did not run beside the new holder").isZero();
        assertThat(rows(note)).isZero();
        assertThat(output.getOut().lines().filter(line -> line.contains(key)))
                .singleElement().asString()
                .contains("WARN", "IdempotencyEngine", "decided to rerun the claim of caller '' on"
                        + " 'POST /intent/charges' with key '" + key + "'", "not recorded");

        // resolved by the next retry, so that no stale claim is left for the other tests' sweeps
        awaitLeaseExpired(key);
        assertThat(charge("/intent/charges", key, note).statusCode()).isEqualTo(201);
    }

    /** The one line that logs how a retry resolved the stale claim of {@code key}, at INFO in the engine's logger. */
    private static String resolutionLine(CapturedOutput output, String key) {
        List<String> lines = output.getOut().lines().filter(line -> line.contains(key)).toList();
        assertThat(lines).as("the lines naming %s", key).singleElement().asString()
                .contains("INFO", "io.idempotency.core.IdempotencyEngine",
                        "Stale idempotency claim of caller '' on 'POST /intent/charges' with key '" + key + "'",
                        "resolved by a retry");
        return lines.get(0);
    }

    @Test
    void aResolverThatThrowsLeavesTheClaimForTheNextAttempt() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "resolver-throws-" + key;
        int consultedBefore = resolver.consultations();

        unknownOutcomeWithItsLeaseRunOut(key, note);
        String tokenBefore = token(key);
        resolver.decideNext(() -> {
            throw new IllegalStateException("the gateway's status API is down");
        });
        HttpResponse<String> failed = charge("/intent/charges", key, note);

        assertThat(failed.statusCode()).isEqualTo(500);
        assertThat(status(key)).as("neither failed nor completed: still unresolved").isEqualTo("PROCESSING");
        assertThat(token(key)).as("taken over, with a lease of its own").isNotEqualTo(tokenBefore);

        awaitLeaseExpired(key);
        HttpResponse<String> later = charge("/intent/charges", key, note);
        assertThat(later.statusCode()).isEqualTo(201);
        assertThat(later.body()).contains("\"resolved\":true");
        assertThat(resolver.consultations() - consultedBefore).isEqualTo(2);
    }

    /**
     * A resolver whose own database access fails (it records what it found, say) is answered as the claim's failing
     * database is: 503, come back later with the same key. The claim stays PROCESSING for a later resolution.
     */
    @Test
    void aResolverWhoseDatabaseAccessFailsIsAnswered503() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "resolver-database-" + key;

        unknownOutcomeWithItsLeaseRunOut(key, note);
        resolver.decideNext(() -> {
            throw new org.springframework.dao.DataAccessResourceFailureException("the resolutions table is gone");
        });
        HttpResponse<String> failed = charge("/intent/charges", key, note);

        assertThat(failed.statusCode()).isEqualTo(503);
        assertThat(failed.body()).contains("idempotency-store-unavailable");
        assertThat(status(key)).isEqualTo("PROCESSING");

        // resolved by the next retry, so that no stale claim is left for the other tests' sweeps
        awaitLeaseExpired(key);
        assertThat(charge("/intent/charges", key, note).statusCode()).isEqualTo(201);
    }

    @Test
    void aResolversCompleteAnswerThatTheStoragePolicyDoesNotKeepIsNotReplayed() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "resolver-503-" + key;

        unknownOutcomeWithItsLeaseRunOut(key, note);
        // a resolver that passes on the gateway's own "try again later"
        resolver.decideNext(() -> io.idempotency.core.StaleClaimResolver.Resolution.complete(
                new io.idempotency.core.StoredResponse(503, java.util.List.of(),
                        "{\"gateway\":\"unavailable\"}".getBytes(java.nio.charset.StandardCharsets.UTF_8))));
        HttpResponse<String> refused = charge("/intent/charges", key, note);

        assertThat(refused.statusCode()).as("an error of the resolver, not the request's answer").isEqualTo(500);
        assertThat(refused.body()).doesNotContain("unavailable");
        assertThat(status(key)).as("neither failed nor completed: still unresolved").isEqualTo("PROCESSING");

        awaitLeaseExpired(key);
        HttpResponse<String> later = charge("/intent/charges", key, note);
        assertThat(later.statusCode()).isEqualTo(201);
        assertThat(later.body()).contains("\"resolved\":true");
    }

    @Test
    void aResolversAnswerKeepsOnlyTheHeadersAHandlersAnswerWouldKeep() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "resolver-headers-" + key;

        unknownOutcomeWithItsLeaseRunOut(key, note);
        // a resolver that passes on what the gateway's status API answered, its session cookie included
        resolver.decideNext(() -> io.idempotency.core.StaleClaimResolver.Resolution.complete(
                new io.idempotency.core.StoredResponse(201, java.util.List.of(
                        new io.idempotency.core.StoredResponse.Header("Content-Type", "application/json"),
                        new io.idempotency.core.StoredResponse.Header("Location", "/intent/charges/7"),
                        new io.idempotency.core.StoredResponse.Header("Set-Cookie", "gateway-session=secret"),
                        new io.idempotency.core.StoredResponse.Header("X-Gateway-Trace", "internal"),
                        // about the gateway's connection, by its Connection header (RFC 9110, section 7.6.1)
                        new io.idempotency.core.StoredResponse.Header("Connection", "close, content-location"),
                        new io.idempotency.core.StoredResponse.Header("Content-Location", "/gateway/backend-3")),
                        "{\"resolved\":true}".getBytes(java.nio.charset.StandardCharsets.UTF_8))));
        HttpResponse<String> retry = charge("/intent/charges", key, note);
        HttpResponse<String> replay = charge("/intent/charges", key, note);

        for (HttpResponse<String> answer : java.util.List.of(retry, replay)) {
            assertThat(answer.statusCode()).isEqualTo(201);
            assertThat(answer.headers().firstValue("Location")).hasValue("/intent/charges/7");
            assertThat(answer.headers().firstValue("Set-Cookie")).as("never stored, never replayed").isEmpty();
            assertThat(answer.headers().firstValue("X-Gateway-Trace")).as("not a replayed header").isEmpty();
            assertThat(answer.headers().firstValue("Content-Location")).as("a connection option").isEmpty();
        }
        assertThat(storedHeaders(key)).doesNotContainIgnoringCase("set-cookie").doesNotContain("secret");
    }

    @Test
    void aResolversAnswerWithMoreHeadersThanTheServerSendsIsNotStoredUnsendable() throws Exception {
        // Tomcat sends no header section above 8 KB (server.tomcat.max-http-response-header-size): a handler's such
        // answer is rolled back, and stored as SUCCEEDED a resolver's would fail on every replay for as long as the
        // record is kept
        String key = UUID.randomUUID().toString();
        String note = "resolver-links-" + key;

        unknownOutcomeWithItsLeaseRunOut(key, note);
        // a resolver that passes on the links of the gateway's answer, more than the server sends
        java.util.List<io.idempotency.core.StoredResponse.Header> links = java.util.stream.IntStream.range(0, 400)
                .mapToObj(i -> new io.idempotency.core.StoredResponse.Header("Link",
                        "</gateway/charges/7/events/" + i + ">; rel=\"item\""))
                .toList();
        resolver.decideNext(() -> io.idempotency.core.StaleClaimResolver.Resolution.complete(
                new io.idempotency.core.StoredResponse(201, links,
                        "{\"resolved\":true}".getBytes(java.nio.charset.StandardCharsets.UTF_8))));
        HttpResponse<String> refused = charge("/intent/charges", key, note);

        assertThat(refused.statusCode()).as("an error of the resolver, not the request's answer").isEqualTo(500);
        assertThat(status(key)).as("neither completed nor failed: still unresolved").isEqualTo("PROCESSING");

        awaitLeaseExpired(key);
        HttpResponse<String> later = charge("/intent/charges", key, note);
        HttpResponse<String> replay = charge("/intent/charges", key, note);
        for (HttpResponse<String> answer : java.util.List.of(later, replay)) {
            assertThat(answer.statusCode()).isEqualTo(201);
            assertThat(answer.body()).contains("\"resolved\":true");
        }
    }

    /**
     * Charges under {@code key} with an outcome the gateway leaves unknown, answered 500, and waits until the claim,
     * left for the resolver, has a lease that ran out.
     */
    private void unknownOutcomeWithItsLeaseRunOut(String key, String note) throws InterruptedException {
        assertThat(charge("/intent/charges", key, note, "X-Fail", "unknown").statusCode()).isEqualTo(500);
        awaitLeaseExpired(key);
    }

    private static String token(String key) {
        return DATABASE.queryString("select fencing_token from idempotency_keys where idempotency_key = '" + key + "'");
    }

    /** Waits (on the database clock) until the claim of {@code key} has a lease that ran out. */
    private static void awaitLeaseExpired(String key) throws InterruptedException {
        Await.until("the lease of " + key + " runs out", Duration.ofSeconds(10), () -> "t".equals(DATABASE.queryString(
                "select locked_until < now() from idempotency_keys where idempotency_key = '" + key + "'")));
    }

    private void awaitStatus(String key, String expected) throws InterruptedException {
        Await.until(key + " becomes " + expected, Duration.ofSeconds(10), () -> expected.equals(status(key)));
    }

    @Test
    void theDownstreamKeyIsNeverTheClientsKey() throws Exception {
        String key = UUID.randomUUID().toString();
        assertThat(charge("/intent/charges", key, "downstream-" + key).statusCode()).isEqualTo(201);

        assertThat(gateway.chargeFor(key)).as("the raw key never reaches the gateway").isNull();
        assertThat(gateway.chargeFor(downstreamKeyOf(key))).isNotNull();
    }

    private static String downstreamKeyOf(String key) {
        return downstreamKeyOf("/intent/charges", key);
    }

    private static String downstreamKeyOf(String path, String key) {
        return new io.idempotency.core.DownstreamKeys(io.idempotency.core.IdempotencyEngine.DEFAULT_DOWNSTREAM_SECRET)
                .derive(new io.idempotency.core.ScopedKey("", "POST " + path, key));
    }

    private HttpResponse<String> charge(String path, String key, String note, String... headers) {
        try {
            HttpRequest.Builder request = HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                    .header("Content-Type", "application/json")
                    .header("Idempotency-Key", key)
                    .POST(HttpRequest.BodyPublishers.ofString("{\"note\":\"" + note + "\"}"));
            if (headers.length > 0) {
                request.headers(headers);
            }
            return http.send(request.build(), HttpResponse.BodyHandlers.ofString());
        } catch (IOException | InterruptedException e) {
            throw new IllegalStateException(e);
        }
    }
}
