package io.idempotency.sample.payment;

import io.idempotency.core.DownstreamKeys;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StoredResponse;
import io.idempotency.testkit.Async;
import io.idempotency.testkit.Await;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

import java.net.http.HttpResponse;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static io.idempotency.sample.payment.ChargeApi.numberField;
import static io.idempotency.sample.payment.PaymentApi.REPLAYED_HEADER;
import static io.idempotency.sample.payment.PaymentApi.body;
import static io.idempotency.sample.payment.PaymentApi.contentType;
import static io.idempotency.sample.payment.PaymentApi.newOrderId;
import static io.idempotency.sample.payment.PaymentApi.text;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code POST /charges} (intent-first mode) and the fake gateway, in process, over real HTTP on a real PostgreSQL: the
 * handler really calls {@code /gateway/charges} over the loopback interface. Cases without a crash; the crashes are
 * in {@link ChargeCrashRecoveryIntegrationTest}.
 *
 * <p>A 3 s lease and a 500 ms in-flight wait keep the lease-bound cases short. The lease is no shorter, as a retry
 * sent right after a failed charge must still meet it: on a loaded machine the failed request and the retry's
 * in-flight wait have been seen to take 1.4 s of it. The sweeper is off, so that a stale claim here is resolved by the
 * retry that the test sends, deterministically.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT, properties = {
        "sample.chaos.enabled=true",
        "idempotency.lease=3s",
        "idempotency.in-flight-wait=500ms",
        "idempotency.sweeper.enabled=false",
        // A test deletes a record as retention would; a replay from memory would hide that it is gone.
        "idempotency.replay-cache.max-entries=0"})
class ChargeApiIntegrationTest {

    private static final TestPostgres.Database DB = TestPostgres.newDatabase();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DB.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @LocalServerPort
    int port;

    @Autowired
    DownstreamKeys downstreamKeys;

    @Autowired
    GatewayChargeResolver resolver;

    ChargeApi api;

    @BeforeEach
    void client() {
        api = ChargeApi.onPort(port);
    }

    @Test
    void chargeIsMadeOnceAtTheGatewayRecordedAndReplayedByteForByte() throws Exception {
        String orderId = newOrderId();
        String key = UUID.randomUUID().toString();
        String body = body(orderId, "12.50");

        HttpResponse<byte[]> first = api.charge(key, body, null);

        assertThat(first.statusCode()).as(text(first)).isEqualTo(201);
        assertThat(contentType(first)).isEqualTo("application/json");
        assertThat(first.headers().firstValue(REPLAYED_HEADER)).isEmpty();
        String created = text(first);
        long id = numberField(created, "id");
        long gatewayChargeId = numberField(created, "gatewayChargeId");
        assertThat(created).startsWith("{\"id\":" + id + ",\"orderId\":\"" + orderId + "\",\"amount\":\"12.50\","
                + "\"currency\":\"EUR\",\"gatewayChargeId\":" + gatewayChargeId + ",\"createdAt\":\"");
        assertThat(first.headers().firstValue("Location")).hasValue("/charges/" + id);

        // The gateway's ledger holds the charge, booked under a derived key, never the client's.
        String ledger = api.gatewayCharges(orderId);
        assertThat(ledger).startsWith("[{\"id\":" + gatewayChargeId + ",\"idempotencyKey\":\"")
                .contains("\"orderId\":\"" + orderId + "\",\"amount\":\"12.50\",\"currency\":\"EUR\"")
                .doesNotContain(key);
        assertThat(countOf(ledger)).isEqualTo(1);

        HttpResponse<byte[]> again = api.charge(key, "{ \"currency\":\"EUR\", \"amount\":\"12.50\", \"orderId\":\""
                + orderId + "\" }", null);
        assertThat(again.statusCode()).isEqualTo(201);
        assertThat(again.body()).isEqualTo(first.body());
        assertThat(again.headers().firstValue(REPLAYED_HEADER)).hasValue("true");
        assertThat(again.headers().firstValue("Location")).hasValue("/charges/" + id);

        assertThat(countOf(api.gatewayCharges(orderId))).isEqualTo(1);
        assertThat(api.charges(orderId)).isEqualTo("[" + created + "]");
        assertThat(api.get("/charges/" + id).body()).isEqualTo(created);
        assertThat(api.get("/charges/" + (id + 1_000_000)).statusCode()).isEqualTo(404);
        assertThat(api.get("/gateway/charges?orderId=" + newOrderId()).body()).isEqualTo("[]");
    }

