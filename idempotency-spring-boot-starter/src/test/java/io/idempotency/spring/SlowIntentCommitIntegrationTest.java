package io.idempotency.spring;

import io.idempotency.spring.app.FakeGateway;
import io.idempotency.spring.app.TestApplication;
import io.idempotency.testkit.Async;
import io.idempotency.testkit.Await;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.Statement;
import java.time.Duration;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The commit of an intent-first claim outlasts the driver's {@code socketTimeout} (a commit held up on the server: a
 * slow disk, a synchronous standby that lags): the application gives up on the connection while PostgreSQL is still
 * committing, and commits the claim after the application has answered. Nothing ran under that claim, so it must not
 * hold the key for its lease. A deferred constraint trigger on the records of this test's keys makes the commit wait
 * for an advisory lock the test holds.
 */
@SpringBootTest(classes = TestApplication.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = {"idempotency.in-flight-wait=1s", "idempotency.sweeper.enabled=false"})
@Tag("container")
class SlowIntentCommitIntegrationTest {

    private static final String PREFIX = "slow-commit-";

    static final TestPostgres.Database DATABASE = TestDatabases.withOrders();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
        // as the documentation advises, so that a stalled connection fails instead of holding its request for ever
        registry.add("spring.datasource.url", () -> DATABASE.url() + "&socketTimeout=2");
    }

    @AfterAll
    static void dropTrigger() {
        DATABASE.queryString("drop trigger if exists slow_commit on idempotency_keys");
        DATABASE.queryString("drop function if exists slow_commit()");
    }

    @LocalServerPort
    int port;

    @Autowired
    FakeGateway gateway;

    final HttpClient http = HttpClient.newHttpClient();

    @Test
    void anIntentCommittedAfterTheApplicationGaveUpOnItDoesNotHoldTheKeyForTheLease() throws Exception {
        DATABASE.queryString("""
                create or replace function slow_commit() returns trigger language plpgsql as $$
                begin
                    perform pg_advisory_xact_lock(hashtext(new.idempotency_key));
                    return new;
                end $$""");
        DATABASE.queryString("drop trigger if exists slow_commit on idempotency_keys");
        DATABASE.queryString("create constraint trigger slow_commit after insert on idempotency_keys"
                + " deferrable initially deferred for each row"
                + " when (new.idempotency_key like '" + PREFIX + "%') execute function slow_commit()");
        String key = PREFIX + UUID.randomUUID();
        String note = "slow-commit-" + key;
        long callsBefore = gateway.calls();

        HttpResponse<String> failed;
        try (Connection holder = DriverManager.getConnection(DATABASE.url(), DATABASE.user(), DATABASE.password());
             Statement statement = holder.createStatement()) {
            statement.execute("select pg_advisory_lock(hashtext('" + key + "'))");
            CompletableFuture<HttpResponse<String>> answer = Async.supply(() -> {
                try {
                    return charge(key, note);
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });
            DATABASE.awaitLockWaiter(Duration.ofSeconds(10)); // the claim's COMMIT waits
            failed = answer.get(30, TimeUnit.SECONDS);
            statement.execute("select pg_advisory_unlock_all()"); // the commit goes on, after the answer
        }
        assertThat(failed.statusCode()).as(failed.body()).isEqualTo(503);
        assertThat(failed.body()).contains("idempotency-store-unavailable");
        // PostgreSQL commits the claim once the lock is free, though the application no longer listens
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (DATABASE.queryLong("select count(*) from pg_stat_activity where application_name = '"
                + DATABASE.schema() + "' and wait_event_type = 'Lock'") > 0) {
            assertThat(System.nanoTime() - deadline).as("the commit went on").isNegative();
            Thread.sleep(20);
        }
        // the application lets the claim go once it sees it committed (trying again with growing pauses): well before
        // the 10 s lease, or the key would be held for it
        Await.until("the claim let go before its lease ran out", Duration.ofSeconds(8), () -> DATABASE.queryLong(
                "select count(*) from idempotency_keys where idempotency_key = '" + key + "'"
                        + " and status = 'PROCESSING'") == 0);

        HttpResponse<String> retry = charge(key, note);

        assertThat(retry.statusCode()).as("nothing ran under the claim: not 'in progress' for a 10 s lease, "
                + retry.body()).isEqualTo(201);
        assertThat(gateway.calls() - callsBefore).as("the handler of the first request never ran").isEqualTo(1);
        assertThat(TestDatabases.rows(DATABASE, note)).isEqualTo(1);
    }

    private HttpResponse<String> charge(String key, String note) throws Exception {
        return http.send(HttpRequest.newBuilder(URI.create("http://localhost:" + port + "/intent/long-lease"))
                .header("Content-Type", "application/json")
                .header("Idempotency-Key", key)
                .POST(HttpRequest.BodyPublishers.ofString("{\"note\":\"" + note + "\"}")).build(),
                HttpResponse.BodyHandlers.ofString());
    }
}
