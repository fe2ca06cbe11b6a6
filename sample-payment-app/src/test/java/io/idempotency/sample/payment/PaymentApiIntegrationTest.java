package io.idempotency.sample.payment;

import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

import java.net.http.HttpResponse;
import java.util.List;
import java.util.UUID;

import static io.idempotency.sample.payment.PaymentApi.REPLAYED_HEADER;
import static io.idempotency.sample.payment.PaymentApi.body;
import static io.idempotency.sample.payment.PaymentApi.contentType;
import static io.idempotency.sample.payment.PaymentApi.newOrderId;
import static io.idempotency.sample.payment.PaymentApi.text;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * The payment API over real HTTP on a real PostgreSQL (a schema of its own from {@link TestPostgres}), with the
 * idempotency starter in front of {@code POST /payments}. Every check of "nothing was written" reads the database.
 *
 * <p>The app runs as shipped, with the second wall on: no test here sends two payments of one order by one payer
 * under different keys, and each repetition is checked by its status and {@code Idempotent-Replayed} header, which
 * tell a replay of the stored answer (the original status, header present) from the wall's answer to a handler that
 * ran again (200, no header). The tests whose point is a payment count run with the wall off elsewhere
 * ({@link TwoInstancesConcurrencyIntegrationTest}, {@link CrashRecoveryIntegrationTest}); the wall itself is tested
 * in {@link SecondWallIntegrationTest}.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT, properties = "sample.chaos.enabled=true")
class PaymentApiIntegrationTest {

    private static final TestPostgres.Database DB = TestPostgres.newDatabase();

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

    @Test
    void repeatedRequestCreatesOnePaymentAndReplaysTheFirstAnswerByteForByte() throws Exception {
        String orderId = newOrderId();
        String key = UUID.randomUUID().toString();
        String body = body(orderId, "12.50");

        HttpResponse<byte[]> first = api.createPayment(key, body, null);
        assertThat(first.statusCode()).as(text(first)).isEqualTo(201);
        assertThat(contentType(first)).startsWith("application/json");
        assertThat(first.headers().firstValue(REPLAYED_HEADER)).isEmpty();
        String created = text(first);
        assertThat(created)
                .contains("\"orderId\":\"" + orderId + "\"")
                .contains("\"amount\":\"12.50\"")
                .contains("\"currency\":\"EUR\"")
                .contains("\"createdAt\":");
        long id = paymentIdOf(orderId);
        assertThat(created).contains("\"id\":" + id + ",");
        assertThat(first.headers().firstValue("Location")).hasValue("/payments/" + id);

        HttpResponse<byte[]> second = api.createPayment(key, body, null);
        assertThat(second.statusCode()).isEqualTo(201);
        assertThat(second.body()).isEqualTo(first.body());
        assertThat(second.headers().firstValue(REPLAYED_HEADER)).hasValue("true");
        assertThat(second.headers().firstValue("Location")).hasValue("/payments/" + id);

        assertThat(paymentsInDatabase(orderId)).isEqualTo(1);
    }

