package io.idempotency.sample.payment;

import io.idempotency.testkit.Async;
import io.idempotency.testkit.Await;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import static io.idempotency.sample.payment.PaymentApi.REPLAYED_HEADER;
import static io.idempotency.sample.payment.PaymentApi.body;
import static io.idempotency.sample.payment.PaymentApi.contentType;
import static io.idempotency.sample.payment.PaymentApi.newOrderId;
import static io.idempotency.sample.payment.PaymentApi.text;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Two instances of the application, each in its own JVM, on one database: simultaneous requests with the same key
 * spread over both must create one payment. Only the database can arbitrate here — no lock inside one JVM sees the
 * other instance — so this is the test that a JVM-local lock would fail. The instances run with the second wall
 * off, so that the one payment is the idempotency layer's doing. A duplicate also runs, once, when the instance
 * whose request holds the key is killed while the duplicate waits for it in the database, or when that instance stalls
 * with its transaction open until the database ends its session.
 */
class TwoInstancesConcurrencyIntegrationTest {

    private static final int REQUESTS = 20;
    private static final Path LOG_DIR = Path.of("target", "two-instances");

    private static TestPostgres.Database db;
    private static SampleAppProcess first;
    private static SampleAppProcess second;

    @BeforeAll
    static void startTwoInstances() throws Exception {
        db = TestPostgres.newDatabase();
        List<String> args = args();
        // Started side by side (both run the migrations; Flyway serialises them with a database lock).
        first = SampleAppProcess.launch("instance-1", LOG_DIR, args);
        second = SampleAppProcess.launch("instance-2", LOG_DIR, args);
        first.awaitHealthy();
        second.awaitHealthy();
    }

    private static List<String> args(String... more) {
        List<String> args = new ArrayList<>(List.of(
                "--sample.chaos.enabled=true",
                // This test proves that the idempotency layer alone runs the handler once. With the second wall on,
                // a second execution would find the first payment and answer 200 instead of writing a second row,
                // so the payment count would no longer tell.
                "--sample.second-wall.enabled=false"));
        args.addAll(List.of(more));
        db.springPropertyValues().forEach(value -> args.add("--" + value));
        return args;
    }

    @AfterAll
    static void stopInstances() throws Exception {
        for (SampleAppProcess app : Arrays.asList(first, second)) {
            if (app != null) {
                app.close();
            }
        }
    }

    @Test
    void concurrentRequestsWithOneKeyAcrossTwoInstancesCreateOnePayment() throws Exception {
        // The first request holds the key long enough for a claim of the other instance to be seen waiting in the
        // database on a busy machine, and shorter than idempotency.in-flight-wait (2 s), so that the waiters replay it.
        Map<String, Integer> seen = storm("delay-ms=1500");

        assertThat(seen.get("201 original")).as("answers: %s", seen).isEqualTo(1);
    }

    @Test
    void requestsThatOutwaitTheInFlightLimitGet409WithRetryAfterAndStillOnePayment() throws Exception {
        // The handler takes longer than idempotency.in-flight-wait (2 s), by enough that requests a loaded machine
        // spreads out still outwait it: waiters give up with 409 and Retry-After instead of holding a thread and a
        // connection until the first request ends.
        Map<String, Integer> seen = storm("delay-ms=4500");

        assertThat(seen.get("201 original")).as("answers: %s", seen).isEqualTo(1);
        assertThat(seen.getOrDefault("409", 0)).as("answers: %s", seen).isPositive();
    }

