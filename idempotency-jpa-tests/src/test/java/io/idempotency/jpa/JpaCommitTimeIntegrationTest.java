package io.idempotency.jpa;

import io.idempotency.jpa.app.CommitTimeController;
import io.idempotency.jpa.app.JpaTestApplication;
import io.idempotency.jpa.app.PostCommitAnnouncements;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

import java.net.http.HttpResponse;
import java.util.UUID;
import java.util.concurrent.ThreadLocalRandom;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * What a JPA application's transaction does at the commit, which the filter makes after the answer has been rendered:
 * a deferred constraint that fails there, callbacks and transactional event listeners that run there, and Hibernate's
 * optimistic locking at the flush after the handler returned. Over real HTTP on real PostgreSQL, open-in-view on.
 */
@SpringBootTest(classes = JpaTestApplication.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
class JpaCommitTimeIntegrationTest extends JpaHttpTest {

    static final TestPostgres.Database DATABASE = JpaContexts.withPurchases();

    @Override
    TestPostgres.Database database() {
        return DATABASE;
    }

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        JpaContexts.register(registry, DATABASE);
    }

    /**
     * The flush after the handler passes; PostgreSQL refuses the purchase only at the COMMIT. The client gets a 500
     * that says nothing was kept, nothing is kept, the key is free, and the retry runs again instead of replaying.
     */
    @Test
    void aDeferredConstraintThatFailsAtTheCommitKeepsNothingAndLeavesTheKeyFree() throws Exception {
        String key = UUID.randomUUID().toString();
        String reference = "deferred-" + key;

        HttpResponse<String> refused = post("/commit-time/purchases", key, purchase(reference, "fails-at-commit"));
        String afterFirst = record(key);
        HttpResponse<String> retry = post("/commit-time/purchases", key, purchase(reference, "fails-at-commit"));

        assertThat(refused.statusCode()).isEqualTo(500);
        assertThat(refused.headers().firstValue("Content-Type")).hasValue("application/problem+json");
        assertThat(refused.body()).contains("idempotency-commit-failed", "none were kept",
                "safe to retry with the same key").doesNotContain(reference);
        assertThat(afterFirst).as("the key is free").isNull();
        assertThat(retry.statusCode()).as("the retry runs again").isEqualTo(500);
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(purchases(reference)).isZero();
        assertThat(record(key)).isNull();
        assertThat(CommitTimeController.HEARD).filteredOn(heard -> heard.contains(" " + reference))
                .as("before-commit listeners ran in each attempt, after-commit ones never")
                .containsExactly("before-commit " + reference + " " + key, "after-rollback " + reference,
                        "before-commit " + reference + " " + key, "after-rollback " + reference);
    }

    /**
     * Intent first, the purchase is refused only at the COMMIT of the handler's transaction: nothing of it is kept and
     * the client is told so, but the claim, committed before the handler called the third party, stays PROCESSING for
     * the resolver, so the retry is answered 409, neither replayed nor run again.
     */
    @Test
    void intentFirstADeferredConstraintThatFailsAtTheCommitLeavesTheClaimForTheResolver() throws Exception {
        String key = UUID.randomUUID().toString();
        String reference = "intent-deferred-" + key;

        HttpResponse<String> refused = post("/purchases/intent", key, purchase(reference, "fails-at-commit"));
        HttpResponse<String> retry = post("/purchases/intent", key, purchase(reference, "fails-at-commit"));

        assertThat(refused.statusCode()).isEqualTo(500);
        assertThat(refused.body()).contains("idempotency-commit-failed", "answered 409 until then")
                .doesNotContain(reference);
        assertThat(purchases(reference)).isZero();
        assertThat(record(key)).as("the third party may have been called").isEqualTo("PROCESSING -");
        assertThat(retry.statusCode()).as(retry.body()).isEqualTo(409);
        assertThat(retry.body()).contains("idempotency-request-in-progress");
        assertThat(purchases(reference)).isZero();
    }

    /** After-commit listeners run once, after the real commit; a replay commits nothing and runs none. */
    @Test
    void afterCommitListenersRunOnceAfterTheRealCommitAndNotForReplays() throws Exception {
        String key = UUID.randomUUID().toString();
        String reference = "listened-" + key;

        HttpResponse<String> first = post("/commit-time/purchases", key, purchase(reference, "two tickets"));
        HttpResponse<String> replay = post("/commit-time/purchases", key, purchase(reference, "two tickets"));

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(CommitTimeController.HEARD).filteredOn(heard -> heard.contains(" " + reference))
                .containsExactly("before-commit " + reference + " " + key, "after-commit " + reference);
        assertThat(purchases(reference)).isEqualTo(1);
        assertThat(record(key)).isEqualTo("SUCCEEDED 201");
    }

    /**
     * A callback after the commit fails (a message that could not be sent once the purchase was kept): the purchase
     * and its answer are committed, so the client gets that answer, as every retry does, never a 500 saying that
     * nothing was kept.
     */
    @Test
    void aFailingAfterCommitCallbackDoesNotTurnACommittedPurchaseIntoAFailure() throws Exception {
        String key = UUID.randomUUID().toString();
        String reference = "announced-" + key;

        assertThePurchaseIsKeptAndIsTheAnswer("/commit-time/purchases/announced", key, reference, "two tickets");
    }

    /**
     * A Hibernate post-commit listener fails after the database committed the purchase and its answer (a message that
     * could not be sent once the purchase was kept): the client gets that answer, as every retry does, never a 500
     * saying that nothing was kept.
     */
    @Test
    void aFailingHibernatePostCommitListenerDoesNotTurnACommittedPurchaseIntoAFailure() throws Exception {
        String key = UUID.randomUUID().toString();
        String reference = "post-commit-" + key;

        assertThePurchaseIsKeptAndIsTheAnswer("/commit-time/purchases", key, reference, "fails-after-commit");
        assertThat(PostCommitAnnouncements.ANNOUNCED).as("the listener ran after the commit").contains(reference);
    }

    /**
     * A Hibernate post-commit listener fails on a statement of its own that the database refuses (an announcement
     * written to a table that is not there), after the database committed the purchase and its answer: that failure
     * names a database error, but not the commit's, so the client gets the answer all the same.
     */
    @Test
    void aPostCommitListenerFailingOnItsOwnStatementDoesNotTurnACommittedPurchaseIntoAFailure() throws Exception {
        String key = UUID.randomUUID().toString();
        String reference = "post-commit-sql-" + key;

        assertThePurchaseIsKeptAndIsTheAnswer("/commit-time/purchases", key, reference,
                "fails-after-commit-in-the-database");
        assertThat(PostCommitAnnouncements.ANNOUNCED).as("the listener ran after the commit").contains(reference);
    }

    /** A first attempt and its retry: one purchase, committed with its answer, which both get. */
    private void assertThePurchaseIsKeptAndIsTheAnswer(String path, String key, String reference, String item)
            throws Exception {
        HttpResponse<String> first = post(path, key, purchase(reference, item));
        HttpResponse<String> retry = post(path, key, purchase(reference, item));

        assertThat(purchases(reference)).isEqualTo(1);
        assertThat(record(key)).isEqualTo("SUCCEEDED 201");
        assertThat(first.statusCode()).as(first.body()).isEqualTo(201);
        assertThat(first.body()).contains("\"reference\":\"" + reference + "\"");
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(retry.body()).isEqualTo(first.body());
    }

    /**
     * Hibernate's versioned UPDATE runs at the flush after the handler returned and finds the account changed: the
     * application's exception handler answers (and can read the database), nothing is stored, and the retry runs.
     */
    @Test
    void anOptimisticLockFailureAtTheFlushReachesTheApplicationAndLeavesTheKeyFree() throws Exception {
        long id = ThreadLocalRandom.current().nextLong(1, Long.MAX_VALUE);
        DATABASE.queryString("insert into accounts (id, balance, version) values (" + id + ", 100, 0)");
        String key = UUID.randomUUID().toString();

        HttpResponse<String> conflict = post("/commit-time/accounts/" + id + "/debit", key,
                "{\"amount\":30,\"concurrent\":5}");
        String afterConflict = record(key);
        HttpResponse<String> retry = post("/commit-time/accounts/" + id + "/debit", key,
                "{\"amount\":30,\"concurrent\":5}");

        assertThat(conflict.statusCode()).isEqualTo(409);
        assertThat(conflict.body()).contains("\"error\":\"changed-meanwhile\"", "\"accounts\":");
        assertThat(afterConflict).isNull();
        assertThat(retry.statusCode()).isEqualTo(409);
        assertThat(DATABASE.queryLong("select balance from accounts where id = " + id))
                .as("only the concurrent debits").isEqualTo(90);
        assertThat(record(key)).isNull();

        String other = UUID.randomUUID().toString();
        HttpResponse<String> debited = post("/commit-time/accounts/" + id + "/debit", other, "{\"amount\":30}");
        HttpResponse<String> replayed = post("/commit-time/accounts/" + id + "/debit", other, "{\"amount\":30}");
        assertThat(debited.statusCode()).isEqualTo(200);
        assertThat(replayed.body()).isEqualTo(debited.body());
        assertThat(DATABASE.queryLong("select balance from accounts where id = " + id)).isEqualTo(60);
    }

    /**
     * An answer that loads a lazy entity while it is serialized, after the handler returned: the request's transaction
     * is still open then (with open-in-view off too), so the answer is complete, stored and replayed byte for byte.
     */
    @Test
    void anEntityLoadedLazilyWhileTheAnswerIsSerializedIsStoredAndReplayed() throws Exception {
        String reference = "lazy-" + UUID.randomUUID();
        HttpResponse<String> created = post("/commit-time/purchases", UUID.randomUUID().toString(),
                purchase(reference, "two tickets"));
        String location = created.headers().firstValue("Location").orElseThrow();
        String key = UUID.randomUUID().toString();

        HttpResponse<String> first = post("/commit-time" + location + "/lazy-note", key, "");
        HttpResponse<String> replay = post("/commit-time" + location + "/lazy-note", key, "");

        assertThat(first.statusCode()).isEqualTo(200);
        assertThat(first.body()).isEqualTo("{\"note\":\"two tickets\"}");
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(record(key)).isEqualTo("SUCCEEDED 200");
    }

    private static String purchase(String reference, String note) {
        return "{\"reference\":\"" + reference + "\",\"note\":\"" + note + "\"}";
    }
}
