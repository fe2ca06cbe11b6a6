package io.idempotency.sample.payment;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.testkit.Async;
import io.idempotency.testkit.Await;
import io.idempotency.testkit.TestPostgres;

import java.io.IOException;
import java.net.http.HttpResponse;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Holds a gateway's bookings back (a lock on its ledger, whose insert waits for it), so that an application can be
 * killed while it waits for the gateway's answer to a charge, and the gateway books the charge afterwards, for a client
 * that is gone: {@link #killDuringTheCall}, then {@link #releaseAndAwaitTheBooking}.
 */
final class HeldBackBooking implements AutoCloseable {

    private static final Duration EXIT_TIMEOUT = Duration.ofSeconds(30);

    private final TestPostgres.Database db;
    private final HikariDataSource dataSource;
    private final Connection ledgerLock;

    private HeldBackBooking(TestPostgres.Database db) throws SQLException {
        this.db = db;
        this.dataSource = db.dataSource(1);
        try {
            ledgerLock = dataSource.getConnection();
            ledgerLock.setAutoCommit(false);
            try (Statement statement = ledgerLock.createStatement()) {
                statement.execute("LOCK TABLE gateway_ledger IN SHARE MODE");
            }
        } catch (SQLException | RuntimeException e) {
            dataSource.close();
            throw e;
        }
    }

    /**
     * Holds back every booking of the gateway whose ledger is in {@code db} from now until
     * {@link #releaseAndAwaitTheBooking}.
     */
    static HeldBackBooking holdBack(TestPostgres.Database db) throws SQLException {
        return new HeldBackBooking(db);
    }

    /**
     * Sends the charge to {@code app}, waits until the gateway is booking it (so the handler waits for its answer),
     * runs {@code whileTheGatewayBooks}, then kills {@code app} with SIGKILL, from outside, in the middle of the call:
     * it never answers.
     */
    void killDuringTheCall(SampleAppProcess app, String key, String body, ThrowingRunnable whileTheGatewayBooks)
            throws Exception {
        ChargeApi api = ChargeApi.onPort(app.port());
        CompletableFuture<HttpResponse<byte[]>> inFlight = Async.supply(() -> {
            try {
                return api.charge(key, body, null);
            } catch (IOException | InterruptedException e) {
                throw new CompletionException(e);
            }
        });
        db.awaitLockWaiter(Duration.ofSeconds(30)); // the gateway is booking: the handler waits for its answer
        whileTheGatewayBooks.run();

        app.process().destroyForcibly();
        assertThat(app.awaitExit(EXIT_TIMEOUT)).as("killed by SIGKILL (128 + 9)").isEqualTo(137);
        assertThatThrownBy(() -> inFlight.get(30, TimeUnit.SECONDS))
                .as("the killed application never answered")
                .isInstanceOf(ExecutionException.class)
                .hasCauseInstanceOf(IOException.class);
    }

    /** Lets the gateway go on, and waits until it has booked the order's charge that it was holding back. */
    void releaseAndAwaitTheBooking(String orderId) throws SQLException, InterruptedException {
        ledgerLock.commit();
        Await.until("the gateway books the charge", Duration.ofSeconds(30),
                () -> db.queryLong("select count(*) from gateway_ledger where order_id = '" + orderId + "'") > 0);
    }

    @Override
    public void close() throws SQLException {
        try {
            ledgerLock.close();
        } finally {
            dataSource.close();
        }
    }

    /** Work done while the gateway is booking, before the kill; it may fail an assertion. */
    @FunctionalInterface
    interface ThrowingRunnable {
        void run() throws Exception;
    }
}
