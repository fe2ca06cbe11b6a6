package io.idempotency.sample.payment;

import io.idempotency.testkit.Async;
import io.idempotency.testkit.Await;
import io.idempotency.testkit.FreePorts;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

import static io.idempotency.sample.payment.PaymentApi.REPLAYED_HEADER;
import static io.idempotency.sample.payment.PaymentApi.body;
import static io.idempotency.sample.payment.PaymentApi.newOrderId;
import static io.idempotency.sample.payment.PaymentApi.text;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * Kills the application for real in the middle of a payment and checks that a retry after the restart changes the
 * system exactly once: a crash before the commit leaves nothing (the retry creates the payment), a crash after the
 * commit but before the answer leaves the payment and its stored answer (the retry is a replay).
 *
 * <p>The application runs in a JVM of its own, in its zero-configuration mode: its embedded PostgreSQL outlives every
 * halt as an orphan on the data directory, so each restart also proves that the orphan is found and stopped.
 * The second wall is off, so that the payment counts measure the idempotency layer alone.
 */
class CrashRecoveryIntegrationTest {

    private static final Path WORK_DIR = Path.of("target", "crash-recovery", UUID.randomUUID().toString());
    private static final Path DATA_DIR = WORK_DIR.resolve("postgres").toAbsolutePath();
    private static final Duration EXIT_TIMEOUT = Duration.ofSeconds(30);

    /**
     * What the application logs when it halts at each crash point: the proof that it died there, and not earlier or
     * for another reason.
     */
    private static final Map<String, String> HALTED_AT = Map.of(
            // the key was claimed, uncommitted, when the JVM died: PROCESSING inside the transaction
            "crash-before-write", "with the key claimed, before writing the payment (idempotency record in the"
                    + " transaction: PROCESSING)",
            "crash-after-write", "X-Chaos: halting the JVM after writing payment ",
            // the answer was stored, uncommitted, when the JVM died: SUCCEEDED inside the transaction
            "crash-before-commit", "and its answer written, before the commit (idempotency record in the"
                    + " transaction: SUCCEEDED)",
            "crash-after-commit", "X-Chaos: halting the JVM after committing payment ");

    private static SampleAppProcess app;
    /** The port of the running application's embedded PostgreSQL (each start takes a free one). */
    private static int databasePort;

    @BeforeAll
    static void startApp() throws Exception {
        app = start();
    }

    /** A test that failed half-way may have left the application dead; the next one starts from a live one. */
    @BeforeEach
    void appIsRunning() throws Exception {
        if (!app.process().isAlive()) {
            app = start();
        }
    }

    @AfterAll
    static void stopApp() throws Exception {
        if (app != null) {
            app.close();
        }
        // A graceful stop takes the embedded database down with the application; anything left is a leak.
        Optional<ProcessHandle> leftOver = PostgresOrphans.runningServer(DATA_DIR);
        if (leftOver.isPresent()) {
            PostgresOrphans.stopOrphan(DATA_DIR, PostgresOrphans.DEFAULT_STOP_TIMEOUT);
        }
        assertThat(leftOver).as("PostgreSQL still running on %s after the application stopped", DATA_DIR).isEmpty();
        // The database files are large and of no use once the server is down; the application logs stay.
        deleteRecursively(DATA_DIR);
    }

    @Test
    void crashBetweenTheClaimAndTheHandlersWriteLeavesNothingAndTheRetryCreatesThePayment() throws Exception {
        // the key was claimed in the request's transaction, which died with the JVM before anything was written
        crashLeavesNothingAndTheRetryCreatesThePayment("crash-before-write", "24.00");
    }

    @Test
    void crashBeforeCommitLeavesNothingAndTheRetryCreatesThePayment() throws Exception {
        // the payment was written in the request's transaction, which died with the JVM
        crashLeavesNothingAndTheRetryCreatesThePayment("crash-after-write", "25.00");
    }

    @Test
    void crashJustBeforeTheCommitLeavesNothingEvenWithTheAnswerStored() throws Exception {
        // the handler has returned, the answer is rendered and the SUCCEEDED record written: only COMMIT is missing
        crashLeavesNothingAndTheRetryCreatesThePayment("crash-before-commit", "27.00");
    }

    @Test
    void crashAfterCommitKeepsThePaymentAndTheRetryIsAReplay() throws Exception {
        String orderId = newOrderId();
        String key = UUID.randomUUID().toString();
        String body = body(orderId, "26.00");

        crash(key, body, "crash-after-commit");

        // The payment was committed before the JVM died, answer unsent.
        assertThat(app.api().countPaymentsOf(orderId)).isEqualTo(1);

        HttpResponse<byte[]> retry = app.api().createPayment(key, body, null);
        assertThat(retry.statusCode()).as(text(retry)).isEqualTo(201);
        assertThat(retry.headers().firstValue(REPLAYED_HEADER)).hasValue("true");
        assertThat(app.api().paymentsOf(orderId)).isEqualTo("[" + text(retry) + "]");
    }

