package io.idempotency.sample.payment;

import io.idempotency.testkit.Async;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static io.idempotency.sample.payment.PaymentApi.REPLAYED_HEADER;
import static io.idempotency.sample.payment.PaymentApi.body;
import static io.idempotency.sample.payment.PaymentApi.contentType;
import static io.idempotency.sample.payment.PaymentApi.newOrderId;
import static io.idempotency.sample.payment.PaymentApi.text;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * The second wall on a real PostgreSQL: one payment per payer and order, behind the idempotency key. The central case
 * is the one the idempotency layer cannot cover by design: a request replayed after its record was deleted (as
 * retention does after {@code idempotency.retention.ttl}). It must not pay the order twice.
 *
 * <p>The application under test runs with the wall on, as shipped. The last test starts a second instance of the
 * application on the same database with {@code sample.second-wall.enabled=false}, to show that the wall is what stops
 * the replay. Every test uses order ids of its own, and reads the database to count payments.
 *
 * <p>The tests delete records by hand right after writing them, as retention does only after days; the in-memory
 * replay cache (answers kept at most {@code idempotency.replay-cache.max-age}) would still answer such a record on the
 * instance that stored it, so it is switched off here.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = {"sample.chaos.enabled=true", "idempotency.replay-cache.max-entries=0"})
class SecondWallIntegrationTest {

    private static final TestPostgres.Database DB = TestPostgres.newDatabase();

    private static ConfigurableApplicationContext wallOff;

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

    @AfterAll
    static void stopWallOffInstance() {
        if (wallOff != null) {
            wallOff.close();
        }
    }

    @Test
    void replayAfterTheRecordWasDeletedAnswers200WithTheExistingPaymentAndPaysNothing() throws Exception {
        String orderId = newOrderId();
        String key = UUID.randomUUID().toString();
        String body = body(orderId, "12.50");

        HttpResponse<byte[]> created = api.createPayment(key, body, null);
        assertThat(created.statusCode()).as(text(created)).isEqualTo(201);
        long id = paymentIdOf(orderId);

        deleteIdempotencyRecord(key);

        HttpResponse<byte[]> replay = api.createPayment(key, body, null);
        assertThat(replay.statusCode()).as(text(replay)).isEqualTo(200);
        assertThat(replay.headers().firstValue(REPLAYED_HEADER))
                .as("the idempotency layer had nothing to replay: the handler ran and the wall answered")
                .isEmpty();
        assertThat(contentType(replay)).startsWith("application/json");
        assertThat(text(replay)).as("the existing payment, same id and creation time").isEqualTo(text(created));
        assertThat(replay.headers().firstValue("Location")).hasValue("/payments/" + id);
        assertThat(paymentsInDatabase(orderId)).isEqualTo(1);

        // The 200 is a final answer like any other: stored under the key again, and replayed from now on.
        assertThat(idempotencyRecordsFor(key)).isEqualTo(1);
        HttpResponse<byte[]> again = api.createPayment(key, body, null);
        assertThat(again.statusCode()).isEqualTo(200);
        assertThat(again.body()).isEqualTo(replay.body());
        assertThat(again.headers().firstValue(REPLAYED_HEADER)).hasValue("true");
        assertThat(paymentsInDatabase(orderId)).isEqualTo(1);
    }

    @Test
    void aNewKeyForAnOrderAlreadyPaidWithTheSameAmountAnswersTheExistingPayment() throws Exception {
        String orderId = newOrderId();
        HttpResponse<byte[]> created = api.createPayment(UUID.randomUUID().toString(), body(orderId, "20.00"), null);
        assertThat(created.statusCode()).as(text(created)).isEqualTo(201);
        long id = paymentIdOf(orderId);

        // The same payment, written differently: another key, another field order, an amount with fewer digits.
        HttpResponse<byte[]> sameAgain = api.createPayment(UUID.randomUUID().toString(),
                "{\"currency\":\"EUR\",\"amount\":\"20\",\"orderId\":\"" + orderId + "\"}", null);

        assertThat(sameAgain.statusCode()).as(text(sameAgain)).isEqualTo(200);
        assertThat(text(sameAgain)).isEqualTo(text(created));
        assertThat(sameAgain.headers().firstValue("Location")).hasValue("/payments/" + id);
        assertThat(paymentsInDatabase(orderId)).isEqualTo(1);
    }