    @Test
    void aDuplicateWaitingInTheDatabaseRunsOnceTheInstanceHoldingTheKeyIsKilled() throws Exception {
        // Instances of their own, so that one can be killed; the duplicate's wait is long enough to outlast the kill.
        List<String> args = args("--idempotency.in-flight-wait=10s");
        SampleAppProcess holding = SampleAppProcess.launch("instance-killed", LOG_DIR, args);
        SampleAppProcess waiting = SampleAppProcess.launch("instance-waiting", LOG_DIR, args);
        try {
            holding.awaitHealthy();
            waiting.awaitHealthy();
            String orderId = newOrderId();
            String key = UUID.randomUUID().toString();
            String body = body(orderId, "43.00");

            PaymentApi holdingApi = holding.api();
            CompletableFuture<HttpResponse<byte[]>> holder = Async.supply(() -> {
                try {
                    return holdingApi.createPayment(key, body, "delay-ms=60000");
                } catch (IOException | InterruptedException e) {
                    throw new CompletionException(e);
                }
            });
            // the holder claimed the key, wrote its payment and sleeps in its handler, its transaction open
            awaitOpenTransaction(Duration.ofSeconds(30));
            PaymentApi waitingApi = waiting.api();
            CompletableFuture<HttpResponse<byte[]>> duplicate = Async.supply(() -> {
                try {
                    return waitingApi.createPayment(key, body, null);
                } catch (IOException | InterruptedException e) {
                    throw new CompletionException(e);
                }
            });
            // the duplicate's claim, on the other instance, waits in the database for the holder's
            db.awaitLockWaiter(Duration.ofSeconds(5));

            holding.process().destroyForcibly(); // SIGKILL, from outside
            assertThat(holding.awaitExit(Duration.ofSeconds(30))).as("killed by SIGKILL (128 + 9)").isEqualTo(137);
            assertThatThrownBy(() -> holder.get(30, TimeUnit.SECONDS))
                    .as("the killed instance never answered")
                    .isInstanceOf(ExecutionException.class)
                    .hasCauseInstanceOf(IOException.class);

            // The database rolled the holder's transaction back when its connection died: its claim and payment are
            // gone, and the waiting duplicate claims the key and runs.
            HttpResponse<byte[]> answer = duplicate.get(30, TimeUnit.SECONDS);
            assertThat(answer.statusCode()).as(text(answer)).isEqualTo(201);
            assertThat(answer.headers().firstValue(REPLAYED_HEADER)).as("ran, not replayed").isEmpty();
            assertThat(db.queryLong("select count(*) from payments where order_id = '" + orderId + "'"))
                    .isEqualTo(1);
            assertThat(db.queryString("select status from idempotency_keys where idempotency_key = '" + key + "'"))
                    .isEqualTo("SUCCEEDED");
            HttpResponse<byte[]> replay = waitingApi.createPayment(key, body, null);
            assertThat(replay.statusCode()).isEqualTo(201);
            assertThat(replay.body()).isEqualTo(answer.body());
            assertThat(replay.headers().firstValue(REPLAYED_HEADER)).hasValue("true");
        } finally {
            holding.close();
            waiting.close();
        }
    }

    /**
     * A holder that stops talking to the database with its transaction open — a machine that died without closing
     * its connections, a network cut, a process that stalls — keeps its claim for as long as PostgreSQL believes the
     * session alive: duplicates are answered 409 meanwhile. {@code idle_in_transaction_session_timeout} ends
     * the session; the claim and the writes roll back, a retry runs, once, and the holder, when it comes back, answers
     * 5xx, never a 2xx for effects that were not kept.
     */
    @Test
    void aHolderStalledInItsTransactionHoldsTheKeyUntilTheDatabaseEndsItsSession() throws Exception {
        SampleAppProcess stalling = SampleAppProcess.start("instance-stalling", LOG_DIR, args(
                "--spring.datasource.hikari.connection-init-sql=SET idle_in_transaction_session_timeout = '10s'"));
        try {
            String orderId = newOrderId();
            String key = UUID.randomUUID().toString();
            String body = body(orderId, "45.00");
            PaymentApi stallingApi = stalling.api();
            CompletableFuture<HttpResponse<byte[]>> holder = Async.supply(() -> {
                try {
                    // idle in its transaction for 20 s, as a handler on a machine that stopped would be for ever
                    return stallingApi.createPayment(key, body, "delay-ms=20000");
                } catch (IOException | InterruptedException e) {
                    throw new CompletionException(e);
                }
            });
            awaitOpenTransaction(Duration.ofSeconds(30));

            // The other instance's retry waits for the claim in the database, in vain: 409.
            PaymentApi other = second.api();
            HttpResponse<byte[]> held = other.createPayment(key, body, null);
            assertThat(held.statusCode()).as(text(held)).isEqualTo(409);
            assertThat(held.headers().firstValue("Retry-After")).isPresent();

            // After 10 s idle in its transaction the database ends the holder's session: its claim is gone.
            HttpResponse<byte[]> retry = held;
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (retry.statusCode() == 409) {
                assertThat(System.nanoTime() - deadline).as("the stalled claim was never released").isNegative();
                Thread.sleep(200);
                retry = other.createPayment(key, body, null);
            }
            assertThat(retry.statusCode()).as(text(retry)).isEqualTo(201);
            assertThat(retry.headers().firstValue(REPLAYED_HEADER)).as("ran: the stalled claim kept nothing").isEmpty();

            // The holder wakes up with its session gone: its commit fails, and it must not claim success.
            HttpResponse<byte[]> late = holder.get(60, TimeUnit.SECONDS);
            assertThat(late.statusCode()).as(text(late)).isBetween(500, 599);
            assertThat(db.queryLong("select count(*) from payments where order_id = '" + orderId + "'"))
                    .isEqualTo(1);
            HttpResponse<byte[]> replay = stallingApi.createPayment(key, body, null);
            assertThat(replay.statusCode()).isEqualTo(201);
            assertThat(replay.body()).isEqualTo(retry.body());
            assertThat(replay.headers().firstValue(REPLAYED_HEADER)).hasValue("true");
        } finally {
            stalling.close();
        }
    }