    @Test
    void aGracefulStopLetsTheRequestInFlightCommitBeforeTheDatabaseStops() throws Exception {
        String orderId = newOrderId();
        String key = UUID.randomUUID().toString();
        String body = body(orderId, "28.00");
        PaymentApi api = app.api();

        CompletableFuture<HttpResponse<byte[]>> inFlight = Async.supply(() -> {
            try {
                return api.createPayment(key, body, "delay-ms=5000");
            } catch (IOException | InterruptedException e) {
                throw new CompletionException(e);
            }
        });
        awaitOpenTransaction(); // the handler is sleeping, its transaction open
        app.process().destroy(); // SIGTERM: the web server finishes the request, then the context stops the database

        HttpResponse<byte[]> answer = inFlight.get(30, TimeUnit.SECONDS);
        assertThat(answer.statusCode()).as(text(answer)).isEqualTo(201);
        app.awaitExit(EXIT_TIMEOUT);
        assertThat(PostgresOrphans.runningServer(DATA_DIR)).as("stopped with the application").isEmpty();

        app = start();
        HttpResponse<byte[]> retry = app.api().createPayment(key, body, null);
        assertThat(retry.headers().firstValue(REPLAYED_HEADER)).as("the answer was kept").hasValue("true");
        assertThat(text(retry)).isEqualTo(text(answer));
        assertThat(app.api().countPaymentsOf(orderId)).isEqualTo(1);
    }

    /**
     * Crashes the application at {@code fault}, a point before the request's transaction committed, and checks that
     * nothing of the request was kept: no payment, and no claim, so that the retry runs the handler again and pays
     * once.
     */
    private static void crashLeavesNothingAndTheRetryCreatesThePayment(String fault, String amount) throws Exception {
        String orderId = newOrderId();
        String key = UUID.randomUUID().toString();
        String body = body(orderId, amount);

        crash(key, body, fault);

        assertThat(app.api().countPaymentsOf(orderId)).as("no payment was kept").isZero();
        HttpResponse<byte[]> retry = app.api().createPayment(key, body, null);
        assertThat(retry.statusCode()).as(text(retry)).isEqualTo(201);
        assertThat(retry.headers().firstValue(REPLAYED_HEADER)).as("runs again: the claim was not kept either")
                .isEmpty();
        assertThat(app.api().countPaymentsOf(orderId)).isEqualTo(1);
    }

    /**
     * Sends the request with the fault, checks that the JVM was up, died at the fault's point without answering and
     * left its database running, then starts the application again on the same data directory.
     */
    private static void crash(String key, String body, String fault) throws Exception {
        CrashRequest.send(app, "/payments", key, body, fault, HALTED_AT.get(fault), EXIT_TIMEOUT);
        assertThat(PostgresOrphans.runningServer(DATA_DIR))
                .as("the embedded PostgreSQL outlives the halted JVM")
                .isPresent();

        app = start();
    }

    private static void deleteRecursively(Path dir) throws IOException {
        if (!Files.exists(dir)) {
            return;
        }
        try (Stream<Path> paths = Files.walk(dir)) {
            for (Path path : paths.sorted(Comparator.reverseOrder()).toList()) {
                Files.delete(path);
            }
        }
    }

    private static SampleAppProcess start() throws Exception {
        databasePort = FreePorts.outsideEphemeralRange();
        return SampleAppProcess.start("crash-app", WORK_DIR, List.of(
                "--sample.chaos.enabled=true",
                // What survives a crash must be the idempotency layer's doing: with the second wall on, a retry that
                // ran the handler again after a committed payment would answer 200 with it and still leave one row.
                "--sample.second-wall.enabled=false",
                "--sample.embedded.data-dir=" + DATA_DIR,
                "--sample.embedded.port=" + databasePort));
    }

    /** Waits until a session of the application's database is idle inside an open transaction: a handler's. */
    private static void awaitOpenTransaction() throws InterruptedException {
        Await.until("a handler holding its transaction open", Duration.ofSeconds(30), () -> {
            try (Connection connection = DriverManager.getConnection("jdbc:postgresql://localhost:" + databasePort
                    + "/postgres?user=postgres");
                 Statement statement = connection.createStatement();
                 ResultSet rs = statement.executeQuery("select count(*) from pg_stat_activity"
                         + " where state = 'idle in transaction' and pid <> pg_backend_pid()")) {
                return rs.next() && rs.getLong(1) > 0;
            } catch (SQLException e) {
                throw new IllegalStateException(e);
            }
        });
    }
}
