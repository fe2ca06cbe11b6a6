package io.idempotency.spring;

import io.idempotency.testkit.Async;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.test.context.TestPropertySource;

import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.Statement;
import java.time.Duration;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The database fails a request while its key is claimed or its answer recorded, on real PostgreSQL over real HTTP:
 * the request's backend is terminated while the claim or the statement that stores the answer runs. Triggers on the
 * records of this test's keys make those statements wait for an advisory lock the test holds, so the test knows the
 * moment. (The claim waits at most the in-flight wait, which is therefore long here.)
 */
@TestPropertySource(properties = {"idempotency.in-flight-wait=20s", "idempotency.sweeper.enabled=false"})
class DatabaseFaultsIntegrationTest extends OrdersApplicationTest {

    private static final String PREFIX = "fault-complete-";
    private static final String CLAIM_PREFIX = "fault-claim-";
    private static final String HANDLER_PREFIX = "fault-handler-";
    private static final String COMMIT_PREFIX = "fault-commit-";

    @BeforeEach
    void blockCompletionOfThisTestsKeys() {
        DATABASE.queryString("""
                create or replace function fault_block_complete() returns trigger language plpgsql as $$
                begin
                    perform pg_advisory_xact_lock(hashtext(new.idempotency_key));
                    return new;
                end $$""");
        DATABASE.queryString("drop trigger if exists fault_block_complete on idempotency_keys");
        DATABASE.queryString("create trigger fault_block_complete before update on idempotency_keys for each row"
                + " when (new.status = 'SUCCEEDED' and new.idempotency_key like '" + PREFIX + "%')"
                + " execute function fault_block_complete()");
        DATABASE.queryString("drop trigger if exists fault_block_claim on idempotency_keys");
        DATABASE.queryString("create trigger fault_block_claim before insert on idempotency_keys for each row"
                + " when (new.idempotency_key like '" + CLAIM_PREFIX + "%') execute function fault_block_complete()");
        DATABASE.queryString("""
                create or replace function fault_block_order() returns trigger language plpgsql as $$
                begin
                    perform pg_advisory_xact_lock(hashtext(new.note));
                    return new;
                end $$""");
        DATABASE.queryString("drop trigger if exists fault_block_order on orders");
        DATABASE.queryString("create trigger fault_block_order before insert on orders for each row"
                + " when (new.note like '" + HANDLER_PREFIX + "%') execute function fault_block_order()");
        DATABASE.queryString("drop trigger if exists fault_block_commit on orders");
        DATABASE.queryString("create constraint trigger fault_block_commit after insert on orders"
                + " deferrable initially deferred for each row"
                + " when (new.note like '" + COMMIT_PREFIX + "%') execute function fault_block_order()");
    }

    @AfterAll
    static void dropTrigger() {
        DATABASE.queryString("drop trigger if exists fault_block_complete on idempotency_keys");
        DATABASE.queryString("drop trigger if exists fault_block_claim on idempotency_keys");
        DATABASE.queryString("drop function if exists fault_block_complete()");
        DATABASE.queryString("drop trigger if exists fault_block_order on orders");
        DATABASE.queryString("drop trigger if exists fault_block_commit on orders");
        DATABASE.queryString("drop function if exists fault_block_order()");
    }

    @Test
    void aConnectionLostWhileTheAnswerIsStoredIsAFailedCommitAndLeavesNothing() throws Exception {
        String key = PREFIX + UUID.randomUUID();
        String note = "lost-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> failed = killedWhileStoring(key, () -> post("/orders", key, body));

        assertThat(failed.statusCode()).isEqualTo(500);
        assertProblem(failed, "idempotency-commit-failed");
        assertThat(new String(failed.body(), StandardCharsets.UTF_8)).contains("safe to retry");
        assertNothingKeptAndTheRetryRuns("/orders", key, body, note);
    }

    @Test
    void intentFirstAConnectionLostWhileTheResultIsStoredIsAFailedCommitThatSaysTheClaimStays() throws Exception {
        String key = PREFIX + UUID.randomUUID();
        String note = "lost-intent-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> failed = killedWhileStoring(key, () -> post("/intent/charges", key, body));

        assertThat(failed.statusCode()).isEqualTo(500);
        assertProblem(failed, "idempotency-commit-failed");
        assertThat(new String(failed.body(), StandardCharsets.UTF_8)).contains("answered 409 until then");
        assertThat(rows(note)).as("the local write rolled back").isZero();
        assertThat(status(key)).as("the external call may have happened: the claim is for the resolver").isEqualTo("PROCESSING");
        // its lease runs out (as if a second had passed): the retry asks the resolver, which finds the charge
        DATABASE.queryString("update idempotency_keys set locked_until = now() - interval '1 second'"
                + " where idempotency_key = '" + key + "'");
        HttpResponse<byte[]> retry = post("/intent/charges", key, body);
        assertThat(retry.statusCode()).isEqualTo(201);
        assertThat(new String(retry.body(), StandardCharsets.UTF_8)).contains("\"resolved\":true");
    }

    @Test
    void aConnectionLostWhileTheKeyIsClaimedIsAnsweredUnavailableAndLeavesNothing() throws Exception {
        for (String path : new String[] {"/orders", "/intent/charges"}) {
            String key = CLAIM_PREFIX + UUID.randomUUID();
            String note = "lost-claim-" + key;
            String body = "{\"note\":\"" + note + "\"}";

            HttpResponse<byte[]> failed = killedWhile(key, "WITH%", () -> post(path, key, body));

            assertThat(failed.statusCode()).as(path).isEqualTo(503);
            assertProblem(failed, "idempotency-store-unavailable");
            assertThat(failed.headers().firstValue("Retry-After")).hasValue("1");
            assertThat(rows(note)).as("the handler did not run").isZero();
            assertThat(keyRows(key)).as("no claim").isZero();
            HttpResponse<byte[]> retry = post(path, key, body);
            assertThat(retry.statusCode()).as(path).isEqualTo(201);
            assertThat(rows(note)).isEqualTo(1);
        }
    }

