package io.idempotency.sample.payment;

import io.idempotency.testkit.Async;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

import java.net.http.HttpResponse;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static io.idempotency.sample.payment.PaymentApi.REPLAYED_HEADER;
import static io.idempotency.sample.payment.PaymentApi.contentType;
import static io.idempotency.sample.payment.PaymentApi.text;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code POST /provider/notifications} on a real PostgreSQL, over HTTP, with a provider that behaves as providers do:
 * no key header, a fresh nonce and signature on every delivery, events out of order, and a re-send of every event
 * until it is answered 2xx. Every test uses payments of its own, and reads the database to see what was recorded.
 *
 * <p>One test deletes an idempotency record by hand, as retention does after days; the in-memory replay cache would
 * still answer it on this instance, so it is switched off here.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = {"sample.chaos.enabled=true", "idempotency.replay-cache.max-entries=0",
                "sample.provider.notification-secret=" + ProviderNotificationIntegrationTest.SECRET})
class ProviderNotificationIntegrationTest {

    static final String SECRET = "secret-of-these-tests";

    private static final String PATH = "/provider/notifications";

    private static final TestPostgres.Database DB = TestPostgres.newDatabase();

    private final ProviderSignatures provider = new ProviderSignatures(SECRET);

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DB.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @LocalServerPort
    int port;

    PaymentApi api;

    @BeforeEach
    void client() {
        api = PaymentApi.onPort(port);
    }

    /** One event of a payment's history, as the provider sends it (signed afresh on every delivery). */
    record Event(String eventId, String transactionId, String status, long version) {
        static Event of(String transactionId, String status, long version) {
            return new Event("evt-" + UUID.randomUUID(), transactionId, status, version);
        }
    }

    private HttpResponse<byte[]> deliver(Event event) throws Exception {
        return deliver(event, null);
    }

    private HttpResponse<byte[]> deliver(Event event, String chaos) throws Exception {
        ProviderNotification unsigned = new ProviderNotification(event.eventId(), event.transactionId(),
                "order-" + event.transactionId(), event.status(), event.version(), UUID.randomUUID().toString(), null);
        return post(json(unsigned, provider.sign(unsigned)), chaos);
    }

    private HttpResponse<byte[]> post(String body, String chaos) throws Exception {
        return api.postJson(PATH, null, null, null, body, chaos);
    }

    private static String json(ProviderNotification n, String signature) {
        return "{\"eventId\":\"" + n.eventId() + "\",\"transactionId\":\"" + n.transactionId() + "\",\"orderId\":\""
                + n.orderId() + "\",\"status\":\"" + n.status() + "\",\"version\":" + n.version() + ",\"nonce\":\""
                + n.nonce() + "\",\"signature\":\"" + signature + "\"}";
    }

    private static String newTransaction() {
        return "txn-" + UUID.randomUUID();
    }

    private static String state(String transactionId) {
        return DB.queryString("select coalesce((select status || ' v' || version from provider_payments"
                + " where transaction_id = '" + transactionId + "'), 'none')");
    }

    private static long logged(Event event) {
        return DB.queryLong("select count(*) from provider_events where event_id = '" + event.eventId() + "'");
    }

    private static String outcomeLogged(Event event) {
        return DB.queryString("select coalesce((select outcome from provider_events where event_id = '"
                + event.eventId() + "'), 'none')");
    }

