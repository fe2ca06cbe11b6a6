package io.idempotency.spring;

import io.idempotency.testkit.Async;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.test.context.TestPropertySource;

import javax.sql.DataSource;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The database refuses a request's claim without losing its connection, on real PostgreSQL over real HTTP: the pool
 * has none to give, the connection is read-only (as one to a standby after a failover), or a
 * {@code statement_timeout} on the pool's connections ends the claim's wait for a key another instance holds. Each
 * is answered 503 {@code idempotency-store-unavailable}, runs nothing and leaves the key free. The pool has two
 * connections (the schema's migration at startup takes two); each test holds one of them, leaving the application one.
 */
@TestPropertySource(properties = {"idempotency.in-flight-wait=20s", "idempotency.sweeper.enabled=false",
        "spring.datasource.hikari.maximum-pool-size=2", "spring.datasource.hikari.minimum-idle=2",
        "spring.datasource.hikari.connection-timeout=1000"})
class DatabaseRefusalsIntegrationTest extends OrdersApplicationTest {

    private static final String HOLD_PREFIX = "refusal-hold-";
    private static final String COMPLETE_PREFIX = "refusal-complete-";

    @Autowired
    DataSource dataSource;

    private Connection held;

    @BeforeEach
    void leaveTheApplicationOneConnection() throws SQLException {
        held = dataSource.getConnection();
    }

    @org.junit.jupiter.api.AfterEach
    void giveItBack() throws SQLException {
        held.close();
    }

    @BeforeEach
    void blockOrdersOfThisTest() {
        DATABASE.queryString("""
                create or replace function refusal_block_order() returns trigger language plpgsql as $$
                begin
                    perform pg_advisory_xact_lock(hashtext(new.note));
                    return new;
                end $$""");
        DATABASE.queryString("drop trigger if exists refusal_block_order on orders");
        DATABASE.queryString("create trigger refusal_block_order before insert on orders for each row"
                + " when (new.note like '" + HOLD_PREFIX + "%') execute function refusal_block_order()");
        DATABASE.queryString("""
                create or replace function refusal_block_complete() returns trigger language plpgsql as $$
                begin
                    perform pg_advisory_xact_lock(hashtext(new.idempotency_key));
                    return new;
                end $$""");
        DATABASE.queryString("drop trigger if exists refusal_block_complete on idempotency_keys");
        DATABASE.queryString("create trigger refusal_block_complete before update on idempotency_keys for each row"
                + " when (new.status = 'SUCCEEDED' and new.idempotency_key like '" + COMPLETE_PREFIX + "%')"
                + " execute function refusal_block_complete()");
    }

    @AfterAll
    static void dropTrigger() {
        DATABASE.queryString("drop trigger if exists refusal_block_order on orders");
        DATABASE.queryString("drop function if exists refusal_block_order()");
        DATABASE.queryString("drop trigger if exists refusal_block_complete on idempotency_keys");
        DATABASE.queryString("drop function if exists refusal_block_complete()");
    }

    @Test
    void aRequestThePoolHasNoConnectionForIsAnsweredUnavailableAndLeavesNothing() throws Exception {
        String holdKey = UUID.randomUUID().toString();
        String holdNote = HOLD_PREFIX + holdKey;
        String key = UUID.randomUUID().toString();
        String note = "refused-" + key;
        String body = "{\"note\":\"" + note + "\"}";
        try (Connection holder = DriverManager.getConnection(DATABASE.url(), DATABASE.user(), DATABASE.password());
             Statement statement = holder.createStatement()) {
            statement.execute("select pg_advisory_lock(hashtext('" + holdNote + "'))");
            CompletableFuture<HttpResponse<byte[]>> holding = async(
                    () -> post("/orders", holdKey, "{\"note\":\"" + holdNote + "\"}"));
            DATABASE.awaitLockWaiter(Duration.ofSeconds(10)); // its handler holds the pool's only connection

            HttpResponse<byte[]> refused = post("/orders", key, body);

            assertThat(refused.statusCode()).isEqualTo(503);
            assertProblem(refused, "idempotency-store-unavailable");
            assertThat(refused.headers().firstValue("Retry-After")).hasValue("1");
            statement.execute("select pg_advisory_unlock_all()");
            assertThat(holding.get(30, TimeUnit.SECONDS).statusCode()).isEqualTo(201);
        }
        assertThat(rows(note)).as("the handler did not run").isZero();
        assertThat(keyRows(key)).as("no claim").isZero();
        assertThat(post("/orders", key, body).statusCode()).isEqualTo(201);
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void aRequestOnAReadOnlyConnectionIsAnsweredUnavailableAndLeavesNothing() throws Exception {
        for (String path : new String[] {"/orders", "/intent/charges"}) {
            String key = UUID.randomUUID().toString();
            String note = "read-only-" + key;
            String body = "{\"note\":\"" + note + "\"}";

            HttpResponse<byte[]> refused = sentWithSetting("default_transaction_read_only", "on", "off",
                    () -> post(path, key, body));

            assertThat(refused.statusCode()).as(path).isEqualTo(503);
            assertProblem(refused, "idempotency-store-unavailable");
            assertThat(rows(note)).as("the handler did not run").isZero();
            assertThat(keyRows(key)).as("no claim").isZero();
            assertThat(post(path, key, body).statusCode()).as(path).isEqualTo(201);
            assertThat(rows(note)).isEqualTo(1);
        }
    }

    @Test
    void aStatementTimeoutShorterThanTheInFlightWaitEndsTheWaitForAKeyHeldElsewhereWith503() throws Exception {
        String first = UUID.randomUUID().toString();
        assertThat(post("/orders", first, "{\"note\":\"timeout-first-" + first + "\"}").statusCode()).isEqualTo(201);
        String caller = DATABASE.queryString("select caller from idempotency_keys where idempotency_key = '"
                + first + "'");
        String scope = DATABASE.queryString("select scope from idempotency_keys where idempotency_key = '"
                + first + "'");
        String key = UUID.randomUUID().toString();
        String note = "timeout-" + key;
        String body = "{\"note\":\"" + note + "\"}";
        // another instance's claim of the key, not committed yet
        try (Connection other = DriverManager.getConnection(DATABASE.url(), DATABASE.user(), DATABASE.password());
             Statement statement = other.createStatement()) {
            other.setAutoCommit(false);
            statement.execute("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash,"
                    + " fencing_token, expires_at) values ('" + caller + "', '" + scope + "', '" + key
                    + "', 'PROCESSING', repeat('a', 64), gen_random_uuid(), now() + interval '1 day')");

            HttpResponse<byte[]> waited = sentWithSetting("statement_timeout", "1s", "0",
                    () -> post("/orders", key, body));

            assertThat(waited.statusCode()).as("not the 409 the in-flight wait (20 s) would have given")
                    .isEqualTo(503);
            assertProblem(waited, "idempotency-store-unavailable");
            other.rollback();
        }
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
        assertThat(post("/orders", key, body).statusCode()).isEqualTo(201);
    }

    @Test
    void aStatementTimeoutWhileTheAnswerIsStoredIsAFailedCommitThatKeptNothing() throws Exception {
        String key = COMPLETE_PREFIX + UUID.randomUUID();
        String note = "timeout-complete-" + key;
        String body = "{\"note\":\"" + note + "\"}";
        HttpResponse<byte[]> failed;
        try (Connection holder = DriverManager.getConnection(DATABASE.url(), DATABASE.user(), DATABASE.password());
             Statement statement = holder.createStatement()) {
            statement.execute("select pg_advisory_lock(hashtext('" + key + "'))");
            // the statement storing the answer waits, and is cancelled
            failed = sentWithSetting("statement_timeout", "1s", "0", () -> post("/orders", key, body));
            statement.execute("select pg_advisory_unlock_all()");
        }

        assertThat(failed.statusCode()).isEqualTo(500);
        assertProblem(failed, "idempotency-commit-failed");
        assertThat(new String(failed.body(), StandardCharsets.UTF_8)).contains("none were kept");
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
        HttpResponse<byte[]> retry = post("/orders", key, body);
        assertThat(retry.statusCode()).isEqualTo(201);
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(rows(note)).isEqualTo(1);
    }

    /**
     * Sends {@code call} while the application's only connection has {@code name} set to {@code value}, and sets it to
     * {@code reset} after, whatever the call did.
     */
    private HttpResponse<byte[]> sentWithSetting(String name, String value, String reset, Call call) throws Exception {
        setOnThePoolsConnection(name, value);
        try {
            return call.send();
        } finally {
            setOnThePoolsConnection(name, reset);
        }
    }

    /** Sets {@code name} for the session of the application's only connection, as a connection-init-sql would. */
    private void setOnThePoolsConnection(String name, String value) throws SQLException {
        try (Connection connection = dataSource.getConnection();
             Statement statement = connection.createStatement()) {
            statement.execute("select set_config('" + name + "', '" + value + "', false)");
        }
    }

    interface Call {
        HttpResponse<byte[]> send() throws Exception;
    }

    private static CompletableFuture<HttpResponse<byte[]>> async(Call call) {
        return Async.supply(() -> {
            try {
                return call.send();
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
    }
}
