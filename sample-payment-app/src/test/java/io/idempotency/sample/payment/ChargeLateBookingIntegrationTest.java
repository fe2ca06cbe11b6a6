package io.idempotency.sample.payment;

import io.idempotency.testkit.Await;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CopyOnWriteArrayList;

import static io.idempotency.sample.payment.ChargeApiIntegrationTest.awaitLeaseExpired;
import static io.idempotency.sample.payment.PaymentApi.body;
import static io.idempotency.sample.payment.PaymentApi.newOrderId;
import static io.idempotency.sample.payment.PaymentApi.text;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * A gateway that books a charge after the resolver looked for it: the application is killed while the gateway is still
 * booking, the lease runs out, and the sweeper's resolver asks the gateway before the booking has landed — it finds
 * nothing, and answers {@code rerun}. That look-up cannot tell "never charged" from "still being charged", so the
 * order stays bound to the first key: a second key for the same order (a client that gave up on the first one) must
 * not charge it again once the late booking lands, while the first key, sent again, gets the charge the gateway made.
 * The same holds when the rerun cannot reach the gateway at all: that attempt sent nothing, but the first one did.
 *
 * <p>The application and its gateway run in JVMs of their own on a {@link TestPostgres} database, with a 2 s lease.
 */
class ChargeLateBookingIntegrationTest {

    private static final Path LOG_DIR = Path.of("target", "charge-late-booking");

    private static TestPostgres.Database db;
    /** The gateway, in a JVM of its own that is never killed: both tests book their charges there. */
    private static SampleAppProcess gateway;

    @BeforeAll
    static void databaseAndGateway() throws Exception {
        db = TestPostgres.newDatabase();
        gateway = SampleAppProcess.start("gateway", LOG_DIR, args(false, null));
    }

    @AfterAll
    static void noGateway() throws Exception {
        if (gateway != null) {
            gateway.close();
        }
        db = null;
    }

    @Test
    void aChargeBookedAfterTheSweeperFoundNothingIsNotMadeAgainUnderAnotherKey() throws Exception {
        List<String> charging = args(false, gateway.port());
        charging.add("--sample.gateway.read-timeout=60s"); // the call is still waiting when the JVM is killed
        SampleAppProcess first = SampleAppProcess.start("charge-app", LOG_DIR, charging);
        SampleAppProcess sweeping = null;
        try {
            String orderId = newOrderId();
            String key = UUID.randomUUID().toString();
            String body = body(orderId, "33.00");
            try (HeldBackBooking booking = HeldBackBooking.holdBack(db)) {
                booking.killDuringTheCall(first, key, body, () -> { });

                // Nobody retries: the sweeper takes the stale claim over and asks the gateway, whose booking is
                // still held back. It finds nothing under the key, and the resolver answers rerun (FAILED).
                sweeping = SampleAppProcess.start("sweeping-app", LOG_DIR, args(true, gateway.port()));
                Await.until("the sweeper resolves the claim", Duration.ofSeconds(30),
                        () -> "FAILED".equals(statusOf(key)));
                assertThat(resolutionsOf(key)).isEqualTo("rerun/sweeper");
                assertThat(ledgerEntries(orderId)).isZero();

                // the gateway goes on and books the charge, for a client that is gone
                booking.releaseAndAwaitTheBooking(orderId);
            }

            // The client gave up on its key and pays the order under a new one.
            ChargeApi again = ChargeApi.onPort(sweeping.port());
            HttpResponse<byte[]> otherKey = again.charge(UUID.randomUUID().toString(), body, null);

            assertThat(ledgerEntries(orderId)).as("the order is charged once at the gateway").isEqualTo(1);
            assertThat(otherKey.statusCode()).as(text(otherKey)).isEqualTo(409);
            assertThat(text(otherKey)).contains("order-already-charged");

            // The first key, sent again, runs again (FAILED) and gets the charge the gateway booked under it.
            HttpResponse<byte[]> retry = again.charge(key, body, null);
            assertThat(retry.statusCode()).as(text(retry)).isEqualTo(201);
            assertThat(ChargeApi.numberField(text(retry), "gatewayChargeId")).isEqualTo(
                    db.queryLong("select id from gateway_ledger where order_id = '" + orderId + "'"));
            assertThat(ledgerEntries(orderId)).isEqualTo(1);
            assertThat(db.queryLong("select count(*) from charges where order_id = '" + orderId + "'")).isEqualTo(1);
        } finally {
            if (sweeping != null) {
                sweeping.close();
            }
            first.close();
        }
    }

