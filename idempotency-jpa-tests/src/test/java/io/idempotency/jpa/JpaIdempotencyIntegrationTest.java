package io.idempotency.jpa;

import io.idempotency.jpa.app.JpaTestApplication;
import io.idempotency.jpa.app.PurchaseUpdates;
import io.idempotency.testkit.TestPostgres;
import io.idempotency.jpa.app.ThreadBoundResources;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.orm.jpa.JpaTransactionManager;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.transaction.PlatformTransactionManager;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.UUID;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The starter in a Spring Data JPA application, over real HTTP on real PostgreSQL: the transaction manager is JPA's,
 * the handler's INSERT is held back by Hibernate until a flush, and Boot's open-in-view keeps an EntityManager open
 * for the whole request (its default).
 */
@SpringBootTest(classes = JpaTestApplication.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
class JpaIdempotencyIntegrationTest extends JpaHttpTest {

    static final TestPostgres.Database DATABASE = JpaContexts.withPurchases();

    @Override
    TestPostgres.Database database() {
        return DATABASE;
    }

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        JpaContexts.register(registry, DATABASE);
    }

    @Autowired
    PlatformTransactionManager transactionManager;

    @Test
    void theApplicationRunsOnJpasTransactionManager() {
        assertThat(transactionManager).isInstanceOf(JpaTransactionManager.class);
    }

    @Test
    void theClaimIsWrittenInTheTransactionJpaRunsTheHandlerIn() throws Exception {
        HttpResponse<String> response = post("/purchases/claim-transaction", UUID.randomUUID().toString(), "{}");

        assertThat(response.statusCode()).isEqualTo(200);
        assertThat(response.body()).isEqualTo("{\"claimWrittenInThisTransaction\":true}");
    }

    @Test
    void aPurchaseIsMadeOnceAndReplayedByteForByte() throws Exception {
        String key = UUID.randomUUID().toString();
        String reference = "once-" + key;
        String body = purchase(reference);

        HttpResponse<String> first = post("/purchases", key, body);
        HttpResponse<String> second = post("/purchases", key, body);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(first.body()).contains("\"reference\":\"" + reference + "\"");
        assertThat(second.statusCode()).isEqualTo(201);
        assertThat(second.body()).isEqualTo(first.body());
        assertThat(second.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(second.headers().firstValue("Location")).isEqualTo(first.headers().firstValue("Location"));
        assertThat(purchases(reference)).isEqualTo(1);
        assertThat(record(key)).isEqualTo("SUCCEEDED 201");
    }

    /**
     * Without @Idempotent, the handler's own transaction commits (and flushes) when it returns, so a unique constraint
     * reaches the application's exception handler. With it, the commit comes after the answer is written; the
     * library flushes when the handler returns, so the application still answers it, and nothing is stored.
     */
    @Test
    void aConstraintViolationHeldBackByJpaReachesTheApplicationsExceptionHandler() throws Exception {
        String reference = "taken-" + UUID.randomUUID();
        assertThat(post("/purchases", UUID.randomUUID().toString(), purchase(reference)).statusCode()).isEqualTo(201);
        String key = UUID.randomUUID().toString();

        HttpResponse<String> duplicate = post("/purchases", key, purchase(reference));
        HttpResponse<String> retry = post("/purchases", key, purchase(reference));

        assertThat(duplicate.statusCode()).isEqualTo(409);
        assertThat(duplicate.body()).as("the exception handler could read the database").contains(
                "\"error\":\"duplicate-reference\"", "\"purchases\":" + DATABASE.queryLong("select count(*) from purchases"));
        assertThat(retry.statusCode()).as("a 409 is not stored: the retry runs again").isEqualTo(409);
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(purchases(reference)).isEqualTo(1);
        assertThat(record(key)).as("nothing stored for the refused purchase").isNull();
    }

    /**
     * A handler that catches the failure of its repository's write and answers 409 itself: the failed write left the
     * transaction to be rolled back, which Spring does without flushing again, so the handler's answer is sent and
     * nothing is kept.
     */
    @Test
    void aHandlerAnsweringTheFailureOfItsOwnWriteGetsItsAnswerSent() throws Exception {
        String reference = "caught-" + UUID.randomUUID();
        assertThat(post("/purchases/or-conflict", UUID.randomUUID().toString(), purchase(reference)).statusCode())
                .isEqualTo(201);
        String key = UUID.randomUUID().toString();

        HttpResponse<String> duplicate = post("/purchases/or-conflict", key, purchase(reference));

        assertThat(duplicate.statusCode()).isEqualTo(409);
        assertThat(duplicate.body()).isEqualTo("{\"error\":\"reference-taken\"}");
        assertThat(purchases(reference)).isEqualTo(1);
        assertThat(record(key)).isNull();
    }

    /**
     * An UPDATE Hibernate holds back until the flush is still the handler's write: an entity listener called at the
     * flush sees the request's idempotency context, as the handler's own statements do with plain JDBC.
     */
    @Test
    void aHeldBackUpdateIsWrittenUnderTheRequestsContext() throws Exception {
        String reference = "renoted-" + UUID.randomUUID();
        HttpResponse<String> created = post("/purchases", UUID.randomUUID().toString(), purchase(reference));
        assertThat(created.statusCode()).isEqualTo(201);
        String id = created.headers().firstValue("Location").orElseThrow().substring("/purchases/".length());
        String key = UUID.randomUUID().toString();

        HttpResponse<String> renoted = post("/purchases/" + id + "/renote", key,
                "{\"reference\":\"" + reference + "\",\"note\":\"changed\"}");

        assertThat(renoted.statusCode()).isEqualTo(200);
        assertThat(DATABASE.queryString("select note from purchases where reference = '" + reference + "'"))
                .isEqualTo("changed");
        assertThat(PurchaseUpdates.SEEN).filteredOn(seen -> seen.startsWith(reference + " "))
                .containsExactly(reference + " " + key);
    }

    @Test
    void aHandlerFailingAfterItsWriteLeavesNeitherThePurchaseNorTheClaim() throws Exception {
        HttpResponse<String> failed = postLeavingNothing("/purchases/failing");

        assertThat(failed.statusCode()).isEqualTo(500);
    }

    /** An answer that is not stored is rolled back by the filter, after the dispatcher has finished. */
    @Test
    void anAnswerThatIsNotStoredRollsThePurchaseBackAfterTheDispatcherFinished() throws Exception {
        HttpResponse<String> answer = postLeavingNothing("/purchases/unavailable");

        assertThat(answer.statusCode()).isEqualTo(503);
        assertThat(answer.body()).isEqualTo("{\"error\":\"try-later\"}");
    }

    /** Posts a new purchase with a new key to {@code path}, and checks that neither the purchase nor a record stayed. */
    private HttpResponse<String> postLeavingNothing(String path) throws IOException, InterruptedException {
        String key = UUID.randomUUID().toString();
        String reference = "rolled-back-" + key;

        HttpResponse<String> response = post(path, key, purchase(reference));

        assertThat(purchases(reference)).as("the purchase").isZero();
        assertThat(record(key)).as("the claim").isNull();
        return response;
    }

    @Test
    void anIntentFirstPurchaseIsMadeOnceAndReplayed() throws Exception {
        String key = UUID.randomUUID().toString();
        String reference = "intent-" + key;

        HttpResponse<String> first = post("/purchases/intent", key, purchase(reference));
        HttpResponse<String> second = post("/purchases/intent", key, purchase(reference));

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(second.body()).isEqualTo(first.body());
        assertThat(second.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(purchases(reference)).isEqualTo(1);
        assertThat(record(key)).isEqualTo("SUCCEEDED 201");
    }

    /** A definite failure: the purchase rolls back, the committed claim is marked FAILED, and a retry runs at once. */
    @Test
    void aDeclinedIntentFirstPurchaseLeavesAFailedClaimAndTheRetryRunsAgain() throws Exception {
        String key = UUID.randomUUID().toString();
        String reference = "declined-" + key;

        HttpResponse<String> declined = post("/purchases/intent", key, purchase(reference));
        String claim = record(key);
        HttpResponse<String> retry = post("/purchases/intent", key, purchase(reference));

        assertThat(declined.statusCode()).isEqualTo(402);
        assertThat(declined.body()).as("the exception handler could read the database")
                .contains("\"error\":\"declined\"", "\"purchases\":");
        assertThat(claim).isEqualTo("FAILED -");
        assertThat(retry.statusCode()).as("the retry runs at once instead of waiting for the lease").isEqualTo(402);
        assertThat(purchases(reference)).isZero();
    }

    /** The starter leaves requests that claim nothing to open-in-view as they are, async processing included. */
    @Test
    void aRequestWithoutAKeyAnsweredOnAnotherThreadStillReadsThroughItsEntityManager() throws Exception {
        String reference = "async-" + UUID.randomUUID();
        HttpResponse<String> created = post("/purchases", UUID.randomUUID().toString(), purchase(reference));
        String location = created.headers().firstValue("Location").orElseThrow();

        HttpResponse<String> note = http.send(HttpRequest.newBuilder(URI.create("http://localhost:" + port + location
                + "/note")).POST(HttpRequest.BodyPublishers.noBody()).build(), HttpResponse.BodyHandlers.ofString());

        assertThat(note.statusCode()).isEqualTo(200);
        assertThat(note.body()).isEqualTo("two tickets");
    }

    /** No request of this class left an EntityManager, a connection or a transaction bound to a server thread. */
    @AfterAll
    static void nothingWasLeftBoundToAServerThread() throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (ThreadBoundResources.UNFINISHED.get() > 0 && System.nanoTime() < deadline) {
            Thread.sleep(10); // the client can have its answer before the server's filter chain has unwound
        }
        assertThat(ThreadBoundResources.UNFINISHED.get()).isZero();
        assertThat(ThreadBoundResources.LEFT_BOUND).isEmpty();
    }

    private static String purchase(String reference) {
        return "{\"reference\":\"" + reference + "\",\"note\":\"two tickets\"}";
    }
}
