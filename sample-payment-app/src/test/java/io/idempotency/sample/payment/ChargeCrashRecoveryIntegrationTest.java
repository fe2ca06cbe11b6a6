package io.idempotency.sample.payment;

import io.idempotency.testkit.Async;
import io.idempotency.testkit.Await;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;

import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static io.idempotency.sample.payment.ChargeApi.numberField;
import static io.idempotency.sample.payment.ChargeApiIntegrationTest.awaitLeaseExpired;
import static io.idempotency.sample.payment.ChargeApiIntegrationTest.countOf;
import static io.idempotency.sample.payment.PaymentApi.REPLAYED_HEADER;
import static io.idempotency.sample.payment.PaymentApi.body;
import static io.idempotency.sample.payment.PaymentApi.newOrderId;
import static io.idempotency.sample.payment.PaymentApi.text;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * Kills the application for real in the middle of a charge — before the gateway was called; after the gateway booked
 * the charge but before the application recorded it; with the charge recorded and the answer stored, just before
 * their commit; and just after that commit, before answering — and checks that the charge is made exactly once and
 * the client gets it: from a retry after the lease ran out (the resolver asks the gateway), or from the background
 * sweeper when no retry comes, with two instances sweeping the same database; after the commit, at once, as a
 * replay that asks nobody. And killed from outside during the gateway call itself, which a gateway of its own then
 * books for a client that is gone.
 *
 * <p>The application runs in JVMs of its own on a {@link TestPostgres} database (a schema of its own), with a 2 s
 * lease and a 500 ms in-flight wait. The instance that crashes and the one restarted after it have the sweeper off, so
 * that the retry is what resolves the stale claim, deterministically; the two sweeping instances run it every 200 ms.
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class ChargeCrashRecoveryIntegrationTest {

    private static final Path LOG_DIR = Path.of("target", "charge-crash-recovery");
    private static final Duration EXIT_TIMEOUT = Duration.ofSeconds(30);

    /** What the application logs when it halts at each crash point: the proof that it died there. */
    private static final Map<String, String> HALTED_AT = Map.of(
            "crash-before-charge", "X-Chaos: halting the JVM before calling the gateway",
            "crash-after-charge", "X-Chaos: halting the JVM after the gateway booked charge ",
            // the answer was stored, uncommitted, when the JVM died: SUCCEEDED inside the transaction
            "crash-before-commit", " recorded and its answer written, before the commit (idempotency record in the"
                    + " transaction: SUCCEEDED)",
            "crash-after-commit", "X-Chaos: halting the JVM after committing charge ");

    private static TestPostgres.Database db;
    private static SampleAppProcess app;

    @BeforeAll
    static void database() {
        db = TestPostgres.newDatabase();
    }

    @BeforeEach
    void appIsRunning() throws Exception {
        if (app == null || !app.process().isAlive()) {
            app = start("charge-app", false);
        }
    }

    @AfterAll
    static void stopApp() throws Exception {
        if (app != null) {
            app.close();
        }
    }

    @Test
    @Order(1)
    void crashAfterTheGatewayChargedThenTheRetryAfterTheLeaseGetsThatCharge() throws Exception {
        String orderId = newOrderId();
        String key = UUID.randomUUID().toString();
        String body = body(orderId, "25.00");

        // The handler died right after the gateway's answer, before it recorded anything.
        HttpResponse<byte[]> retry = crashAfterTheGatewayBookedThenRetry(orderId, key, body, "crash-after-charge");

        ChargeApi api = ChargeApi.onPort(app.port());
        assertThat(retry.headers().firstValue("Location")).hasValue("/charges/" + numberField(text(retry), "id"));
        assertThat(countOf(api.gatewayCharges(orderId))).isEqualTo(1);

        HttpResponse<byte[]> replay = api.charge(key, body, null);
        assertThat(replay.statusCode()).isEqualTo(201);
        assertThat(replay.body()).isEqualTo(retry.body());
        assertThat(resolutionsOf(key)).as("a SUCCEEDED record is replayed without asking").isEqualTo("complete/retry");
    }

    @Test
    @Order(2)
    void crashBeforeTheGatewayWasCalledThenTheRetryAfterTheLeaseCharges() throws Exception {
        String orderId = newOrderId();
        String key = UUID.randomUUID().toString();
        String body = body(orderId, "26.00");

        crash(key, body, "crash-before-charge");

        assertThat(ledgerEntries(orderId)).isZero();
        assertThat(statusOf(key)).isEqualTo("PROCESSING");

        HttpResponse<byte[]> retry = restartThenRetryAfterTheLease(key, body);
        ChargeApi api = ChargeApi.onPort(app.port());

        assertThat(retry.statusCode()).as(text(retry)).isEqualTo(201);
        assertThat(retry.headers().firstValue(REPLAYED_HEADER)).as("the handler ran again").isEmpty();
        assertThat(ledgerEntries(orderId)).isEqualTo(1);
        assertThat(charges(orderId)).isEqualTo(1);
        assertThat(api.charges(orderId)).isEqualTo("[" + text(retry) + "]");
        assertThat(resolutionsOf(key)).isEqualTo("rerun/retry");
        assertThat(gatewayCalls(orderId)).isEqualTo(1);
    }

    @Test
    @Order(3)
    void crashWithTheChargeRecordedJustBeforeTheCommitLeavesItToTheResolver() throws Exception {
        String orderId = newOrderId();
        String key = UUID.randomUUID().toString();
        String body = body(orderId, "28.00");

        // The local record of the charge and the SUCCEEDED answer were in the transaction that died with the JVM:
        // only the claim, committed before the gateway call, is left, with the charge booked at the gateway.
        crashAfterTheGatewayBookedThenRetry(orderId, key, body, "crash-before-commit");
    }

    @Test
    @Order(4)
    void crashAfterTheCommitBeforeAnsweringThenTheRetryIsAReplayAtOnce() throws Exception {
        String orderId = newOrderId();
        String key = UUID.randomUUID().toString();
        String body = body(orderId, "29.00");

        crash(key, body, "crash-after-commit");

        // The charge and its answer were committed before the JVM died, the answer unsent.
        assertThat(ledgerEntries(orderId)).isEqualTo(1);
        assertThat(charges(orderId)).isEqualTo(1);
        assertThat(statusOf(key)).isEqualTo("SUCCEEDED");

        app = start("charge-app", false);
        ChargeApi api = ChargeApi.onPort(app.port());
        // no wait for the lease: a SUCCEEDED record is a replay, whatever its lease says
        HttpResponse<byte[]> retry = api.charge(key, body, null);

        assertThat(retry.statusCode()).as(text(retry)).isEqualTo(201);
        assertThat(retry.headers().firstValue(REPLAYED_HEADER)).hasValue("true");
        assertThat(api.charges(orderId)).isEqualTo("[" + text(retry) + "]");
        assertThat(resolutionsOf(key)).as("nothing to resolve: the resolver was never asked").isNull();
        assertThat(ledgerEntries(orderId)).isEqualTo(1);
        assertThat(gatewayCalls(orderId)).as("the gateway was called once, by the handler").isEqualTo(1);
    }

    @Test
    @Order(5)
    void twoSweepingInstancesResolveEveryAbandonedClaimOnceWithoutAnyRetry() throws Exception {
        ChargeApi api = ChargeApi.onPort(app.port());
        // Stale claims no client will retry: nine whose handler failed after the gateway charged, one whose handler
        // failed before calling it (the app answers 500 and stays up), and one whose JVM died after the charge.
        List<String> chargedKeys = new ArrayList<>();
        List<String> chargedOrders = new ArrayList<>();
        for (int i = 0; i < 9; i++) {
            String orderId = newOrderId();
            String key = UUID.randomUUID().toString();
            HttpResponse<byte[]> failed = api.charge(key, body(orderId, "1" + i + ".00"), "fail-after-charge");
            assertThat(failed.statusCode()).as(text(failed)).isEqualTo(500);
            chargedKeys.add(key);
            chargedOrders.add(orderId);
        }
        String unchargedOrder = newOrderId();
        String unchargedKey = UUID.randomUUID().toString();
        String unchargedBody = body(unchargedOrder, "2.00");
        assertThat(api.charge(unchargedKey, unchargedBody, "fail-before-charge").statusCode()).isEqualTo(500);
        String crashedOrder = newOrderId();
        String crashedKey = UUID.randomUUID().toString();
        crash(crashedKey, body(crashedOrder, "3.00"), "crash-after-charge");
        app = null;
        chargedKeys.add(crashedKey);
        chargedOrders.add(crashedOrder);
        List<String> allKeys = new ArrayList<>(chargedKeys);
        allKeys.add(unchargedKey);
        String keyList = "'" + String.join("','", allKeys) + "'";
        assertThat(db.queryLong("select count(*) from idempotency_keys where status = 'PROCESSING'"
                + " and idempotency_key in (" + keyList + ")")).isEqualTo(allKeys.size());

        SampleAppProcess first = SampleAppProcess.launch("sweeper-1", LOG_DIR, args(true));
        SampleAppProcess second = SampleAppProcess.launch("sweeper-2", LOG_DIR, args(true));
        try {
            first.awaitHealthy();
            second.awaitHealthy();

            // No request is sent: the sweepers find the claims once their leases ran out, and resolve them.
            Await.until("every stale claim resolved", Duration.ofSeconds(30), () -> db.queryLong(
                    "select count(*) from idempotency_keys where status = 'PROCESSING'"
                            + " and idempotency_key in (" + keyList + ")") == 0);

            for (int i = 0; i < chargedKeys.size(); i++) {
                String key = chargedKeys.get(i);
                assertThat(statusOf(key)).isEqualTo("SUCCEEDED");
                assertThat(resolutionsOf(key)).as("resolved once, by one sweeper").isEqualTo("complete/sweeper");
                assertThat(ledgerEntries(chargedOrders.get(i))).isEqualTo(1);
                assertThat(charges(chargedOrders.get(i))).isEqualTo(1);
            }
            assertThat(statusOf(unchargedKey)).as("nothing at the gateway: rerun, which the sweeper records as FAILED")
                    .isEqualTo("FAILED");
            assertThat(resolutionsOf(unchargedKey)).isEqualTo("rerun/sweeper");
            assertThat(db.queryLong("select count(*) from charge_resolutions where idempotency_key in (" + keyList
                    + ")")).isEqualTo(allKeys.size());
            System.out.println("[charge sweepers] instance 1 log: " + resolvedLines(first) + "; instance 2 log: "
                    + resolvedLines(second));

            // A later retry, on either instance, replays the charge the sweeper stored.
            List<ChargeApi> instances = List.of(ChargeApi.onPort(first.port()), ChargeApi.onPort(second.port()));
            for (int i = 0; i < chargedKeys.size(); i++) {
                HttpResponse<byte[]> retry = instances.get(i % 2).charge(chargedKeys.get(i),
                        body(chargedOrders.get(i), i < 9 ? "1" + i + ".00" : "3.00"), null);
                assertThat(retry.statusCode()).as(text(retry)).isEqualTo(201);
                assertThat(retry.headers().firstValue(REPLAYED_HEADER)).hasValue("true");
                assertThat(numberField(text(retry), "gatewayChargeId")).isEqualTo(db.queryLong(
                        "select id from gateway_ledger where order_id = '" + chargedOrders.get(i) + "'"));
                assertThat(instances.get(i % 2).charges(chargedOrders.get(i))).isEqualTo("[" + text(retry) + "]");
                assertThat(gatewayCalls(chargedOrders.get(i))).as("charged once, never again").isEqualTo(1);
            }
            // The FAILED one runs again, and charges.
            HttpResponse<byte[]> rerun = instances.get(0).charge(unchargedKey, unchargedBody, null);
            assertThat(rerun.statusCode()).as(text(rerun)).isEqualTo(201);
            assertThat(rerun.headers().firstValue(REPLAYED_HEADER)).isEmpty();
            assertThat(ledgerEntries(unchargedOrder)).isEqualTo(1);
            assertThat(gatewayCalls(unchargedOrder)).isEqualTo(1);
            assertThat(resolutionsOf(unchargedKey)).as("a FAILED record is claimed without asking")
                    .isEqualTo("rerun/sweeper");

            duplicateOnAnotherInstanceDuringTheLeaseGets409(instances.get(0), instances.get(1));
        } finally {
            first.close();
            second.close();
        }
    }

    @Test
    @Order(6)
    void gatewayUnreachableWhileResolvingIsAnUnknownOutcomeNotANoCharge() throws Exception {
        // A gateway of its own, so that it can be stopped while the application stays up.
        SampleAppProcess gateway = start("gateway", false);
        List<String> args = args(false);
        args.add("--sample.gateway.base-url=http://127.0.0.1:" + gateway.port());
        SampleAppProcess charging = SampleAppProcess.start("charge-app-remote-gateway", LOG_DIR, args);
        try {
            String orderId = newOrderId();
            String key = UUID.randomUUID().toString();
            String body = body(orderId, "27.00");
            ChargeApi api = ChargeApi.onPort(charging.port());

            HttpResponse<byte[]> failed = api.charge(key, body, "fail-after-charge");
            assertThat(failed.statusCode()).as(text(failed)).isEqualTo(500);
            assertThat(ledgerEntries(orderId)).as("the gateway booked the charge").isEqualTo(1);

            gateway.close();
            awaitLeaseExpired(db, key);
            HttpResponse<byte[]> retry = api.charge(key, body, null);

            // The charge exists, so the answer must not say that none was made: the outcome is unknown to the app.
            assertThat(retry.statusCode()).as(text(retry)).isEqualTo(502);
            assertThat(text(retry)).contains("gateway-outcome-unknown").doesNotContain("no charge was made");
            assertThat(retry.headers().firstValue("Retry-After")).as("the key is held for the lease").hasValue("2");
            assertThat(resolutionsOf(key)).isEqualTo("error/retry");
            assertThat(statusOf(key)).isEqualTo("PROCESSING");
            assertThat(charges(orderId)).isZero();
        } finally {
            charging.close();
            gateway.close();
        }
    }

    @Test
    @Order(7)
    void killedDuringTheGatewayCallWhichBooksTheChargeAfterwardsThenTheRetryGetsThatCharge() throws Exception {
        // A gateway in a JVM of its own, so that it outlives the application killed while waiting for its answer.
        SampleAppProcess gateway = start("gateway", false);
        List<String> args = args(false);
        args.add("--sample.gateway.base-url=http://127.0.0.1:" + gateway.port());
        args.add("--sample.gateway.read-timeout=60s"); // the call is still waiting when the JVM is killed
        SampleAppProcess charging = SampleAppProcess.start("charge-app-remote-gateway", LOG_DIR, args);
        SampleAppProcess restarted = null;
        try {
            String orderId = newOrderId();
            String key = UUID.randomUUID().toString();
            String body = body(orderId, "31.00");
            try (HeldBackBooking booking = HeldBackBooking.holdBack(db)) {
                booking.killDuringTheCall(charging, key, body, () -> {
                    assertThat(statusOf(key)).as("the intent was committed before the call").isEqualTo("PROCESSING");
                    assertThat(ledgerEntries(orderId)).isZero();
                });
                // the gateway goes on and books the charge, for a client that is gone
                booking.releaseAndAwaitTheBooking(orderId);
            }
            assertThat(charges(orderId)).as("the application never learnt of it").isZero();
            assertThat(statusOf(key)).isEqualTo("PROCESSING");

            restarted = SampleAppProcess.start("charge-app-remote-gateway", LOG_DIR, args);
            awaitLeaseExpired(db, key);
            ChargeApi again = ChargeApi.onPort(restarted.port());
            HttpResponse<byte[]> retry = again.charge(key, body, null);

            assertTheRetryGotTheChargeFromTheResolver(retry, again, orderId, key);
        } finally {
            if (restarted != null) {
                restarted.close();
            }
            charging.close();
            gateway.close();
        }
    }

    /**
     * Across instances no in-memory coalescing helps: the duplicate polls the committed claim in the database until
     * {@code idempotency.in-flight-wait} and answers 409; after the first request finished, it replays.
     */
    private static void duplicateOnAnotherInstanceDuringTheLeaseGets409(ChargeApi one, ChargeApi other)
            throws Exception {
        String orderId = newOrderId();
        String key = UUID.randomUUID().toString();
        String body = body(orderId, "44.00");
        // The duplicate's wait (500 ms) must run out while the first request still sleeps. On a loaded machine the
        // duplicate has been seen to arrive more than a second after the claim showed; 4 s leaves room for that (the
        // first request's 2 s lease is renewed meanwhile).
        CompletableFuture<HttpResponse<byte[]>> slow = Async.supply(() -> {
            try {
                return one.charge(key, body, "delay-ms=4000");
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
        Await.until("the first request claims its key", Duration.ofSeconds(10),
                () -> "PROCESSING".equals(statusOf(key)));

        HttpResponse<byte[]> duplicate = other.charge(key, body, null);
        assertThat(duplicate.statusCode()).as(text(duplicate)).isEqualTo(409);
        assertThat(text(duplicate)).contains("idempotency-request-in-progress");

        HttpResponse<byte[]> original = slow.get(10, TimeUnit.SECONDS);
        assertThat(original.statusCode()).as(text(original)).isEqualTo(201);
        HttpResponse<byte[]> replay = other.charge(key, body, null);
        assertThat(replay.statusCode()).isEqualTo(201);
        assertThat(replay.body()).isEqualTo(original.body());
        assertThat(replay.headers().firstValue(REPLAYED_HEADER)).hasValue("true");
        assertThat(ledgerEntries(orderId)).isEqualTo(1);
        assertThat(gatewayCalls(orderId)).as("the duplicate never reached the gateway").isEqualTo(1);
    }

    /**
     * Crashes the application at {@code fault}, a point after the gateway booked the charge and before the
     * application's record of it was committed, and checks what is left: the charge at the gateway, no record of it
     * here, the claim PROCESSING. Then restarts the application, sends the retry once the lease ran out and checks
     * that it got the charge from the resolver; returns the retry's answer.
     */
    private static HttpResponse<byte[]> crashAfterTheGatewayBookedThenRetry(String orderId, String key, String body,
            String fault) throws Exception {
        crash(key, body, fault);

        assertThat(ledgerEntries(orderId)).isEqualTo(1);
        assertThat(charges(orderId)).isZero();
        assertThat(statusOf(key)).isEqualTo("PROCESSING");

        HttpResponse<byte[]> retry = restartThenRetryAfterTheLease(key, body);

        assertTheRetryGotTheChargeFromTheResolver(retry, ChargeApi.onPort(app.port()), orderId, key);
        return retry;
    }

    /** Starts the application again, waits until the crashed request's lease ran out, and sends its retry. */
    private static HttpResponse<byte[]> restartThenRetryAfterTheLease(String key, String body) throws Exception {
        app = start("charge-app", false);
        awaitLeaseExpired(db, key);
        return ChargeApi.onPort(app.port()).charge(key, body, null);
    }

    /**
     * Checks that the retry of a request whose charge the gateway booked for a client that never heard of it got
     * that charge, found by the resolver and recorded once, and that nobody charged again.
     */
    private static void assertTheRetryGotTheChargeFromTheResolver(HttpResponse<byte[]> retry, ChargeApi api,
            String orderId, String key) throws Exception {
        assertThat(retry.statusCode()).as(text(retry)).isEqualTo(201);
        assertThat(retry.headers().firstValue(REPLAYED_HEADER)).as("the resolver's answer, replayed").hasValue("true");
        assertThat(numberField(text(retry), "gatewayChargeId")).isEqualTo(
                db.queryLong("select id from gateway_ledger where order_id = '" + orderId + "'"));
        assertThat(api.charges(orderId)).isEqualTo("[" + text(retry) + "]");
        assertThat(statusOf(key)).isEqualTo("SUCCEEDED");
        assertThat(resolutionsOf(key)).isEqualTo("complete/retry");
        assertThat(ledgerEntries(orderId)).isEqualTo(1);
        assertThat(gatewayCalls(orderId)).as("the resolver asked; nobody charged again").isEqualTo(1);
    }

    /** Sends the request with the fault; the JVM, up before, must die at the fault's point without answering. */
    private static void crash(String key, String body, String fault) throws Exception {
        CrashRequest.send(app, "/charges", key, body, fault, HALTED_AT.get(fault), EXIT_TIMEOUT);
    }

    private static SampleAppProcess start(String name, boolean sweeper) throws Exception {
        return SampleAppProcess.start(name, LOG_DIR, args(sweeper));
    }

    private static List<String> args(boolean sweeper) {
        List<String> args = new ArrayList<>(List.of(
                "--sample.chaos.enabled=true",
                "--idempotency.lease=2s",
                "--idempotency.in-flight-wait=500ms",
                "--idempotency.sweeper.enabled=" + sweeper,
                "--idempotency.sweeper.interval=200ms"));
        db.springPropertyValues().forEach(value -> args.add("--" + value));
        return args;
    }

    /** Charge requests the gateway received for the order, booked or not: the ledger alone deduplicates them. */
    private static long gatewayCalls(String orderId) {
        return db.queryLong("select count(*) from gateway_calls where order_id = '" + orderId + "'");
    }

    private static long ledgerEntries(String orderId) {
        return db.queryLong("select count(*) from gateway_ledger where order_id = '" + orderId + "'");
    }

    private static long charges(String orderId) {
        return db.queryLong("select count(*) from charges where order_id = '" + orderId + "'");
    }

    private static String statusOf(String key) {
        return db.queryString("select status from idempotency_keys where idempotency_key = '" + key + "'");
    }

    /** The resolver's consultations for {@code key}, oldest first, as {@code decision/resolved_by}, comma-separated. */
    private static String resolutionsOf(String key) {
        return db.queryString("select string_agg(decision || '/' || resolved_by, ',' order by id)"
                + " from charge_resolutions where idempotency_key = '" + key + "'");
    }

    private static long resolvedLines(SampleAppProcess instance) {
        return instance.output().lines().filter(line -> line.contains("stale charge claim")).count();
    }
}