    @Test
    void twoCallersUsingOneKeyEachGetTheirOwnExecutionAndAnswer() throws Exception {
        String orderId = newOrderId();
        String key = UUID.randomUUID().toString();
        String body = body(orderId, "12.50");

        HttpResponse<byte[]> alice = api.createPaymentAs("alice", "alice-pass", key, body, null);
        HttpResponse<byte[]> bob = api.createPaymentAs("bob", "bob-pass", key, body, null);
        HttpResponse<byte[]> anonymous = api.createPayment(key, body, null);
        HttpResponse<byte[]> aliceAgain = api.createPaymentAs("alice", "alice-pass", key, body, null);
        HttpResponse<byte[]> bobAgain = api.createPaymentAs("bob", "bob-pass", key, body, null);
        HttpResponse<byte[]> intruder = api.createPaymentAs("bob", "wrong", key, body, null);

        assertThat(List.of(alice, bob, anonymous)).allSatisfy(answer -> {
            assertThat(answer.statusCode()).isEqualTo(201);
            assertThat(answer.headers().firstValue(REPLAYED_HEADER)).as("a first execution").isEmpty();
        });
        assertThat(text(alice)).isNotEqualTo(text(bob)).isNotEqualTo(text(anonymous));
        assertThat(aliceAgain.body()).isEqualTo(alice.body());
        assertThat(aliceAgain.headers().firstValue(REPLAYED_HEADER)).hasValue("true");
        assertThat(bobAgain.body()).isEqualTo(bob.body());
        assertThat(bobAgain.headers().firstValue(REPLAYED_HEADER)).hasValue("true");
        assertThat(intruder.statusCode()).as("bad credentials are refused before the handler").isEqualTo(401);
        assertThat(paymentsInDatabase(orderId)).isEqualTo(3);
        assertThat(DB.queryLong("select count(distinct caller) from idempotency_keys where idempotency_key = '"
                + key + "'")).isEqualTo(3);
    }

    @Test
    void sameKeyWithAnotherBodyIsRefusedAndChangesNothing() throws Exception {
        String orderId = newOrderId();
        String key = UUID.randomUUID().toString();
        HttpResponse<byte[]> created = api.createPayment(key, body(orderId, "10.00"), null);
        assertThat(created.statusCode()).isEqualTo(201);

        HttpResponse<byte[]> reused = api.createPayment(key, body(orderId, "99.00"), null);

        assertThat(reused.statusCode()).as(text(reused)).isEqualTo(422);
        assertThat(contentType(reused)).startsWith("application/problem+json");
        assertThat(text(reused)).contains("idempotency-key-mismatch");
        assertThat(paymentsInDatabase(orderId)).isEqualTo(1);
        assertThat(DB.queryString("select amount from payments where order_id = '" + orderId + "'"))
                .isEqualTo("10.00");
        // Nothing of the refused request was stored under the key either: it still replays the first answer.
        HttpResponse<byte[]> original = api.createPayment(key, body(orderId, "10.00"), null);
        assertThat(original.statusCode()).isEqualTo(201);
        assertThat(original.body()).isEqualTo(created.body());
        assertThat(original.headers().firstValue(REPLAYED_HEADER)).hasValue("true");
    }

    @Test
    void missingOrOverlongKeyIsRefusedBeforeAnythingIsWritten() throws Exception {
        String orderId = newOrderId();
        long recordsBefore = idempotencyRecords();

        HttpResponse<byte[]> missing = api.createPayment(null, body(orderId, "5.00"), null);
        assertThat(missing.statusCode()).as(text(missing)).isEqualTo(400);
        assertThat(contentType(missing)).startsWith("application/problem+json");
        assertThat(text(missing)).contains("idempotency-key-missing");

        HttpResponse<byte[]> tooLong = api.createPayment("k".repeat(300), body(orderId, "5.00"), null);
        assertThat(tooLong.statusCode()).as(text(tooLong)).isEqualTo(400);
        assertThat(contentType(tooLong)).startsWith("application/problem+json");
        assertThat(text(tooLong)).contains("idempotency-key-malformed");

        assertThat(paymentsInDatabase(orderId)).isZero();
        assertThat(idempotencyRecords()).isEqualTo(recordsBefore);
    }

