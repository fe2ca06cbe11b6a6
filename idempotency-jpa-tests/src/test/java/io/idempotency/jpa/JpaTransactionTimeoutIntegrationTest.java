package io.idempotency.jpa;

import com.zaxxer.hikari.HikariDataSource;
import com.zaxxer.hikari.HikariPoolMXBean;
import io.idempotency.jpa.app.JpaTestApplication;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.test.context.TestPropertySource;

import javax.sql.DataSource;
import java.net.http.HttpResponse;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.Statement;
import java.time.Duration;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A transaction timeout shorter than {@code idempotency.in-flight-wait} under JPA's transaction manager, on real
 * PostgreSQL over real HTTP: JPA keeps the deadline on the EntityManager it binds and on the connection it exposes,
 * and the claim's wait for a key another instance holds ends with the documented 409, not with the timeout's
 * cancellation of the claim.
 */
@SpringBootTest(classes = JpaTestApplication.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
@TestPropertySource(properties = {"spring.transaction.default-timeout=2s", "idempotency.in-flight-wait=10s",
        "idempotency.sweeper.enabled=false"})
class JpaTransactionTimeoutIntegrationTest extends JpaHttpTest {

    static final TestPostgres.Database DATABASE = JpaContexts.withPurchases();

    @Autowired
    DataSource dataSource;

    @Override
    TestPostgres.Database database() {
        return DATABASE;
    }

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        JpaContexts.register(registry, DATABASE);
    }

    @Test
    void aDuplicateOfAKeyHeldElsewhereGets409BeforeTheTransactionTimesOut() throws Exception {
        String first = UUID.randomUUID().toString();
        assertThat(post("/purchases", first, purchase("timeout-first-" + first)).statusCode()).isEqualTo(201);
        String caller = DATABASE.queryString("select caller from idempotency_keys where idempotency_key = '"
                + first + "'");
        String scope = DATABASE.queryString("select scope from idempotency_keys where idempotency_key = '"
                + first + "'");
        String key = UUID.randomUUID().toString();
        String reference = "timeout-" + key;
        // another instance's claim of the key, not committed yet
        try (Connection other = DriverManager.getConnection(DATABASE.url(), DATABASE.user(), DATABASE.password());
             Statement statement = other.createStatement()) {
            other.setAutoCommit(false);
            statement.execute("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash,"
                    + " fencing_token, expires_at) values ('" + caller + "', '" + scope + "', '" + key
                    + "', 'PROCESSING', repeat('a', 64), gen_random_uuid(), now() + interval '1 day')");

            long started = System.nanoTime();
            HttpResponse<String> waited = post("/purchases", key, purchase(reference));
            Duration took = Duration.ofNanos(System.nanoTime() - started);

            assertThat(waited.statusCode()).as("the in-flight answer, not the transaction's timeout: " + waited.body())
                    .isEqualTo(409);
            assertThat(waited.body()).contains("idempotency-request-in-progress");
            assertThat(took).as("waited for the key, within the transaction's time")
                    .isGreaterThan(Duration.ofMillis(800)).isLessThan(Duration.ofSeconds(5));
            other.rollback();
        }
        assertThat(purchases(reference)).isZero();
        assertThat(record(key)).isNull();
        HttpResponse<String> retry = post("/purchases", key, purchase(reference));
        assertThat(retry.statusCode()).as("the retry has the whole transaction for its handler").isEqualTo(201);
        assertThat(purchases(reference)).isEqualTo(1);
    }

    /**
     * A handler that outlives the transaction's timeout without a statement after it: the stored answer's write is
     * refused for the timeout, which Spring reports without rolling JPA's transaction back. The client gets 500, nothing
     * is kept, the retry runs again, and the EntityManager's connection goes back to the pool.
     */
    @Test
    void aHandlerOutlivingTheTransactionTimeoutKeepsNothingAndReturnsItsConnection() throws Exception {
        assertTimedOutKeepsNothingAndReturnsItsConnection("");
    }

    @Test
    void aListenerOutlivingTheTransactionTimeoutKeepsNothingAndReturnsItsConnection() throws Exception {
        assertTimedOutKeepsNothingAndReturnsItsConnection("&outbox=true");
    }

    private void assertTimedOutKeepsNothingAndReturnsItsConnection(String query) throws Exception {
        String key = UUID.randomUUID().toString();
        String reference = "timeout-slow-" + key;

        HttpResponse<String> timedOut = post("/commit-time/purchases/slow?millis=2500" + query, key,
                purchase(reference));

        assertThat(timedOut.statusCode()).as(timedOut.body()).isEqualTo(500);
        assertThat(timedOut.body()).contains("idempotency-commit-failed", "none were kept");
        assertThat(purchases(reference)).as("the purchase was rolled back").isZero();
        assertThat(record(key)).as("the claim was rolled back").isNull();
        HikariPoolMXBean pool = ((HikariDataSource) dataSource).getHikariPoolMXBean();
        long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
        while (pool.getActiveConnections() > 0 && System.nanoTime() - deadline < 0) {
            Thread.sleep(10);
        }
        assertThat(pool.getActiveConnections()).as("every connection is back in the pool").isZero();
        HttpResponse<String> retry = post("/commit-time/purchases/slow?millis=0", key, purchase(reference));
        assertThat(retry.statusCode()).as(retry.body()).isEqualTo(201);
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(purchases(reference)).isEqualTo(1);
    }

    private static String purchase(String reference) {
        return "{\"reference\":\"" + reference + "\",\"note\":\"n\"}";
    }
}