    @Test
    void aNewKeyForAnOrderAlreadyPaidWithAnotherAmountOrCurrencyIs409AndWritesNothing() throws Exception {
        String orderId = newOrderId();
        assertThat(api.createPayment(UUID.randomUUID().toString(), body(orderId, "10.00"), null).statusCode())
                .isEqualTo(201);
        long id = paymentIdOf(orderId);
        String key = UUID.randomUUID().toString();

        HttpResponse<byte[]> otherAmount = api.createPayment(key, body(orderId, "11.00"), null);
        HttpResponse<byte[]> otherCurrency = api.createPayment(UUID.randomUUID().toString(),
                "{\"orderId\":\"" + orderId + "\",\"amount\":\"10.00\",\"currency\":\"USD\"}", null);

        for (HttpResponse<byte[]> conflict : List.of(otherAmount, otherCurrency)) {
            assertThat(conflict.statusCode()).as(text(conflict)).isEqualTo(409);
            assertThat(contentType(conflict)).startsWith("application/problem+json");
            assertThat(text(conflict))
                    .contains("\"type\":\"" + PaymentExceptionHandler.ORDER_ALREADY_PAID + "\"")
                    .contains("\"paymentId\":" + id)
                    .contains("\"payment\":\"/payments/" + id + "\"");
            assertThat(conflict.headers().firstValue("Retry-After")).as("not a transient conflict").isEmpty();
        }
        assertThat(paymentsInDatabase(orderId)).isEqualTo(1);
        assertThat(DB.queryString("select amount || ' ' || currency from payments where order_id = '" + orderId
                + "'")).isEqualTo("10.00 EUR");

        // The conflict was not stored under the key, so the key stays usable for a corrected request.
        assertThat(idempotencyRecordsFor(key)).isZero();
        String otherOrder = newOrderId();
        HttpResponse<byte[]> corrected = api.createPayment(key, body(otherOrder, "11.00"), null);
        assertThat(corrected.statusCode()).as(text(corrected)).isEqualTo(201);
        assertThat(paymentsInDatabase(otherOrder)).isEqualTo(1);
    }

    @Test
    void theWallIsPerPayer() throws Exception {
        String orderId = newOrderId();
        String body = body(orderId, "5.00");

        HttpResponse<byte[]> alice = api.createPaymentAs("alice", "alice-pass", UUID.randomUUID().toString(), body,
                null);
        HttpResponse<byte[]> bob = api.createPaymentAs("bob", "bob-pass", UUID.randomUUID().toString(), body, null);
        HttpResponse<byte[]> anonymous = api.createPayment(UUID.randomUUID().toString(), body, null);
        HttpResponse<byte[]> aliceAgain = api.createPaymentAs("alice", "alice-pass", UUID.randomUUID().toString(),
                body, null);

        assertThat(List.of(alice.statusCode(), bob.statusCode(), anonymous.statusCode()))
                .as("each payer pays the order once").containsOnly(201);
        assertThat(aliceAgain.statusCode()).as(text(aliceAgain)).isEqualTo(200);
        assertThat(aliceAgain.body()).as("alice's own payment").isEqualTo(alice.body());
        assertThat(paymentsInDatabase(orderId)).isEqualTo(3);
        assertThat(DB.queryString("select string_agg(payer, ',' order by payer) from payments where order_id = '"
                + orderId + "'")).isEqualTo(",alice,bob");
    }