    @Test
    void duplicateDuringTheLeaseGets409ThenTheReplayAndNeverASecondCharge() throws Exception {
        String orderId = newOrderId();
        String key = UUID.randomUUID().toString();
        String body = body(orderId, "30.00");

        // The first request holds its claim for 2.5 s, within its 3 s lease: time for a duplicate's 500 ms wait to
        // run out after it was seen holding the key, also on a loaded machine.
        CompletableFuture<HttpResponse<byte[]>> first = Async.supply(() -> send(key, body,
                "delay-ms=2500"));
        awaitStatus(key, "PROCESSING");

        List<CompletableFuture<HttpResponse<byte[]>>> duplicates = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            duplicates.add(Async.supply(() -> send(key, body, null)));
        }
        HttpResponse<byte[]> original = first.get(10, TimeUnit.SECONDS);
        assertThat(original.statusCode()).as(text(original)).isEqualTo(201);
        assertThat(original.headers().firstValue(REPLAYED_HEADER)).isEmpty();
        int inProgress = 0;
        for (CompletableFuture<HttpResponse<byte[]>> duplicate : duplicates) {
            HttpResponse<byte[]> answer = duplicate.get(10, TimeUnit.SECONDS);
            if (answer.statusCode() == 409) {
                inProgress++;
                assertThat(contentType(answer)).startsWith("application/problem+json");
                assertThat(text(answer)).contains("idempotency-request-in-progress");
                assertThat(answer.headers().firstValue("Retry-After")).isPresent();
            } else {
                // only on a very slow machine: the duplicate arrived after the first request was done
                assertThat(answer.statusCode()).as(text(answer)).isEqualTo(201);
                assertThat(answer.headers().firstValue(REPLAYED_HEADER)).hasValue("true");
                assertThat(answer.body()).isEqualTo(original.body());
            }
        }
        assertThat(inProgress).as("duplicates sent during the first request's 2.5 s").isPositive();

        HttpResponse<byte[]> after = api.charge(key, body, null);
        assertThat(after.statusCode()).isEqualTo(201);
        assertThat(after.body()).isEqualTo(original.body());
        assertThat(after.headers().firstValue(REPLAYED_HEADER)).hasValue("true");

