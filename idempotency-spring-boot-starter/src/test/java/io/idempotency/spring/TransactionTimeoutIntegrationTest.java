package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.springframework.test.context.TestPropertySource;

import java.net.http.HttpResponse;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.Statement;
import java.time.Duration;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A transaction timeout ({@code spring.transaction.default-timeout}) shorter than {@code idempotency.in-flight-wait},
 * on real PostgreSQL over real HTTP: the claim runs in the request's transaction, so its wait for a key another
 * instance holds is bounded by what is left of that transaction, and ends with the documented 409 and
 * {@code Retry-After} rather than with the transaction's own timeout.
 */
@TestPropertySource(properties = {"spring.transaction.default-timeout=2s", "idempotency.in-flight-wait=10s",
        "idempotency.sweeper.enabled=false"})
class TransactionTimeoutIntegrationTest extends OrdersApplicationTest {

    @Test
    void aDuplicateOfAKeyHeldElsewhereGets409BeforeTheTransactionTimesOut() throws Exception {
        String first = UUID.randomUUID().toString();
        assertThat(post("/orders", first, "{\"note\":\"tx-timeout-first-" + first + "\"}").statusCode())
                .isEqualTo(201);
        String caller = DATABASE.queryString("select caller from idempotency_keys where idempotency_key = '"
                + first + "'");
        String scope = DATABASE.queryString("select scope from idempotency_keys where idempotency_key = '"
                + first + "'");
        String key = UUID.randomUUID().toString();
        String note = "tx-timeout-" + key;
        String body = "{\"note\":\"" + note + "\"}";
        // another instance's claim of the key, not committed yet
        try (Connection other = DriverManager.getConnection(DATABASE.url(), DATABASE.user(), DATABASE.password());
             Statement statement = other.createStatement()) {
            other.setAutoCommit(false);
            statement.execute("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash,"
                    + " fencing_token, expires_at) values ('" + caller + "', '" + scope + "', '" + key
                    + "', 'PROCESSING', repeat('a', 64), gen_random_uuid(), now() + interval '1 day')");

            long started = System.nanoTime();
            HttpResponse<byte[]> waited = post("/orders", key, body);
            Duration took = Duration.ofNanos(System.nanoTime() - started);

            assertThat(waited.statusCode()).as("the in-flight answer, not the transaction's timeout")
                    .isEqualTo(409);
            assertProblem(waited, "idempotency-request-in-progress");
            assertThat(waited.headers().firstValue("Retry-After")).hasValue("1");
            assertThat(took).as("waited for the key, within the transaction's time")
                    .isGreaterThan(Duration.ofMillis(800)).isLessThan(Duration.ofSeconds(5));
            other.rollback();
        }
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
        HttpResponse<byte[]> retry = post("/orders", key, body);
        assertThat(retry.statusCode()).as("the retry has the whole transaction for its handler").isEqualTo(201);
        assertThat(rows(note)).isEqualTo(1);
    }

    /**
     * A handler that outlives the transaction's timeout without a statement after it: the stored answer's statement is
     * refused for the timeout, and the request is answered 500 with "none were kept". None may be: neither its order
     * nor its claim, which, committed without an answer, would answer every retry 409 until the record expired.
     */
    @Test
    void aHandlerOutlivingTheTransactionTimeoutKeepsNothingAndItsRetryRunsAgain() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "tx-timeout-slow-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> timedOut = post("/orders/slow?millis=2500", key, body);

        assertThat(timedOut.statusCode()).isEqualTo(500);
        assertProblem(timedOut, "idempotency-commit-failed");
        assertThat(rows(note)).as("the order was rolled back").isZero();
        assertThat(keyRows(key)).as("the claim was rolled back").isZero();
        HttpResponse<byte[]> retry = post("/orders/slow?millis=2500", key, body);
        assertThat(retry.statusCode()).as("the retry runs the handler again, and fails the same way").isEqualTo(500);
        assertProblem(retry, "idempotency-commit-failed");
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
    }
}