    /** Waits until a session of the test's database is idle inside an open transaction: a handler holding a claim. */
    private static void awaitOpenTransaction(Duration timeout) throws InterruptedException {
        Await.until("a handler holding its transaction open", timeout, () -> db.queryLong(
                "select count(*) from pg_stat_activity where application_name = '" + db.schema() + "'"
                        + " and state = 'idle in transaction'") > 0);
    }

    /**
     * Sends {@value #REQUESTS} simultaneous requests with one key and body, alternating between the instances, and
     * checks the invariants every outcome must respect: one payment; every 201 with the same body; every other answer
     * a 409 problem with {@code Retry-After}. Afterwards both instances replay the stored answer.
     *
     * @return how many answers of each kind were seen
     */
    private static Map<String, Integer> storm(String chaos) throws Exception {
        String orderId = newOrderId();
        String key = UUID.randomUUID().toString();
        String body = body(orderId, "42.00");
        List<PaymentApi> instances = List.of(first.api(), second.api());

        ExecutorService pool = Executors.newFixedThreadPool(REQUESTS);
        List<HttpResponse<byte[]>> answers = new ArrayList<>();
        // Duplicates inside one instance wait in memory; a session waiting for a lock in the database can only be
        // the other instance's claim, blocked by the one holding the key: proof that the two really overlapped.
        AtomicBoolean stormRunning = new AtomicBoolean(true);
        CompletableFuture<Long> mostLockWaiters = Async.supply(() -> {
            long most = 0;
            while (stormRunning.get()) {
                most = Math.max(most, db.lockWaiters());
            }
            return most;
        });
        try {
            CountDownLatch go = new CountDownLatch(1);
            List<Future<HttpResponse<byte[]>>> futures = new ArrayList<>();
            for (int i = 0; i < REQUESTS; i++) {
                PaymentApi api = instances.get(i % 2);
                futures.add(pool.submit(() -> {
                    go.await();
                    // The delay keeps the first request inside its transaction while the others arrive.
                    return api.createPayment(key, body, chaos);
                }));
            }
            go.countDown();
            for (Future<HttpResponse<byte[]>> future : futures) {
                answers.add(future.get(60, TimeUnit.SECONDS));
            }
        } finally {
            stormRunning.set(false);
            pool.shutdownNow();
        }
        assertThat(mostLockWaiters.get(30, TimeUnit.SECONDS))
                .as("a claim of one instance waited in the database for the other's").isPositive();

        Map<String, Integer> seen = new TreeMap<>();
        byte[] createdBody = null;
        for (HttpResponse<byte[]> answer : answers) {
            int status = answer.statusCode();
            if (status == 201) {
                boolean replayed = answer.headers().firstValue(REPLAYED_HEADER).isPresent();
                seen.merge(replayed ? "201 replayed" : "201 original", 1, Integer::sum);
                if (createdBody == null) {
                    createdBody = answer.body();
                }
                assertThat(answer.body()).as("every 201 carries the same body").isEqualTo(createdBody);
            } else {
                seen.merge(Integer.toString(status), 1, Integer::sum);
                assertThat(status).as("unexpected answer: %s", text(answer)).isEqualTo(409);
                assertThat(contentType(answer)).startsWith("application/problem+json");
                assertThat(answer.headers().firstValue("Retry-After")).isPresent();
            }
        }
        System.out.println("[two instances] " + REQUESTS + " concurrent requests with one key, X-Chaos: " + chaos
                + " -> " + seen);

        assertThat(createdBody).as("at least one request succeeded: %s", seen).isNotNull();
        assertThat(db.queryLong("select count(*) from payments where order_id = '" + orderId + "'")).isEqualTo(1);
        assertThat(db.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key + "'"))
                .isEqualTo(1);

        // Afterwards, both instances replay the same answer.
        for (PaymentApi api : instances) {
            HttpResponse<byte[]> replay = api.createPayment(key, body, null);
            assertThat(replay.statusCode()).isEqualTo(201);
            assertThat(replay.body()).isEqualTo(createdBody);
            assertThat(replay.headers().firstValue(REPLAYED_HEADER)).hasValue("true");
        }
        return seen;
    }
}