    @Test
    void concurrentPaymentsOfOneOrderUnderTwoKeysCreateOnePayment() throws Exception {
        String orderId = newOrderId();
        String body = body(orderId, "30.00");

        // The first request keeps its transaction open after its insert (4 s, room for a slow machine); the second
        // one's insert waits on the unique index for that transaction, then finds the committed payment.
        CompletableFuture<HttpResponse<byte[]>> slow = Async.supply(() -> send(
                UUID.randomUUID().toString(), body, "delay-ms=4000"));
        TimeUnit.MILLISECONDS.sleep(300);
        CompletableFuture<HttpResponse<byte[]>> second = Async.supply(() -> send(
                UUID.randomUUID().toString(), body, null));
        // The keys differ, so no claim waits: a session waiting for a lock is the second insert, blocked on the unique
        // index by the first one's uncommitted row. Without this, two requests that did not overlap would pass too.
        DB.awaitLockWaiter(Duration.ofSeconds(5));
        HttpResponse<byte[]> fast = second.get(30, TimeUnit.SECONDS);
        HttpResponse<byte[]> first = slow.get(30, TimeUnit.SECONDS);

        List<Integer> statuses = new ArrayList<>(List.of(first.statusCode(), fast.statusCode()));
        assertThat(statuses).as("%s / %s", text(first), text(fast)).containsExactlyInAnyOrder(201, 200);
        assertThat(first.body()).isEqualTo(fast.body());
        assertThat(paymentsInDatabase(orderId)).isEqualTo(1);
    }

    @Test
    void withTheWallOffTheSameReplayPaysTheOrderAgain() throws Exception {
        PaymentApi wallOffApi = wallOffInstance();
        String orderId = newOrderId();
        String key = UUID.randomUUID().toString();
        String body = body(orderId, "12.50");

        HttpResponse<byte[]> created = wallOffApi.createPayment(key, body, null);
        assertThat(created.statusCode()).as(text(created)).isEqualTo(201);

        deleteIdempotencyRecord(key);

        HttpResponse<byte[]> replay = wallOffApi.createPayment(key, body, null);
        assertThat(replay.statusCode()).as(text(replay)).isEqualTo(201);
        assertThat(text(replay)).isNotEqualTo(text(created));
        assertThat(paymentsInDatabase(orderId)).as("without the wall, the late replay pays twice").isEqualTo(2);

        // Rows written with the wall off are outside the partial unique index, which is why switching it off and on
        // again needs no DDL and never fails on these duplicates: the instance with the wall on accepts a covered
        // payment for the order beside them, and from then on holds the payer to it.
        assertThat(DB.queryLong("select count(*) from payments where order_id = '" + orderId
                + "' and second_wall")).isZero();
        HttpResponse<byte[]> covered = api.createPayment(UUID.randomUUID().toString(), body, null);
        assertThat(covered.statusCode()).as(text(covered)).isEqualTo(201);
        HttpResponse<byte[]> coveredAgain = api.createPayment(UUID.randomUUID().toString(), body, null);
        assertThat(coveredAgain.statusCode()).as(text(coveredAgain)).isEqualTo(200);
        assertThat(coveredAgain.body()).isEqualTo(covered.body());
        assertThat(paymentsInDatabase(orderId)).isEqualTo(3);
    }

    /**
     * A second instance of the application, in this JVM, on the same database, with the second wall switched off;
     * started on first use and stopped after the class.
     */
    private static synchronized PaymentApi wallOffInstance() {
        if (wallOff == null) {
            List<String> args = new ArrayList<>(List.of(
                    "--server.port=0",
                    "--spring.main.banner-mode=off",
                    "--sample.second-wall.enabled=false",
                    "--idempotency.replay-cache.max-entries=0"));
            DB.springPropertyValues().forEach(value -> args.add("--" + value));
            wallOff = new SpringApplicationBuilder(SamplePaymentApplication.class).run(args.toArray(String[]::new));
        }
        return PaymentApi.onPort(wallOff.getEnvironment().getRequiredProperty("local.server.port", Integer.class));
    }

    private HttpResponse<byte[]> send(String key, String body, String chaos) {
        try {
            return api.createPayment(key, body, chaos);
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }

    /** What retention does to a record whose time is up: it is gone, and the key is unknown again. */
    private static void deleteIdempotencyRecord(String key) {
        DB.queryString("delete from idempotency_keys where idempotency_key = '" + key + "'");
        assertThat(idempotencyRecordsFor(key)).isZero();
    }

    private static long paymentsInDatabase(String orderId) {
        return DB.queryLong("select count(*) from payments where order_id = '" + orderId + "'");
    }

    private static long paymentIdOf(String orderId) {
        return DB.queryLong("select id from payments where order_id = '" + orderId + "'");
    }

    private static long idempotencyRecordsFor(String key) {
        return DB.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key + "'");
    }
}