        assertThat(countOf(api.gatewayCharges(orderId))).isEqualTo(1);
        assertThat(chargesInDatabase(orderId)).isEqualTo(1);
    }

    @Test
    void twoKeysForOneOrderChargeItOnceAndTheSecondIsRefusedWithoutCallingTheGateway() throws Exception {
        String orderId = newOrderId();
        String body = body(orderId, "15.00");
        String firstKey = UUID.randomUUID().toString();

        HttpResponse<byte[]> first = api.charge(firstKey, body, null);
        assertThat(first.statusCode()).as(text(first)).isEqualTo(201);
        long chargeId = numberField(text(first), "id");

        // A second key for the same order (a client that lost the first answer and made a new key): no second charge.
        String secondKey = UUID.randomUUID().toString();
        HttpResponse<byte[]> second = api.charge(secondKey, body, null);
        assertThat(second.statusCode()).as(text(second)).isEqualTo(409);
        assertThat(contentType(second)).startsWith("application/problem+json");
        assertThat(text(second)).contains("order-already-charged").contains("\"chargeId\":" + chargeId);
        assertThat(countOf(api.gatewayCharges(orderId))).isEqualTo(1);
        assertThat(DB.queryLong("select count(*) from gateway_calls where order_id = '" + orderId + "'"))
                .as("the gateway was not even asked").isEqualTo(1);
        assertThat(chargesInDatabase(orderId)).isEqualTo(1);
        // Nothing was charged under the second key: its claim is FAILED, not held for the lease.
        assertThat(statusOf(secondKey)).isEqualTo("FAILED");

        // The first key replayed after its record was deleted (retention): the charge it made, and the gateway, whose
        // memory of keys may be shorter than ours, is not asked again.
        DB.queryString("delete from idempotency_keys where idempotency_key = '" + firstKey + "'");
        HttpResponse<byte[]> late = api.charge(firstKey, body, null);
        assertThat(late.statusCode()).as(text(late)).isEqualTo(200);
        assertThat(numberField(text(late), "id")).isEqualTo(chargeId);
        assertThat(late.headers().firstValue("Location")).hasValue("/charges/" + chargeId);
        assertThat(DB.queryLong("select count(*) from gateway_calls where order_id = '" + orderId + "'")).isEqualTo(1);
        assertThat(chargesInDatabase(orderId)).isEqualTo(1);
    }

    @Test
    void aKeyUsedForAnotherOrderAfterItsRecordWasDeletedChargesNothingAndSaysSo() throws Exception {
        String paidOrder = newOrderId();
        String otherOrder = newOrderId();
        String key = UUID.randomUUID().toString();

        HttpResponse<byte[]> first = api.charge(key, body(paidOrder, "11.00"), null);
        assertThat(first.statusCode()).as(text(first)).isEqualTo(201);
        long chargeId = numberField(text(first), "id");

        // Retention deleted the key's record, and the client uses the key again, for another order. The gateway knows
        // the key's derived key by the first charge: it would answer with that one, and charge nothing.
        DB.queryString("delete from idempotency_keys where idempotency_key = '" + key + "'");
        HttpResponse<byte[]> reused = api.charge(key, body(otherOrder, "12.00"), null);

        assertThat(reused.statusCode()).as(text(reused)).isEqualTo(422);
        assertThat(contentType(reused)).startsWith("application/problem+json");
        assertThat(text(reused)).contains("key-used-for-another-charge").contains("\"orderId\":\"" + otherOrder + "\"");
        assertThat(statusOf(key)).as("nothing was charged: not held for the lease").isEqualTo("FAILED");
        assertThat(DB.queryLong("select count(*) from gateway_calls where order_id = '" + otherOrder + "'"))
                .as("the gateway was not asked").isZero();
        assertThat(chargesInDatabase(otherOrder)).isZero();

        // The other order is free for a new key; the first order stays with the key that charged it.
        HttpResponse<byte[]> newKey = api.charge(UUID.randomUUID().toString(), body(otherOrder, "12.00"), null);
        assertThat(newKey.statusCode()).as(text(newKey)).isEqualTo(201);
        assertThat(numberField(text(newKey), "id")).isNotEqualTo(chargeId);
        HttpResponse<byte[]> secondKey = api.charge(UUID.randomUUID().toString(), body(paidOrder, "99.00"), null);
        assertThat(secondKey.statusCode()).as(text(secondKey)).isEqualTo(409);
        assertThat(text(secondKey)).contains("\"chargeId\":" + chargeId);
        assertThat(countOf(api.gatewayCharges(paidOrder))).isEqualTo(1);
        assertThat(countOf(api.gatewayCharges(otherOrder))).isEqualTo(1);
    }

    /**
     * The key, its record deleted, is sent for another order, and the attempt stops after the claim was committed and
     * before the order was taken (here: its statement taking the order is cancelled while it waits for a lock; a
     * process that died there leaves the same). The stale claim's derived key is known to the gateway by the first
     * order's charge, which must not become this request's answer.
     */
    @Test
    void aReusedKeyWhoseAttemptStoppedBeforeTakingTheOrderIsNotCompletedWithTheFirstCharge() throws Exception {
        String paidOrder = newOrderId();
        String otherOrder = newOrderId();
        String key = UUID.randomUUID().toString();
        HttpResponse<byte[]> first = api.charge(key, body(paidOrder, "13.00"), null);
        assertThat(first.statusCode()).as(text(first)).isEqualTo(201);
        DB.queryString("delete from idempotency_keys where idempotency_key = '" + key + "'");

        try (Connection blocker = DriverManager.getConnection(DB.url(), DB.user(), DB.password())) {
            blocker.setAutoCommit(false);
            execute(blocker, "insert into charge_intents (payer, order_id, downstream_key) values ('', '" + otherOrder
                    + "', 'a request under another key')");
            CompletableFuture<HttpResponse<byte[]>> attempt =
                    Async.supply(() -> send(key, body(otherOrder, "14.00"), null));
            cancelWhenWaiting("INSERT INTO charge_intents");
            HttpResponse<byte[]> stopped = attempt.get(10, TimeUnit.SECONDS);
            assertThat(stopped.statusCode()).as(text(stopped)).isEqualTo(500);
            blocker.rollback();
        }
        assertThat(statusOf(key)).isEqualTo("PROCESSING");
        assertThat(intentsOf(otherOrder)).as("the order was not taken").isZero();

        awaitLeaseExpired(key);
        HttpResponse<byte[]> retry = api.charge(key, body(otherOrder, "14.00"), null);

        assertThat(retry.statusCode()).as(text(retry)).isEqualTo(422);
        assertThat(text(retry)).contains("key-used-for-another-charge").doesNotContain(paidOrder);
        assertThat(DB.queryString("select string_agg(decision || '/' || resolved_by, ',') from charge_resolutions"
                + " where idempotency_key = '" + key + "'")).isEqualTo("rerun/retry");
        assertThat(chargesInDatabase(otherOrder)).isZero();
        HttpResponse<byte[]> newKey = api.charge(UUID.randomUUID().toString(), body(otherOrder, "14.00"), null);
        assertThat(newKey.statusCode()).as(text(newKey)).isEqualTo(201);
        assertThat(countOf(api.gatewayCharges(paidOrder))).isEqualTo(1);
        assertThat(countOf(api.gatewayCharges(otherOrder))).isEqualTo(1);
    }

    /**
     * As above, but the attempt stops after it took the order and before the check that refuses a key held by another
     * order (here: that check is cancelled while it waits for a lock on {@code charge_intents}). Besides the answer,
     * the order must not stay held by a key that can charge nothing for it: another key may pay it.
     */
    @Test
    void aReusedKeyWhoseAttemptStoppedAfterTakingTheOrderIsNotCompletedWithTheFirstChargeNorKeepsTheOrder()
            throws Exception {
        String paidOrder = newOrderId();
        String otherOrder = newOrderId();
        String key = UUID.randomUUID().toString();
        HttpResponse<byte[]> first = api.charge(key, body(paidOrder, "15.00"), null);
        assertThat(first.statusCode()).as(text(first)).isEqualTo(201);
        DB.queryString("delete from idempotency_keys where idempotency_key = '" + key + "'");

        stopAfterTakingTheOrder(key, otherOrder, "16.00");
        assertThat(statusOf(key)).isEqualTo("PROCESSING");
        assertThat(intentsOf(otherOrder)).as("the order was taken by the key").isEqualTo(1);

        awaitLeaseExpired(key);
        HttpResponse<byte[]> retry = api.charge(key, body(otherOrder, "16.00"), null);

        assertThat(retry.statusCode()).as(text(retry)).isEqualTo(422);
        assertThat(text(retry)).contains("key-used-for-another-charge").doesNotContain(paidOrder);
        assertThat(chargesInDatabase(otherOrder)).isZero();
        HttpResponse<byte[]> newKey = api.charge(UUID.randomUUID().toString(), body(otherOrder, "16.00"), null);
        assertThat(newKey.statusCode()).as("the order is free for another key: %s", text(newKey)).isEqualTo(201);
        assertThat(countOf(api.gatewayCharges(paidOrder))).isEqualTo(1);
        assertThat(countOf(api.gatewayCharges(otherOrder))).isEqualTo(1);
    }

    /**
     * As above, but the order the key held before was never charged: its attempt stopped before the gateway, and the
     * rerun the resolver answered was marked {@code FAILED}, so the intent stays with the key (as the resolver leaves
     * it), and retention deleted the record since. The resolver then finds nothing booked under the key, and the
     * retry, which did not take the order itself, must still release it.
     */
    @Test
    void aReusedKeyHoldingAnUnchargedOrderDoesNotKeepTheOrderItsStoppedAttemptTook() throws Exception {
        String heldOrder = newOrderId();
        String otherOrder = newOrderId();
        String key = UUID.randomUUID().toString();
        DB.queryString("insert into charge_intents (payer, order_id, downstream_key) values ('', '" + heldOrder
                + "', '" + downstreamKeys.derive(new ScopedKey("", ChargeController.SCOPE, key)) + "')");

        stopAfterTakingTheOrder(key, otherOrder, "17.00");
        assertThat(statusOf(key)).isEqualTo("PROCESSING");
        assertThat(intentsOf(otherOrder)).as("the order was taken by the key").isEqualTo(1);

        awaitLeaseExpired(key);
        HttpResponse<byte[]> retry = api.charge(key, body(otherOrder, "17.00"), null);

        assertThat(retry.statusCode()).as(text(retry)).isEqualTo(422);
        assertThat(text(retry)).contains("key-used-for-another-charge");
        assertThat(DB.queryString("select string_agg(decision || '/' || resolved_by, ',') from charge_resolutions"
                + " where idempotency_key = '" + key + "'")).as("nothing booked under the key").isEqualTo("rerun/retry");
        HttpResponse<byte[]> newKey = api.charge(UUID.randomUUID().toString(), body(otherOrder, "17.00"), null);
        assertThat(newKey.statusCode()).as("the order is free for another key: %s", text(newKey)).isEqualTo(201);
        assertThat(countOf(api.gatewayCharges(otherOrder))).isEqualTo(1);
        assertThat(countOf(api.gatewayCharges(heldOrder))).isZero();
    }

    @Test
    void concurrentChargesOfOneOrderUnderManyKeysChargeItOnce() throws Exception {
        String orderId = newOrderId();
        String body = body(orderId, "16.00");
        int requests = 5;

        ExecutorService pool = Executors.newFixedThreadPool(requests);
        List<HttpResponse<byte[]>> answers = new ArrayList<>();
        try (Connection orderBlocker = DriverManager.getConnection(DB.url(), DB.user(), DB.password())) {
            // an uncommitted hold on the order that every request must get past: they all meet there, then race
            orderBlocker.setAutoCommit(false);
            execute(orderBlocker, "insert into charge_intents (payer, order_id, downstream_key) values ('', '"
                    + orderId + "', 'the test holding the order')");
            List<Future<HttpResponse<byte[]>>> futures = new ArrayList<>();
            for (int i = 0; i < requests; i++) {
                futures.add(pool.submit(() -> api.charge(UUID.randomUUID().toString(), body, null)));
            }
            Await.until("every request waiting at the order", Duration.ofSeconds(20),
                    () -> DB.lockWaiters() >= requests);
            orderBlocker.rollback();
            for (Future<HttpResponse<byte[]>> future : futures) {
                answers.add(future.get(60, TimeUnit.SECONDS));
            }
        } finally {
            pool.shutdownNow();
        }

        List<Integer> statuses = answers.stream().map(HttpResponse::statusCode).sorted().toList();
        assertThat(statuses).as("%s", answers.stream().map(PaymentApi::text).toList())
                .containsOnly(201, 409).containsOnlyOnce(201);
        assertThat(countOf(api.gatewayCharges(orderId))).isEqualTo(1);
        assertThat(chargesInDatabase(orderId)).isEqualTo(1);
    }

    @Test
    void aDeclinedOrderMayBePaidUnderAnotherKey() throws Exception {
        String orderId = newOrderId();

        HttpResponse<byte[]> declined = api.charge(UUID.randomUUID().toString(), body(orderId, "20000.00"), null);
        assertThat(declined.statusCode()).as(text(declined)).isEqualTo(402);

        HttpResponse<byte[]> paid = api.charge(UUID.randomUUID().toString(), body(orderId, "200.00"), null);
        assertThat(paid.statusCode()).as(text(paid)).isEqualTo(201);
        assertThat(countOf(api.gatewayCharges(orderId))).isEqualTo(1);
    }

    @Test
    void gatewayGetsAKeyDerivedPerCallerNeverTheClientsKey() throws Exception {
        String orderId = newOrderId();
        String key = "shared-" + UUID.randomUUID();
        String body = body(orderId, "4.00");

        HttpResponse<byte[]> alice = api.chargeAs("alice", "alice-pass", key, body, null);
        HttpResponse<byte[]> bob = api.chargeAs("bob", "bob-pass", key, body, null);
        HttpResponse<byte[]> anonymous = api.charge(key, body, null);
        assertThat(List.of(alice, bob, anonymous)).allSatisfy(answer -> {
            assertThat(answer.statusCode()).as(text(answer)).isEqualTo(201);
            assertThat(answer.headers().firstValue(REPLAYED_HEADER)).isEmpty();
        });

        List<String> gatewayKeys = List.of(DB.queryString("select string_agg(idempotency_key, ',' order by id)"
                + " from gateway_ledger where order_id = '" + orderId + "'").split(","));
        assertThat(gatewayKeys).hasSize(3).doesNotHaveDuplicates().doesNotContain(key)
                .allSatisfy(gatewayKey -> assertThat(gatewayKey).doesNotContain(key).hasSize(43))
                .containsExactly(
                        downstreamKeys.derive(new ScopedKey("alice", ChargeController.SCOPE, key)),
                        downstreamKeys.derive(new ScopedKey("bob", ChargeController.SCOPE, key)),
                        downstreamKeys.derive(new ScopedKey("", ChargeController.SCOPE, key)));
        assertThat(DB.queryString("select string_agg(payer, ',' order by id) from charges where order_id = '"
                + orderId + "'")).isEqualTo("alice,bob,");
    }

    @Test
    void aPayerReadsItsOwnChargesAndAnotherPayersAsIfThereWereNone() throws Exception {
        String orderId = newOrderId();
        HttpResponse<byte[]> alice = api.chargeAs("alice", "alice-pass", UUID.randomUUID().toString(),
                body(orderId, "8.40"), null);
        assertThat(alice.statusCode()).as(text(alice)).isEqualTo(201);
        long id = numberField(text(alice), "id");

        HttpResponse<String> own = api.getAs("alice", "alice-pass", "/charges/" + id);
        assertThat(own.statusCode()).as(own.body()).isEqualTo(200);
        assertThat(own.body()).isEqualTo(text(alice));

        // Bob, and an anonymous caller, get the very 404 of an id that was never handed out.
        long neverHandedOut = id + 1_000_000;
        HttpResponse<String> missing = api.getAs("bob", "bob-pass", "/charges/" + neverHandedOut);
        assertThat(missing.statusCode()).isEqualTo(404);
        List<HttpResponse<String>> others = List.of(api.getAs("bob", "bob-pass", "/charges/" + id),
                api.get("/charges/" + id));
        assertThat(others).allSatisfy(other -> {
            assertThat(other.statusCode()).as("another payer's charge: %s", other.body()).isEqualTo(404);
            assertThat(contentType(other)).startsWith("application/problem+json");
            assertThat(other.body()).isEqualTo(
                    missing.body().replace(Long.toString(neverHandedOut), Long.toString(id)));
        });

        // Bob charges the same order (one charge per payer and order): each lists only its own charge of it.
        HttpResponse<byte[]> bob = api.chargeAs("bob", "bob-pass", UUID.randomUUID().toString(),
                body(orderId, "8.40"), null);
        assertThat(bob.statusCode()).as(text(bob)).isEqualTo(201);
        assertThat(api.getAs("alice", "alice-pass", "/charges?orderId=" + orderId).body())
                .isEqualTo("[" + text(alice) + "]");
        assertThat(api.getAs("bob", "bob-pass", "/charges?orderId=" + orderId).body())
                .isEqualTo("[" + text(bob) + "]");
        assertThat(api.charges(orderId)).as("the anonymous payer's").isEqualTo("[]");
    }

    @Test
    void unknownOutcomeHoldsTheKeyForTheLeaseThenTheRetryGetsTheChargeFromTheGateway() throws Exception {
        String orderId = newOrderId();
        String key = UUID.randomUUID().toString();
        String body = body(orderId, "8.80");

        // The gateway books the charge, then the handler fails: the local record is rolled back, the claim stays.
        HttpResponse<byte[]> failed = api.charge(key, body, "fail-after-charge");
        // While the lease lasts, a retry is told to come back later, and nothing runs (sent at once: the lease is 3 s)
        HttpResponse<byte[]> tooEarly = api.charge(key, body, null);
        assertThat(failed.statusCode()).as(text(failed)).isEqualTo(500);
        assertThat(DB.queryLong("select count(*) from gateway_ledger where order_id = '" + orderId + "'")).isEqualTo(1);
        assertThat(chargesInDatabase(orderId)).isZero();
        assertThat(statusOf(key)).isEqualTo("PROCESSING");
        assertThat(tooEarly.statusCode()).as(text(tooEarly)).isEqualTo(409);
        assertThat(text(tooEarly)).contains("idempotency-request-in-progress");

        awaitLeaseExpired(key);
        HttpResponse<byte[]> retry = api.charge(key, body, null);

        assertThat(retry.statusCode()).as(text(retry)).isEqualTo(201);
        assertThat(retry.headers().firstValue(REPLAYED_HEADER)).as("the resolver's answer").hasValue("true");
        long gatewayChargeId = DB.queryLong("select id from gateway_ledger where order_id = '" + orderId + "'");
        assertThat(numberField(text(retry), "gatewayChargeId")).isEqualTo(gatewayChargeId);
        assertThat(retry.headers().firstValue("Location")).hasValue("/charges/" + numberField(text(retry), "id"));
        assertThat(countOf(api.gatewayCharges(orderId))).isEqualTo(1);
        assertThat(api.charges(orderId)).isEqualTo("[" + text(retry) + "]");
        assertThat(statusOf(key)).isEqualTo("SUCCEEDED");
        assertThat(DB.queryString("select string_agg(decision || '/' || resolved_by, ',') from charge_resolutions"
                + " where idempotency_key = '" + key + "'")).isEqualTo("complete/retry");

        HttpResponse<byte[]> replay = api.charge(key, body, null);
        assertThat(replay.statusCode()).isEqualTo(201);
        assertThat(replay.body()).isEqualTo(retry.body());
    }

    @Test
    void unexpectedFailureAfterTheGatewayCallIsNeverAnsweredAsNotCarriedOut() throws Exception {
        String orderId = newOrderId();
        String key = UUID.randomUUID().toString();
        String body = body(orderId, "4.40");
        // The database refuses this order's local record: an unexpected failure after the gateway booked the charge.
        String refuse = "refuse_" + orderId.replaceAll("[^A-Za-z0-9]", "_");
        DB.queryString("create function " + refuse + "() returns trigger language plpgsql as"
                + " $$ begin raise exception 'refused for the test'; end $$");
        DB.queryString("create trigger " + refuse + " before insert on charges for each row"
                + " when (new.order_id = '" + orderId + "') execute function " + refuse + "()");
        try {
            HttpResponse<byte[]> failed = api.charge(key, body, null);

            assertThat(failed.statusCode()).as(text(failed)).isEqualTo(500);
            assertThat(countOf(api.gatewayCharges(orderId))).as("the gateway booked the charge").isEqualTo(1);
            assertThat(chargesInDatabase(orderId)).isZero();
            assertThat(statusOf(key)).isEqualTo("PROCESSING");
            // The charge was made: the client must not be told that the request was not carried out.
            assertThat(text(failed)).doesNotContain("not carried out")
                    .contains("may have been made").contains("same Idempotency-Key");
        } finally {
            DB.queryString("drop trigger " + refuse + " on charges");
        }

        awaitLeaseExpired(key);
        HttpResponse<byte[]> retry = api.charge(key, body, null);
        assertThat(retry.statusCode()).as(text(retry)).isEqualTo(201);
        assertThat(countOf(api.gatewayCharges(orderId))).isEqualTo(1);
        assertThat(api.charges(orderId)).isEqualTo("[" + text(retry) + "]");
    }

    @Test
    void resolverAnswersExactlyWhatTheHandlerAnswered() throws Exception {
        String orderId = newOrderId();
        String key = UUID.randomUUID().toString();
        HttpResponse<byte[]> created = api.charge(key, body(orderId, "9.99"), null);
        assertThat(created.statusCode()).as(text(created)).isEqualTo(201);
        StoredResponse storedByHandler = storedResponseOf(key);

        // As if the request had died after the gateway call: the resolver finds the charge, and the row recorded
        // since the claim was made.
        ScopedKey scopedKey = new ScopedKey("", ChargeController.SCOPE, key);
        Instant claimedAt = Instant.parse(DB.queryString("select to_char(created_at at time zone 'UTC',"
                + " 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') from idempotency_keys where idempotency_key = '" + key + "'"));
        StaleClaimResolver.Resolution resolution = resolver.resolve(new StaleClaimResolver.StaleClaim(scopedKey,
                downstreamKeys.derive(scopedKey), "0".repeat(64), claimedAt, Instant.now(), true));

        assertThat(resolution).isInstanceOf(StaleClaimResolver.Complete.class);
        StoredResponse builtByResolver = ((StaleClaimResolver.Complete) resolution).response();
        assertThat(builtByResolver.status()).isEqualTo(storedByHandler.status());
        assertThat(builtByResolver.headers()).isEqualTo(storedByHandler.headers());
        assertThat(new String(builtByResolver.body())).isEqualTo(new String(storedByHandler.body()));
        assertThat(builtByResolver).isEqualTo(storedByHandler);
        assertThat(chargesInDatabase(orderId)).as("the resolver recorded nothing twice").isEqualTo(1);
    }

    @Test
    void declinedChargeIsAFinalAnswerStoredAndReplayed() throws Exception {
        String orderId = newOrderId();
        String key = UUID.randomUUID().toString();
        String body = body(orderId, "10000.01");

        HttpResponse<byte[]> declined = api.charge(key, body, null);

        assertThat(declined.statusCode()).as(text(declined)).isEqualTo(402);
        assertThat(contentType(declined)).startsWith("application/problem+json");
        assertThat(text(declined)).contains("charge-declined").contains("\"orderId\":\"" + orderId + "\"");
        assertThat(statusOf(key)).isEqualTo("SUCCEEDED");

        HttpResponse<byte[]> again = api.charge(key, body, null);
        assertThat(again.statusCode()).isEqualTo(402);
        assertThat(again.body()).isEqualTo(declined.body());
        assertThat(again.headers().firstValue(REPLAYED_HEADER)).hasValue("true");
        assertThat(api.gatewayCharges(orderId)).isEqualTo("[]");
        assertThat(chargesInDatabase(orderId)).isZero();
    }

    @Test
    void invalidBodyOrChaosHeaderIsRefusedBeforeTheKeyIsClaimed() throws Exception {
        String orderId = newOrderId();
        String key = UUID.randomUUID().toString();

        HttpResponse<byte[]> invalid = api.charge(key,
                "{\"orderId\":\"" + orderId + "\",\"amount\":\"12.345\",\"currency\":\"eur\"}", null);
        assertThat(invalid.statusCode()).as(text(invalid)).isEqualTo(400);
        assertThat(contentType(invalid)).startsWith("application/problem+json");
        assertThat(text(invalid)).contains("invalid-payment").contains("amount").contains("currency");

        HttpResponse<byte[]> badChaos = api.charge(key, body(orderId, "1.00"), "crash-after-write");
        assertThat(badChaos.statusCode()).as(text(badChaos)).isEqualTo(400);
        assertThat(text(badChaos)).contains("crash-after-charge");

        // Nothing was claimed: no record holds the key for a lease, and the corrected request runs at once.
        assertThat(DB.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key + "'"))
                .isZero();
        HttpResponse<byte[]> corrected = api.charge(key, body(orderId, "12.3"), null);
        assertThat(corrected.statusCode()).as(text(corrected)).isEqualTo(201);
        assertThat(text(corrected)).contains("\"amount\":\"12.30\"");
        assertThat(api.gatewayCharges(orderId)).contains("\"amount\":\"12.30\"");
    }

    @Test
    void jsonNullBodyIsRefusedWith400BeforeTheKeyIsClaimed() throws Exception {
        String key = UUID.randomUUID().toString();

        HttpResponse<byte[]> refused = api.charge(key, "null", null);

        assertThat(refused.statusCode()).as(text(refused)).isEqualTo(400);
        assertThat(contentType(refused)).startsWith("application/problem+json");
        assertThat(DB.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key + "'"))
                .isZero();
        String orderId = newOrderId();
        HttpResponse<byte[]> corrected = api.charge(key, body(orderId, "1.00"), null);
        assertThat(corrected.statusCode()).as(text(corrected)).isEqualTo(201);
    }

    @Test
    void orderIdThatPostgresCannotStoreIsRefusedBeforeTheKeyIsClaimed() throws Exception {
        String orderId = newOrderId();
        String key = UUID.randomUUID().toString();

        // JSON allows a NUL character in a string (escaped); PostgreSQL text does not. Left to the database, the
        // gateway would fail with 500, this charge with 502, and the key would be held for the lease, then rerun into
        // the same failure.
        HttpResponse<byte[]> refused = api.charge(key,
                "{\"orderId\":\"" + orderId + "\\u0000\",\"amount\":\"1.00\",\"currency\":\"EUR\"}", null);

        assertThat(refused.statusCode()).as(text(refused)).isEqualTo(400);
        assertThat(contentType(refused)).startsWith("application/problem+json");
        assertThat(text(refused)).contains("invalid-payment").contains("orderId");
        assertThat(DB.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key + "'"))
                .isZero();
        assertThat(DB.queryLong("select count(*) from gateway_calls where order_id like '" + orderId + "%'"))
                .as("the gateway was not called").isZero();
    }

    /**
     * Sends {@code key} for {@code orderId} and stops its attempt after it took the order and before the check that
     * refuses a key holding another order (that check is cancelled while it waits for a lock on
     * {@code charge_intents}); the attempt answers 500 and its claim stays {@code PROCESSING}.
     */
    private void stopAfterTakingTheOrder(String key, String orderId, String amount) throws Exception {
        try (Connection rowBlocker = DriverManager.getConnection(DB.url(), DB.user(), DB.password());
             Connection tableBlocker = DriverManager.getConnection(DB.url(), DB.user(), DB.password())) {
            rowBlocker.setAutoCommit(false);
            tableBlocker.setAutoCommit(false);
            // The attempt's insert of the order waits for this uncommitted one...
            execute(rowBlocker, "insert into charge_intents (payer, order_id, downstream_key) values ('', '"
                    + orderId + "', 'a request under another key')");
            CompletableFuture<HttpResponse<byte[]>> attempt =
                    Async.supply(() -> send(key, body(orderId, amount), null));
            DB.awaitLockWaiter(Duration.ofSeconds(10));
            // ...and a table lock is queued behind it: granted once the attempt committed the order it took, it
            // holds the attempt's next read of the table, the check.
            CompletableFuture<Void> tableLocked = Async.run(() -> {
                try {
                    execute(tableBlocker, "lock table charge_intents in access exclusive mode");
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });
            Await.until("the table lock queued", Duration.ofSeconds(10), () -> DB.queryLong("select count(*) from"
                    + " pg_stat_activity where application_name = '" + DB.schema() + "'"
                    + " and wait_event_type = 'Lock' and query like 'lock table%'") > 0);
            rowBlocker.rollback();
            tableLocked.get(10, TimeUnit.SECONDS);
            cancelWhenWaiting("SELECT EXISTS");
            HttpResponse<byte[]> stopped = attempt.get(10, TimeUnit.SECONDS);
            assertThat(stopped.statusCode()).as(text(stopped)).isEqualTo(500);
            tableBlocker.rollback();
        }
    }

    private HttpResponse<byte[]> send(String key, String body, String chaos) {
        try {
            return api.charge(key, body, chaos);
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }

    private static void execute(Connection connection, String sql) throws Exception {
        try (var statement = connection.createStatement()) {
            statement.execute(sql);
        }
    }

    /** Cancels the statement of the application that begins with {@code sqlStart}, once it waits for a lock. */
    private static void cancelWhenWaiting(String sqlStart) throws InterruptedException {
        // this database's sessions only: other tests share the server
        String waiting = "from pg_stat_activity where application_name = '" + DB.schema() + "'"
                + " and wait_event_type = 'Lock' and query like '%" + sqlStart + "%'"
                + " and query not like '%pg_stat_activity%'";
        Await.until("the application's " + sqlStart + " waiting for a lock", Duration.ofSeconds(10),
                () -> DB.queryLong("select count(*) " + waiting) == 1);
        assertThat(DB.queryString("select pg_cancel_backend(pid) " + waiting)).isEqualTo("t");
    }

    private static long intentsOf(String orderId) {
        return DB.queryLong("select count(*) from charge_intents where order_id = '" + orderId + "'");
    }

    /** How many objects a JSON array of ledger entries or charges holds (counted by their ids). */
    static int countOf(String jsonArray) {
        int count = 0;
        for (int i = jsonArray.indexOf("{\"id\":"); i >= 0; i = jsonArray.indexOf("{\"id\":", i + 1)) {
            count++;
        }
        return count;
    }

    private static long chargesInDatabase(String orderId) {
        return DB.queryLong("select count(*) from charges where order_id = '" + orderId + "'");
    }

    private static String statusOf(String key) {
        return DB.queryString("select status from idempotency_keys where idempotency_key = '" + key + "'");
    }

    private static void awaitStatus(String key, String status) throws InterruptedException {
        Await.until("the record of " + key + " becomes " + status, Duration.ofSeconds(10),
                () -> status.equals(statusOf(key)));
    }

    /** Waits until the claim's lease has run out by the database clock. */
    static void awaitLeaseExpired(TestPostgres.Database db, String key) throws InterruptedException {
        Await.until("the lease on " + key + " runs out", Duration.ofSeconds(30), () -> "t".equals(db.queryString(
                "select locked_until < now() from idempotency_keys where idempotency_key = '" + key + "'")));
    }

    private static void awaitLeaseExpired(String key) throws InterruptedException {
        awaitLeaseExpired(DB, key);
    }

    /** The answer stored for {@code key}, read from the starter's table. */
    private static StoredResponse storedResponseOf(String key) throws Exception {
        try (Connection connection = DriverManager.getConnection(DB.url(), DB.user(), DB.password());
             PreparedStatement statement = connection.prepareStatement("select response_status, response_headers,"
                     + " response_body from idempotency_keys where idempotency_key = ?")) {
            statement.setString(1, key);
            try (ResultSet rs = statement.executeQuery()) {
                assertThat(rs.next()).isTrue();
                return new StoredResponse(rs.getInt(1), StoredResponse.headersFromText(rs.getString(2)),
                        rs.getBytes(3));
            }
        }
    }
}