    @Test
    void invalidPaymentIsRefusedWithProblemDetailsAndTheKeyStaysUsable() throws Exception {
        String orderId = newOrderId();
        String key = UUID.randomUUID().toString();

        HttpResponse<byte[]> invalid = api.createPayment(key,
                "{\"orderId\":\"" + orderId + "\",\"amount\":\"12.345\",\"currency\":\"eur\"}", null);

        assertThat(invalid.statusCode()).as(text(invalid)).isEqualTo(400);
        assertThat(contentType(invalid)).startsWith("application/problem+json");
        assertThat(text(invalid)).contains("invalid-payment").contains("amount").contains("currency");
        assertThat(paymentsInDatabase(orderId)).isZero();
        assertThat(idempotencyRecordsFor(key)).isZero();

        // The refusal was not stored, so the corrected request may use the same key.
        HttpResponse<byte[]> corrected = api.createPayment(key, body(orderId, "12.3"), null);
        assertThat(corrected.statusCode()).as(text(corrected)).isEqualTo(201);
        assertThat(text(corrected)).contains("\"amount\":\"12.30\"");
    }

    @Test
    void amountAsAJsonNumberKeepsItsDigitsAndAnExponentIsRefused() throws Exception {
        String orderId = newOrderId();

        HttpResponse<byte[]> number = api.createPayment(UUID.randomUUID().toString(),
                "{\"orderId\":\"" + orderId + "\",\"amount\":0.10,\"currency\":\"EUR\"}", null);
        assertThat(number.statusCode()).as(text(number)).isEqualTo(201);
        assertThat(text(number)).contains("\"amount\":\"0.10\"");

        String key = UUID.randomUUID().toString();
        HttpResponse<byte[]> exponent = api.createPayment(key,
                "{\"orderId\":\"" + newOrderId() + "\",\"amount\":1e1,\"currency\":\"EUR\"}", null);
        assertThat(exponent.statusCode()).as(text(exponent)).isEqualTo(400);
        assertThat(text(exponent)).contains("invalid-payment").contains("amount");
        assertThat(idempotencyRecordsFor(key)).isZero();
    }

    @Test
    void currencyMustBeAnIsoCodeAndTheAmountMustFitItsMinorUnit() throws Exception {
        String orderId = newOrderId();

        // Not currencies at all, a currency without minor unit (gold), and one with three minor digits, which an
        // amount of two fraction digits cannot express: all refused, nothing written.
        for (String currency : List.of("ABC", "QQQ", "XAU", "BHD")) {
            String key = UUID.randomUUID().toString();
            HttpResponse<byte[]> refused = api.createPayment(key,
                    "{\"orderId\":\"" + orderId + "\",\"amount\":\"10.00\",\"currency\":\"" + currency + "\"}", null);
            assertThat(refused.statusCode()).as("%s: %s", currency, text(refused)).isEqualTo(400);
            assertThat(contentType(refused)).startsWith("application/problem+json");
            assertThat(text(refused)).contains("invalid-payment").contains("currency");
            assertThat(idempotencyRecordsFor(key)).isZero();
        }

        // The yen has no minor unit: 12.50 JPY is no amount of money, and 1 250 JPY is.
        String key = UUID.randomUUID().toString();
        HttpResponse<byte[]> fractionalYen = api.createPayment(key,
                "{\"orderId\":\"" + orderId + "\",\"amount\":\"12.50\",\"currency\":\"JPY\"}", null);
        assertThat(fractionalYen.statusCode()).as(text(fractionalYen)).isEqualTo(400);
        assertThat(text(fractionalYen)).contains("invalid-payment").contains("JPY");
        assertThat(paymentsInDatabase(orderId)).isZero();
        assertThat(idempotencyRecordsFor(key)).isZero();

        HttpResponse<byte[]> wholeYen = api.createPayment(key,
                "{\"orderId\":\"" + orderId + "\",\"amount\":\"1250\",\"currency\":\"JPY\"}", null);
        assertThat(wholeYen.statusCode()).as(text(wholeYen)).isEqualTo(201);
        assertThat(paymentsInDatabase(orderId)).isEqualTo(1);
    }