    @Test
    void aHandlerThatAnswersItsOwnLostConnectionGetsItsAnswerSentAndLeavesTheKeyFree() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = HANDLER_PREFIX + key;
        String body = "{\"note\":\"" + note + "\"}";

        // the handler's own write loses its connection; it catches that and answers 503, which is not stored
        HttpResponse<byte[]> failed = killedWhileInserting(note, () -> post("/orders/guarded", key, body));

        assertThat(failed.statusCode()).as("the handler's answer, not an error page").isEqualTo(503);
        assertThat(failed.headers().firstValue("Retry-After")).hasValue("7");
        assertThat(new String(failed.body(), StandardCharsets.UTF_8)).contains("orders unavailable");
        assertNothingKeptAndTheRetryRuns("/orders/guarded", key, body, note);
    }

    @Test
    void aHandlerThatSendsAnErrorForItsOwnLostConnectionGetsThatErrorSentAndLeavesTheKeyFree() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = HANDLER_PREFIX + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> failed = killedWhileInserting(note,
                () -> post("/orders/guarded?sendError=true", key, body));

        assertThat(failed.statusCode()).as("the handler's sendError, not a 500 in its place").isEqualTo(503);
        assertNothingKeptAndTheRetryRuns("/orders/guarded?sendError=true", key, body, note);
    }

    /**
     * The answer is too large to store, and the rollback of the request fails on the connection the handler lost: the
     * client still gets the problem that says nothing was kept, not an error page in its place.
     */
    @Test
    void aTooLargeAnswerOnALostConnectionGetsItsProblemSent() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = HANDLER_PREFIX + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> failed = killedWhileInserting(note, () -> post("/orders/guarded?pad=1100000", key, body));

        assertThat(failed.statusCode()).isEqualTo(500);
        assertProblem(failed, "idempotency-response-too-large");
        assertNothingKeptAndTheRetryRuns("/orders/guarded?pad=1100000", key, body, note);
    }

    @Test
    void aConnectionLostWhileTheCommitRunsIsAnUnknownOutcomeThatTheRetryResolves() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = COMMIT_PREFIX + key;
        String body = "{\"note\":\"" + note + "\"}";

        // a deferred constraint trigger runs at COMMIT, before the commit is written: the backend is terminated
        // there. The application only learns that the connection went away during the commit (the rollback that
        // follows fails too), so it cannot say nothing was kept; the retry finds nothing and runs
        HttpResponse<byte[]> failed = killedWhile(note, "COMMIT%", () -> post("/orders", key, body));

        assertThat(failed.statusCode()).isEqualTo(500);
        assertProblem(failed, "idempotency-commit-failed");
        assertThat(new String(failed.body(), StandardCharsets.UTF_8)).contains("unknown")
                .doesNotContain("none were kept");
        assertThat(rows(note)).as("no business row").isZero();
        assertThat(keyRows(key)).as("no record").isZero();
        HttpResponse<byte[]> retry = post("/orders", key, body);
        assertThat(retry.statusCode()).isEqualTo(201);
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(rows(note)).isEqualTo(1);
    }

    /**
     * The failed request kept nothing, neither its handler's row nor its claim, so its retry runs as a first request
     * would and writes the row once.
     */
    private void assertNothingKeptAndTheRetryRuns(String path, String key, String body, String note)
            throws Exception {
        assertThat(rows(note)).as("no business row").isZero();
        assertThat(keyRows(key)).as("no claim").isZero();
        assertThat(post(path, key, body).statusCode()).isEqualTo(201);
        assertThat(rows(note)).isEqualTo(1);
    }

    interface Call {
        HttpResponse<byte[]> send() throws Exception;
    }

    /** Sends {@code call} and terminates its backend while it stores the answer of {@code key}. */
    private HttpResponse<byte[]> killedWhileStoring(String key, Call call) throws Exception {
        return killedWhile(key, "UPDATE%", call);
    }

    /** Sends {@code call} and terminates its backend while its handler inserts the order noted {@code note}. */
    private HttpResponse<byte[]> killedWhileInserting(String note, Call call) throws Exception {
        return killedWhile(note, "insert into orders%", call);
    }

    /** Sends {@code call} and terminates its backend while it runs a statement like {@code query} on {@code key}. */
    private HttpResponse<byte[]> killedWhile(String key, String query, Call call) throws Exception {
        try (Connection holder = DriverManager.getConnection(DATABASE.url(), DATABASE.user(), DATABASE.password());
             Statement statement = holder.createStatement()) {
            statement.execute("select pg_advisory_lock(hashtext('" + key + "'))");
            CompletableFuture<HttpResponse<byte[]>> answer = Async.supply(() -> {
                try {
                    return call.send();
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });
            DATABASE.awaitLockWaiter(Duration.ofSeconds(10));
            long killed = DATABASE.queryLong("select count(pg_terminate_backend(pid)) from pg_stat_activity"
                    + " where application_name = '" + DATABASE.schema() + "' and wait_event_type = 'Lock'"
                    + " and query like '" + query + "'");
            assertThat(killed).as("the backend running " + query).isEqualTo(1);
            HttpResponse<byte[]> response = answer.get(30, TimeUnit.SECONDS);
            statement.execute("select pg_advisory_unlock_all()");
            return response;
        }
    }
}