    @Test
    void aGatewayUnreachableForTheRerunLeavesTheOrderToTheKeyWhoseFirstCallMayStillBeBooked() throws Exception {
        // The application reaches the gateway through a proxy that takes two connections — the first attempt's charge
        // and the retry's look-up — and then refuses every other: the rerun's charge finds the gateway unreachable.
        try (RefusingProxy proxy = new RefusingProxy(gateway.port(), 2)) {
            List<String> charging = args(false, proxy.port());
            charging.add("--sample.gateway.read-timeout=60s"); // the call is still waiting when the JVM is killed
            SampleAppProcess first = SampleAppProcess.start("charge-app", LOG_DIR, charging);
            SampleAppProcess restarted = null;
            try {
                String orderId = newOrderId();
                String key = UUID.randomUUID().toString();
                String body = body(orderId, "34.00");
                try (HeldBackBooking booking = HeldBackBooking.holdBack(db)) {
                    booking.killDuringTheCall(first, key, body, () -> { });

                    // The retry after the lease: the resolver finds nothing booked yet (rerun), and the rerun's
                    // charge cannot connect. That attempt sent nothing, but the first one did: the outcome is unknown,
                    // never "no charge was made".
                    restarted = SampleAppProcess.start("charge-app-restarted", LOG_DIR, args(false, proxy.port()));
                    awaitLeaseExpired(db, key);
                    HttpResponse<byte[]> retry = ChargeApi.onPort(restarted.port()).charge(key, body, null);
                    assertThat(resolutionsOf(key)).isEqualTo("rerun/retry");
                    assertThat(text(retry)).doesNotContain("no charge was made");
                    assertThat(retry.statusCode()).as(text(retry)).isEqualTo(502);
                    assertThat(statusOf(key)).isEqualTo("PROCESSING");

                    // the first attempt's charge is booked after all
                    booking.releaseAndAwaitTheBooking(orderId);
                }

                // Another key for the order, on an instance that reaches the gateway.
                HttpResponse<byte[]> otherKey = ChargeApi.onPort(gateway.port())
                        .charge(UUID.randomUUID().toString(), body, null);

                assertThat(ledgerEntries(orderId)).as("the order is charged once at the gateway").isEqualTo(1);
                assertThat(otherKey.statusCode()).as(text(otherKey)).isEqualTo(409);
                assertThat(text(otherKey)).contains("order-already-charged");

                // The first key, retried once the lease has run out, gets the charge its first attempt made.
                awaitLeaseExpired(db, key);
                HttpResponse<byte[]> last = ChargeApi.onPort(gateway.port()).charge(key, body, null);
                assertThat(last.statusCode()).as(text(last)).isEqualTo(201);
                assertThat(ChargeApi.numberField(text(last), "gatewayChargeId")).isEqualTo(
                        db.queryLong("select id from gateway_ledger where order_id = '" + orderId + "'"));
                assertThat(ledgerEntries(orderId)).isEqualTo(1);
            } finally {
                if (restarted != null) {
                    restarted.close();
                }
                first.close();
            }
        }
    }

    /**
     * Passes the first {@code connections} connections on to the gateway, each for one request (it asks the gateway to
     * close the connection after answering, so that the client opens a new one for the next request), then stops
     * listening: every later connection is refused, as by a gateway that cannot be reached.
     */
    private static final class RefusingProxy implements AutoCloseable {

        private final ServerSocket server;
        private final List<Socket> sockets = new CopyOnWriteArrayList<>();

        RefusingProxy(int targetPort, int connections) throws IOException {
            server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
            Thread acceptor = new Thread(() -> {
                try {
                    for (int i = 0; i < connections; i++) {
                        Socket client = server.accept();
                        Socket upstream = new Socket(InetAddress.getLoopbackAddress(), targetPort);
                        sockets.add(client);
                        sockets.add(upstream);
                        pump(client, upstream, true);
                        pump(upstream, client, false);
                    }
                } catch (IOException e) {
                    // closed
                } finally {
                    closeQuietly(server);
                }
            }, "refusing-proxy");
            acceptor.setDaemon(true);
            acceptor.start();
        }

        int port() {
            return server.getLocalPort();
        }

        private static void pump(Socket from, Socket to, boolean request) {
            Thread pump = new Thread(() -> {
                try {
                    InputStream in = from.getInputStream();
                    OutputStream out = to.getOutputStream();
                    if (request) {
                        // after the request line: the gateway answers with "Connection: close" and ends the connection
                        int b;
                        while ((b = in.read()) != -1) {
                            out.write(b);
                            if (b == '\n') {
                                out.write("Connection: close\r\n".getBytes(StandardCharsets.US_ASCII));
                                break;
                            }
                        }
                    }
                    in.transferTo(out);
                    to.shutdownOutput();
                } catch (IOException e) {
                    // one side went away
                }
            }, "refusing-proxy-pump");
            pump.setDaemon(true);
            pump.start();
        }

        @Override
        public void close() {
            closeQuietly(server);
            sockets.forEach(RefusingProxy::closeQuietly);
        }

        private static void closeQuietly(AutoCloseable closeable) {
            try {
                closeable.close();
            } catch (Exception e) {
                // closing anyway
            }
        }
    }

    private static List<String> args(boolean sweeper, Integer gatewayPort) {
        List<String> args = new ArrayList<>(List.of(
                "--idempotency.lease=2s",
                "--idempotency.in-flight-wait=500ms",
                "--idempotency.sweeper.enabled=" + sweeper,
                "--idempotency.sweeper.interval=200ms"));
        if (gatewayPort != null) {
            args.add("--sample.gateway.base-url=http://127.0.0.1:" + gatewayPort);
        }
        db.springPropertyValues().forEach(value -> args.add("--" + value));
        return args;
    }

    private static long ledgerEntries(String orderId) {
        return db.queryLong("select count(*) from gateway_ledger where order_id = '" + orderId + "'");
    }

    private static String statusOf(String key) {
        return db.queryString("select status from idempotency_keys where idempotency_key = '" + key + "'");
    }

    private static String resolutionsOf(String key) {
        return db.queryString("select string_agg(decision || '/' || resolved_by, ',' order by id)"
                + " from charge_resolutions where idempotency_key = '" + key + "'");
    }
}