    @Test
    void orderIdThatPostgresCannotStoreIsRefusedWith400NotAServerError() throws Exception {
        String orderId = newOrderId();
        String key = UUID.randomUUID().toString();

        // JSON allows a NUL character in a string (escaped); PostgreSQL text does not, and its refusal would surface as
        // a 500.
        HttpResponse<byte[]> refused = api.createPayment(key,
                "{\"orderId\":\"" + orderId + "\\u0000\",\"amount\":\"1.00\",\"currency\":\"EUR\"}", null);

        assertThat(refused.statusCode()).as(text(refused)).isEqualTo(400);
        assertThat(contentType(refused)).startsWith("application/problem+json");
        assertThat(text(refused)).contains("invalid-payment").contains("orderId");
        assertThat(idempotencyRecordsFor(key)).isZero();
        assertThat(DB.queryLong("select count(*) from payments where order_id like '" + orderId + "%'")).isZero();
    }

    @Test
    void readingTheOrderOfAnOrderIdThatCannotBeStoredFindsNothingRatherThanFailing() throws Exception {
        // No payment can have this order id (a write refuses it with 400): the list is empty, not a server error.
        HttpResponse<String> payments = api.get("/payments?orderId=" + newOrderId() + "%00");
        HttpResponse<String> charges = api.get("/charges?orderId=" + newOrderId() + "%00");

        assertThat(payments.statusCode()).as("GET /payments: %s", payments.body()).isEqualTo(200);
        assertThat(payments.body()).isEqualTo("[]");
        assertThat(charges.statusCode()).as("GET /charges: %s", charges.body()).isEqualTo(200);
        assertThat(charges.body()).isEqualTo("[]");
    }

    @Test
    void failureAfterTheWriteRollsEverythingBackAndTheRetrySucceeds() throws Exception {
        String orderId = newOrderId();
        String key = UUID.randomUUID().toString();
        String body = body(orderId, "7.00");

        failsAndLeavesNothing(orderId, key, body, "fail-after-write");

        HttpResponse<byte[]> retry = api.createPayment(key, body, null);
        assertThat(retry.statusCode()).as(text(retry)).isEqualTo(201);
        assertThat(retry.headers().firstValue(REPLAYED_HEADER)).isEmpty();
        assertThat(paymentsInDatabase(orderId)).isEqualTo(1);
    }

    @Test
    void failureAtCommitIsNeverAnsweredWithSuccessAndTheRetrySucceeds() throws Exception {
        String orderId = newOrderId();
        String key = UUID.randomUUID().toString();
        String body = body(orderId, "8.00");

        HttpResponse<byte[]> failed = failsAndLeavesNothing(orderId, key, body, "fail-at-commit");
        assertThat(text(failed)).as("failed at the commit, not in the handler").contains("idempotency-commit-failed");
        assertThat(DB.queryLong("select count(*) from payment_audit")).isZero();

        HttpResponse<byte[]> retry = api.createPayment(key, body, null);
        assertThat(retry.statusCode()).as(text(retry)).isEqualTo(201);
        assertThat(paymentsInDatabase(orderId)).isEqualTo(1);
    }

    @Test
    void paymentsCanBeReadBackAndTheAppIsHealthy() throws Exception {
        String orderId = newOrderId();
        HttpResponse<byte[]> created = api.createPayment(UUID.randomUUID().toString(), body(orderId, "3.10"), null);
        assertThat(created.statusCode()).isEqualTo(201);
        long id = paymentIdOf(orderId);

        HttpResponse<String> list = api.get("/payments?orderId=" + orderId);
        assertThat(list.statusCode()).isEqualTo(200);
        assertThat(list.body()).isEqualTo("[" + text(created) + "]");

        HttpResponse<String> one = api.get("/payments/" + id);
        assertThat(one.statusCode()).isEqualTo(200);
        assertThat(one.body()).isEqualTo(text(created));

        HttpResponse<String> none = api.get("/payments/" + (id + 1_000_000));
        assertThat(none.statusCode()).isEqualTo(404);
        assertThat(contentType(none)).startsWith("application/problem+json");

        assertThat(api.get("/payments?orderId=" + newOrderId()).body()).isEqualTo("[]");

        HttpResponse<String> health = api.get("/actuator/health");
        assertThat(health.statusCode()).isEqualTo(200);
        // the answer the README shows: Spring Boot lists the liveness and readiness probe groups
        assertThat(health.body()).isEqualTo("{\"groups\":[\"liveness\",\"readiness\"],\"status\":\"UP\"}");
    }