    private static long idempotencyRecords(Event event) {
        return DB.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + event.eventId() + "'");
    }

    private static void assertAcknowledged(HttpResponse<byte[]> response, String outcome, String status,
                                           long version) {
        assertThat(response.statusCode()).as(text(response)).isEqualTo(200);
        assertThat(contentType(response)).startsWith("application/json");
        assertThat(text(response)).contains("\"outcome\":\"" + outcome + "\"", "\"status\":\"" + status + "\"",
                "\"version\":" + version);
    }

    @Test
    void aReSentEventWithAFreshNonceAndSignatureIsAReplayAndIsRecordedOnce() throws Exception {
        String txn = newTransaction();
        Event succeeded = Event.of(txn, "SUCCEEDED", 2);

        HttpResponse<byte[]> first = deliver(succeeded);
        HttpResponse<byte[]> again = deliver(succeeded);

        assertAcknowledged(first, "APPLIED", "SUCCEEDED", 2);
        assertThat(first.headers().firstValue(REPLAYED_HEADER)).isEmpty();
        assertThat(again.statusCode()).isEqualTo(200);
        assertThat(again.headers().firstValue(REPLAYED_HEADER)).hasValue("true");
        assertThat(again.body()).as("the first answer, byte for byte").isEqualTo(first.body());
        assertThat(state(txn)).isEqualTo("SUCCEEDED v2");
        assertThat(logged(succeeded)).isEqualTo(1);
    }

    @Test
    void aLateClosedSentBeforeSucceededIsAcknowledgedAsContradictedAndDoesNotUndoTheSuccess() throws Exception {
        String txn = newTransaction();
        Event pending = Event.of(txn, "PENDING", 1);
        Event closed = Event.of(txn, "CLOSED", 2);
        Event succeeded = Event.of(txn, "SUCCEEDED", 3);

        assertAcknowledged(deliver(pending), "APPLIED", "PENDING", 1);
        assertAcknowledged(deliver(succeeded), "APPLIED", "SUCCEEDED", 3);
        HttpResponse<byte[]> late = deliver(closed);

        // "closed" is never followed by "succeeded": the provider contradicts itself, and a person is to look
        assertAcknowledged(late, "CONTRADICTED", "SUCCEEDED", 3);
        assertThat(state(txn)).isEqualTo("SUCCEEDED v3");
        assertThat(outcomeLogged(closed)).isEqualTo("CONTRADICTED");
        // acknowledged, so it is stored: the provider's next delivery is a replay, not a second judgement
        HttpResponse<byte[]> again = deliver(closed);
        assertThat(again.headers().firstValue(REPLAYED_HEADER)).hasValue("true");
        assertThat(again.body()).isEqualTo(late.body());
    }

    @Test
    void theEventsOfOneHistoryInEveryOrderEndInItsLastStatus() throws Exception {
        List<List<Integer>> orders = List.of(List.of(0, 1, 2), List.of(0, 2, 1), List.of(1, 0, 2),
                List.of(1, 2, 0), List.of(2, 0, 1), List.of(2, 1, 0));
        for (List<Integer> order : orders) {
            String txn = newTransaction();
            List<Event> history = List.of(Event.of(txn, "PENDING", 1), Event.of(txn, "SUCCEEDED", 2),
                    Event.of(txn, "REFUNDED", 3));
            List<Event> toDeliver = new ArrayList<>();
            order.forEach(i -> toDeliver.add(history.get(i)));
            List<Integer> refusals = new ArrayList<>();
            // the provider: delivers in this order, and delivers again what was not answered 2xx
            for (int round = 0; !toDeliver.isEmpty(); round++) {
                assertThat(round).as("rounds of deliveries for order %s", order).isLessThan(3);
                List<Event> again = new ArrayList<>();
                for (Event event : toDeliver) {
                    HttpResponse<byte[]> response = deliver(event);
                    if (response.statusCode() == 200) {
                        continue;
                    }
                    assertThat(response.statusCode()).as(text(response)).isEqualTo(409);
                    assertThat(contentType(response)).startsWith("application/problem+json");
                    assertThat(text(response)).contains(NotificationRefusedException.OUT_OF_ORDER.toString());
                    assertThat(response.headers().firstValue("Retry-After")).hasValue("5");
                    assertThat(idempotencyRecords(event)).as("a refusal is not stored").isZero();
                    refusals.add((int) event.version());
                    again.add(event);
                }
                toDeliver.clear();
                toDeliver.addAll(again);
            }
            assertThat(state(txn)).as("order %s", order).isEqualTo("REFUNDED v3");
            for (Event event : history) {
                assertThat(logged(event)).as("order %s, %s", order, event).isEqualTo(1);
            }
            // "refunded" cannot follow "pending" directly: told to come back, only when it came right after it
            assertThat(refusals).as("order %s", order)
                    .isEqualTo(order.equals(List.of(0, 2, 1)) ? List.of(3) : List.of());
        }
    }

    @Test
    void concurrentDeliveriesOfAHistoryAndTheirDuplicatesRecordEachEventOnceAndEndInTheLastStatus() throws Exception {
        for (int trial = 0; trial < 8; trial++) {
            String txn = newTransaction();
            List<Event> history = List.of(Event.of(txn, "PENDING", 1), Event.of(txn, "SUCCEEDED", 2),
                    Event.of(txn, "REFUNDED", 3));
            List<CompletableFuture<Integer>> providers = new ArrayList<>();
            // deliveries answered by running the handler rather than replaying its answer, by event
            java.util.Map<String, java.util.concurrent.atomic.AtomicInteger> ran =
                    new java.util.concurrent.ConcurrentHashMap<>();
            for (Event event : history) {
                ran.put(event.eventId(), new java.util.concurrent.atomic.AtomicInteger());
                for (int copy = 0; copy < 3; copy++) { // the provider's own retries overlap
                    providers.add(Async.supply(() -> {
                        try {
                            for (int attempt = 1; ; attempt++) {
                                HttpResponse<byte[]> response = deliver(event);
                                if (response.statusCode() == 200) {
                                    if (response.headers().firstValue(REPLAYED_HEADER).isEmpty()) {
                                        ran.get(event.eventId()).incrementAndGet();
                                    }
                                    return attempt;
                                }
                                assertThat(response.statusCode()).as(text(response)).isIn(409);
                                assertThat(attempt).as("deliveries of %s", event).isLessThan(50);
                                Thread.sleep(20);
                            }
                        } catch (Exception e) {
                            throw new IllegalStateException(e);
                        }
                    }));
                }
            }
            for (CompletableFuture<Integer> delivered : providers) {
                delivered.get(60, TimeUnit.SECONDS);
            }
            assertThat(state(txn)).as("trial %d", trial).isEqualTo("REFUNDED v3");
            for (Event event : history) {
                assertThat(logged(event)).as("trial %d, %s", trial, event).isEqualTo(1);
                // the row above is kept once by its primary key whatever happens; that the handler ran once is
                // the library's doing: every other delivery of the event was answered with its stored answer
                assertThat(ran.get(event.eventId())).as("deliveries that ran the handler, trial %d, %s", trial,
                        event).hasValue(1);
            }
        }
    }

    @Test
    void aStatusThatComesBackIsOrderedByTheVersionAlsoForAnEventDeliveredAgainAfterItsRecordWasDeleted()
            throws Exception {
        String txn = newTransaction();
        Event disputed = Event.of(txn, "DISPUTED", 3);
        Event won = Event.of(txn, "SUCCEEDED", 4);
        assertAcknowledged(deliver(Event.of(txn, "PENDING", 1)), "APPLIED", "PENDING", 1);
        assertAcknowledged(deliver(Event.of(txn, "SUCCEEDED", 2)), "APPLIED", "SUCCEEDED", 2);

        // the dispute won, before the dispute itself arrived: "succeeded" again needs "disputed" first
        HttpResponse<byte[]> early = deliver(won);
        assertThat(early.statusCode()).as(text(early)).isEqualTo(409);
        assertThat(state(txn)).isEqualTo("SUCCEEDED v2");
        assertAcknowledged(deliver(disputed), "APPLIED", "DISPUTED", 3);
        assertAcknowledged(deliver(won), "APPLIED", "SUCCEEDED", 4);

        // Weeks later the provider delivers the dispute once more, its idempotency record gone (retention).
        // "Disputed" may follow "succeeded" — only its version tells that it is old news.
        assertThat(DB.queryLong("with gone as (delete from idempotency_keys where idempotency_key = '"
                + disputed.eventId() + "' returning 1) select count(*) from gone")).isEqualTo(1);
        HttpResponse<byte[]> old = deliver(disputed);

        assertAcknowledged(old, "SUPERSEDED", "SUCCEEDED", 4);
        assertThat(old.headers().firstValue(REPLAYED_HEADER)).as("judged afresh").isEmpty();
        assertThat(state(txn)).isEqualTo("SUCCEEDED v4");
        assertThat(logged(disputed)).isEqualTo(1);
        assertThat(outcomeLogged(disputed)).as("the log keeps what was done the first time").isEqualTo("APPLIED");
    }

    @Test
    void anotherEventUnderAnEventIdAlreadyRecordedIs422AndChangesNothing() throws Exception {
        String txn = newTransaction();
        Event succeeded = Event.of(txn, "SUCCEEDED", 2);
        assertAcknowledged(deliver(succeeded), "APPLIED", "SUCCEEDED", 2);

        HttpResponse<byte[]> other = deliver(new Event(succeeded.eventId(), txn, "REFUNDED", 3));

        assertThat(other.statusCode()).as(text(other)).isEqualTo(422);
        assertThat(text(other)).contains("idempotency-key-mismatch");
        assertThat(state(txn)).isEqualTo("SUCCEEDED v2");
    }

    @Test
    void aNotificationWithoutTheProvidersSignatureIs401AndClaimsNothing() throws Exception {
        String txn = newTransaction();
        Event succeeded = Event.of(txn, "SUCCEEDED", 2);
        ProviderNotification n = new ProviderNotification(succeeded.eventId(), txn, "order-" + txn, "SUCCEEDED", 2L,
                "nonce-1", null);
        String signedWithAnotherSecret = new ProviderSignatures("not-" + SECRET).sign(n);

        for (String body : List.of(json(n, signedWithAnotherSecret), json(n, provider.sign(n)).replace(
                "\"version\":2", "\"version\":20"))) {
            HttpResponse<byte[]> forged = post(body, null);
            assertThat(forged.statusCode()).as(text(forged)).isEqualTo(401);
            assertThat(contentType(forged)).startsWith("application/problem+json");
            assertThat(text(forged)).contains(NotificationRefusedException.INVALID_SIGNATURE.toString());
        }
        assertThat(idempotencyRecords(succeeded)).isZero();
        assertThat(state(txn)).isEqualTo("none");

        HttpResponse<byte[]> genuine = deliver(succeeded);
        assertAcknowledged(genuine, "APPLIED", "SUCCEEDED", 2);
        assertThat(genuine.headers().firstValue(REPLAYED_HEADER)).isEmpty();
        // nor does a forged delivery of a recorded event get its stored answer
        HttpResponse<byte[]> forgedReplay = post(json(n, signedWithAnotherSecret), null);
        assertThat(forgedReplay.statusCode()).as(text(forgedReplay)).isEqualTo(401);
    }

    @Test
    void anInvalidNotificationIs400NamingEveryProblemAndClaimsNothing() throws Exception {
        String txn = newTransaction();
        ProviderNotification n = new ProviderNotification("evt-" + UUID.randomUUID(), txn, "order-1", "SETTLED", 0L,
                "nonce-1", null);

        HttpResponse<byte[]> invalid = post(json(n, provider.sign(n)), null);

        assertThat(invalid.statusCode()).as(text(invalid)).isEqualTo(400);
        assertThat(contentType(invalid)).startsWith("application/problem+json");
        assertThat(text(invalid)).contains(NotificationRefusedException.INVALID_NOTIFICATION.toString(),
                "status must be one of", "version is required");
        assertThat(DB.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + n.eventId()
                + "'")).isZero();
        assertThat(state(txn)).isEqualTo("none");
    }

    @Test
    void aVersionThatIsNotAJsonIntegerIs400NamingItAndClaimsNothing() throws Exception {
        // signed as the version the app would read (2, 1000, ...): the body must say what was signed, exactly
        for (String version : List.of("2.5", "2.0", "1e3", "\"2\"", "9223372036854775808")) {
            String txn = newTransaction();
            ProviderNotification n = new ProviderNotification("evt-" + UUID.randomUUID(), txn, "order-1",
                    "SUCCEEDED", 2L, "nonce-1", null);

            HttpResponse<byte[]> invalid = post(json(n, provider.sign(n)).replace("\"version\":2,",
                    "\"version\":" + version + ","), null);

            assertThat(invalid.statusCode()).as("version %s: %s", version, text(invalid)).isEqualTo(400);
            assertThat(contentType(invalid)).startsWith("application/problem+json");
            assertThat(text(invalid)).as("version %s", version).contains(
                    NotificationRefusedException.INVALID_NOTIFICATION.toString(), "version is required");
            assertThat(DB.queryLong("select count(*) from idempotency_keys where idempotency_key = '"
                    + n.eventId() + "'")).isZero();
            assertThat(state(txn)).as("version %s", version).isEqualTo("none");
        }
    }

    @Test
    void aFailureAfterTheEventWasRecordedLeavesNothingAndTheNextDeliveryRecordsIt() throws Exception {
        String txn = newTransaction();
        Event succeeded = Event.of(txn, "SUCCEEDED", 2);

        HttpResponse<byte[]> failed = deliver(succeeded, "fail-after-write");

        assertThat(failed.statusCode()).as(text(failed)).isEqualTo(500);
        assertThat(state(txn)).isEqualTo("none");
        assertThat(logged(succeeded)).isZero();
        assertThat(idempotencyRecords(succeeded)).isZero();

        HttpResponse<byte[]> next = deliver(succeeded);
        assertAcknowledged(next, "APPLIED", "SUCCEEDED", 2);
        assertThat(next.headers().firstValue(REPLAYED_HEADER)).isEmpty();
        assertThat(state(txn)).isEqualTo("SUCCEEDED v2");
    }

    @Test
    void anEventThatCanNeverFollowTheRecordedStatusIsAcknowledgedAndChangesNothing() throws Exception {
        String txn = newTransaction();
        assertAcknowledged(deliver(Event.of(txn, "PENDING", 1)), "APPLIED", "PENDING", 1);
        assertAcknowledged(deliver(Event.of(txn, "CLOSED", 2)), "APPLIED", "CLOSED", 2);
        Event succeeded = Event.of(txn, "SUCCEEDED", 3);

        HttpResponse<byte[]> contradicting = deliver(succeeded);

        assertAcknowledged(contradicting, "CONTRADICTED", "CLOSED", 2);
        assertThat(state(txn)).isEqualTo("CLOSED v2");
        assertThat(outcomeLogged(succeeded)).isEqualTo("CONTRADICTED");
    }

    @Test
    void anEventRightAfterTheRecordedOneThatCannotFollowItIsAcknowledgedNotRefusedForEver() throws Exception {
        // the versions leave no room for an event between the two, so none can come to make it fit: told to come
        // back, the provider would deliver it until it gave up
        String repeated = newTransaction();
        assertAcknowledged(deliver(Event.of(repeated, "PENDING", 1)), "APPLIED", "PENDING", 1);
        assertAcknowledged(deliver(Event.of(repeated, "SUCCEEDED", 2)), "APPLIED", "SUCCEEDED", 2);
        Event again = Event.of(repeated, "SUCCEEDED", 3);

        assertAcknowledged(deliver(again), "CONTRADICTED", "SUCCEEDED", 2);
        assertThat(outcomeLogged(again)).isEqualTo("CONTRADICTED");
        assertThat(idempotencyRecords(again)).as("answered 2xx: stored").isEqualTo(1);

        String skipped = newTransaction();
        assertAcknowledged(deliver(Event.of(skipped, "PENDING", 1)), "APPLIED", "PENDING", 1);
        Event refunded = Event.of(skipped, "REFUNDED", 2);
        assertAcknowledged(deliver(refunded), "CONTRADICTED", "PENDING", 1);
        assertThat(state(skipped)).isEqualTo("PENDING v1");

        // with room between them, the event that is missing may still come: refused until it has
        String gap = newTransaction();
        assertAcknowledged(deliver(Event.of(gap, "PENDING", 1)), "APPLIED", "PENDING", 1);
        HttpResponse<byte[]> early = deliver(Event.of(gap, "REFUNDED", 3));
        assertThat(early.statusCode()).as(text(early)).isEqualTo(409);
    }

    @Test
    void anEventNamingAnotherOrderForARecordedPaymentIsAcknowledgedAsContradictedAndChangesNothing()
            throws Exception {
        // The payment was recorded for one order; a "succeeded" for the same transaction that names another order
        // says the money was taken for that other order. Applied, it would mark the first order paid.
        String txn = newTransaction();
        assertAcknowledged(deliver(Event.of(txn, "PENDING", 1)), "APPLIED", "PENDING", 1);
        Event succeeded = Event.of(txn, "SUCCEEDED", 2);
        ProviderNotification unsigned = new ProviderNotification(succeeded.eventId(), txn, "another-order",
                "SUCCEEDED", 2L, UUID.randomUUID().toString(), null);

        HttpResponse<byte[]> answer = post(json(unsigned, provider.sign(unsigned)), null);

        assertAcknowledged(answer, "CONTRADICTED", "PENDING", 1);
        assertThat(state(txn)).isEqualTo("PENDING v1");
        assertThat(DB.queryString("select order_id from provider_payments where transaction_id = '" + txn + "'"))
                .isEqualTo("order-" + txn);
        assertThat(outcomeLogged(succeeded)).isEqualTo("CONTRADICTED");
    }

    @Test
    void twoEventsThatContradictEachOtherAreFlaggedInEitherOrderOfDelivery() throws Exception {
        // The provider says the payment was closed unpaid (version 3) after it succeeded (version 2): money taken
        // for a payment recorded as abandoned. Whichever of the two arrives second must be flagged for a person.
        String inOrder = newTransaction();
        assertAcknowledged(deliver(Event.of(inOrder, "PENDING", 1)), "APPLIED", "PENDING", 1);
        assertAcknowledged(deliver(Event.of(inOrder, "SUCCEEDED", 2)), "APPLIED", "SUCCEEDED", 2);
        Event closedAfterwards = Event.of(inOrder, "CLOSED", 3);
        assertAcknowledged(deliver(closedAfterwards), "CONTRADICTED", "SUCCEEDED", 2);
        assertThat(outcomeLogged(closedAfterwards)).isEqualTo("CONTRADICTED");

        String lateSuccess = newTransaction();
        assertAcknowledged(deliver(Event.of(lateSuccess, "PENDING", 1)), "APPLIED", "PENDING", 1);
        assertAcknowledged(deliver(Event.of(lateSuccess, "CLOSED", 3)), "APPLIED", "CLOSED", 3);
        Event succeededBefore = Event.of(lateSuccess, "SUCCEEDED", 2);

        HttpResponse<byte[]> late = deliver(succeededBefore);

        // older, but not merely old news: "succeeded" can never lead to "closed"
        assertAcknowledged(late, "CONTRADICTED", "CLOSED", 3);
        assertThat(state(lateSuccess)).isEqualTo("CLOSED v3");
        assertThat(outcomeLogged(succeededBefore)).isEqualTo("CONTRADICTED");
    }
}