    @Test
    void aPayerReadsItsOwnPaymentsAndAnotherPayersAsIfThereWereNone() throws Exception {
        String orderId = newOrderId();
        HttpResponse<byte[]> alice = api.createPaymentAs("alice", "alice-pass", UUID.randomUUID().toString(),
                body(orderId, "8.40"), null);
        assertThat(alice.statusCode()).as(text(alice)).isEqualTo(201);
        long id = paymentIdOf(orderId);

        HttpResponse<String> own = api.getAs("alice", "alice-pass", "/payments/" + id);
        assertThat(own.statusCode()).as(own.body()).isEqualTo(200);
        assertThat(own.body()).isEqualTo(text(alice));

        // Bob, and an anonymous caller, get the very 404 of an id that was never handed out: not 403, which would
        // confirm that the payment exists.
        long neverHandedOut = id + 1_000_000;
        HttpResponse<String> missing = api.getAs("bob", "bob-pass", "/payments/" + neverHandedOut);
        assertThat(missing.statusCode()).isEqualTo(404);
        List<HttpResponse<String>> others = List.of(api.getAs("bob", "bob-pass", "/payments/" + id),
                api.get("/payments/" + id));
        assertThat(others).allSatisfy(other -> {
            assertThat(other.statusCode()).as("another payer's payment: %s", other.body()).isEqualTo(404);
            assertThat(contentType(other)).startsWith("application/problem+json");
            assertThat(other.body()).isEqualTo(
                    missing.body().replace(Long.toString(neverHandedOut), Long.toString(id)));
        });

        // Bob pays the same order (the second wall is per payer): each lists only its own payment of it.
        HttpResponse<byte[]> bob = api.createPaymentAs("bob", "bob-pass", UUID.randomUUID().toString(),
                body(orderId, "8.40"), null);
        assertThat(bob.statusCode()).as(text(bob)).isEqualTo(201);
        assertThat(api.getAs("alice", "alice-pass", "/payments?orderId=" + orderId).body())
                .isEqualTo("[" + text(alice) + "]");
        assertThat(api.getAs("bob", "bob-pass", "/payments?orderId=" + orderId).body())
                .isEqualTo("[" + text(bob) + "]");
        assertThat(api.get("/payments?orderId=" + orderId).body()).as("the anonymous payer's").isEqualTo("[]");
    }

    /**
     * Sends the request with a fault that fails it after the handler wrote the payment, and checks that the failure is
     * answered as a server error with problem details and that it rolled everything back: no payment, and no record
     * under the key, which stays free for the retry. Returns the failed answer.
     */
    private HttpResponse<byte[]> failsAndLeavesNothing(String orderId, String key, String body, String fault)
            throws Exception {
        HttpResponse<byte[]> failed = api.createPayment(key, body, fault);

        assertThat(failed.statusCode()).as(text(failed)).isBetween(500, 599);
        assertThat(contentType(failed)).startsWith("application/problem+json");
        assertThat(paymentsInDatabase(orderId)).isZero();
        assertThat(idempotencyRecordsFor(key)).isZero();
        return failed;
    }

    private static long paymentsInDatabase(String orderId) {
        return DB.queryLong("select count(*) from payments where order_id = '" + orderId + "'");
    }

    private static long paymentIdOf(String orderId) {
        return DB.queryLong("select id from payments where order_id = '" + orderId + "'");
    }

    private static long idempotencyRecords() {
        return DB.queryLong("select count(*) from idempotency_keys");
    }

    private static long idempotencyRecordsFor(String key) {
        return DB.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key + "'");
    }
}
