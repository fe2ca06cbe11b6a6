package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.DownstreamKeys;
import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StoragePolicy;
import io.idempotency.core.StoredResponse;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.Async;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.transaction.TransactionDefinition;
import org.springframework.transaction.support.TransactionTemplate;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A pool whose connections default to REPEATABLE READ, a setting payment applications choose. The claim asks for READ
 * COMMITTED in the transaction it runs in; the writes the store commits on its own (taking a stale claim over, marking
 * it FAILED, releasing it, renewing its lease) do too. At REPEATABLE READ such a write whose row another instance
 * changed while it waited for the row lock fails with "could not serialize access due to concurrent update" instead of
 * finding that its token no longer holds the claim: the loser of two retries taking one stale claim over would get an
 * error (a 503) instead of "someone else has it" (a 409), and a holder whose claim was taken over would fail with an
 * error instead of learning that it lost its lease. (A takeover does not wait for such a row: it leaves it as it is.)
 */
class RepeatableReadPoolIntegrationTest {

    private static final String HASH = "a".repeat(64);

    private static TestPostgres.Database database;
    private static HikariDataSource pool;
    private static PostgresIdempotencyStore store;
    private static JdbcTemplate jdbc;

    @BeforeAll
    static void start() {
        database = TestPostgres.newDatabase();
        pool = database.dataSource(4, config -> config.setTransactionIsolation("TRANSACTION_REPEATABLE_READ"));
        new IdempotencySchemaMigrator(pool, "idempotency_keys").migrate();
        store = new PostgresIdempotencyStore(pool, "idempotency_keys");
        jdbc = new JdbcTemplate(pool);
    }

    @AfterAll
    static void stop() {
        pool.close();
    }

    /**
     * A takeover does not wait for a row another transaction is changing, so it never meets the other instance's
     * change after its own snapshot: it finds the claim not to be taken, with no error, while the other instance's
     * takeover is open and after it committed.
     */
    @Test
    void aTakeOverThatAnotherInstanceIsMakingFindsTheClaimTaken() throws Exception {
        ScopedKey key = newKey();
        String stale = staleClaim(key);

        try (Connection other = anotherInstancesTakeover(key, stale)) {
            assertThat(Async.supply(() -> store.takeOver(key, stale, Duration.ofSeconds(30))).get(10, TimeUnit.SECONDS))
                    .as("the other instance is taking the claim over").isEmpty();
            other.commit();
        }
        assertThat(store.takeOver(key, stale, Duration.ofSeconds(30))).as("the other instance holds the claim now")
                .isEmpty();
        assertThat(jdbc.queryForObject("show transaction_isolation", String.class))
                .as("the pool's own default is left as it was").isEqualTo("repeatable read");
    }

    @Test
    void aHolderWhoseClaimWasTakenOverWhileItsWriteWaitedLearnsThatItLostIt() throws Exception {
        ScopedKey failing = newKey();
        String failingToken = staleClaim(failing);
        assertThat(whileAnotherInstanceTakesItOver(failing, failingToken, () -> store.fail(failing, failingToken)))
                .as("marking FAILED a claim another holds").isFalse();

        ScopedKey renewing = newKey();
        String renewingToken = staleClaim(renewing);
        assertThat(whileAnotherInstanceTakesItOver(renewing, renewingToken,
                () -> store.renew(renewing, renewingToken, Duration.ofSeconds(30))))
                .as("renewing a claim another holds").isFalse();

        ScopedKey releasing = newKey();
        String releasingToken = staleClaim(releasing);
        assertThat(whileAnotherInstanceTakesItOver(releasing, releasingToken,
                () -> store.release(releasing, releasingToken)))
                .as("releasing a claim another holds").isFalse();
    }

    /**
     * A claim made with no transaction open runs at READ COMMITTED, like the store's other writes of its own: run at
     * the pool's REPEATABLE READ, it would be refused after its insert had already committed, leaving a claim without
     * a lease that nothing ever resolves, finishes or removes.
     */
    @Test
    void aClaimOutsideATransactionClaimsAtReadCommitted() {
        ScopedKey key = newKey();
        ClaimResult result = store.claim(new ClaimRequest(key, HASH, Duration.ofDays(1), Duration.ofSeconds(5)));
        assertThat(result).isInstanceOf(ClaimResult.Claimed.class);
        assertThat(store.complete(key, ((ClaimResult.Claimed) result).fencingToken(),
                new StoredResponse(201, List.of(), "done".getBytes()))).isTrue();
        assertThat(store.find(key)).map(record -> record.status().name()).hasValue("SUCCEEDED");
    }

    /**
     * The engine on the pool's transaction manager, as the starter sets it up for a pool that does not default to
     * READ COMMITTED: its transactions ask for READ COMMITTED, so requests are claimed, answered and replayed, in one
     * transaction and intent-first, and a retry takes a stale claim over and runs. Were its transactions left at the
     * pool's REPEATABLE READ, every claim would be refused (a concurrent claim would fail with a serialization error
     * instead of waiting for the other's outcome).
     */
    @Test
    void theEngineClaimsCompletesAndTakesOverOnARepeatableReadPool() {
        IdempotencyEngine engine = new IdempotencyEngine(store,
                new SpringTransactions(new DataSourceTransactionManager(pool)), StoragePolicy.DEFAULT,
                Duration.ofDays(1), Duration.ofSeconds(1), StaleClaimResolver.RERUN, new DownstreamKeys("secret"));
        try {
            for (IdempotencyMode mode : IdempotencyMode.values()) {
                ScopedKey key = newKey();
                IdempotencyEngine.Start first = engine.start(key, HASH, mode, Duration.ofMinutes(1));
                assertThat(first).as("the first request, %s", mode).isInstanceOf(IdempotencyEngine.Proceed.class);
                assertThat(((IdempotencyEngine.Proceed) first).execution().finish(answer()))
                        .isEqualTo(IdempotencyEngine.Outcome.STORED);
                assertThat(engine.start(key, HASH, mode, Duration.ofMinutes(1))).as("its retry, %s", mode)
                        .isEqualTo(new IdempotencyEngine.Replay(answer()));
            }

            ScopedKey key = newKey();
            IdempotencyEngine.Start crashed = engine.start(key, HASH, IdempotencyMode.INTENT_FIRST,
                    Duration.ofMinutes(1));
            assertThat(crashed).isInstanceOf(IdempotencyEngine.Proceed.class);
            ((IdempotencyEngine.Proceed) crashed).execution().abandon(); // the outcome is unknown: the claim stays
            // and its lease runs out
            assertThat(jdbc.update("UPDATE idempotency_keys SET locked_until = now() - interval '1 second'"
                    + " WHERE caller = ? AND scope = ? AND idempotency_key = ?", key.caller(), key.scope(), key.key()))
                    .isEqualTo(1);
            IdempotencyEngine.Start retry = engine.start(key, HASH, IdempotencyMode.INTENT_FIRST,
                    Duration.ofMinutes(1));
            assertThat(retry).as("the retry of the stale claim").isInstanceOf(IdempotencyEngine.Proceed.class);
            assertThat(((IdempotencyEngine.Proceed) retry).execution().finish(answer()))
                    .isEqualTo(IdempotencyEngine.Outcome.STORED);
            assertThat(store.find(key)).map(record -> record.status().name()).hasValue("SUCCEEDED");
            assertThat(jdbc.queryForObject("show transaction_isolation", String.class))
                    .as("the pool's own default is left as it was").isEqualTo("repeatable read");
        } finally {
            engine.shutdown();
        }
    }

    private static StoredResponse answer() {
        return new StoredResponse(201, List.of(), "done".getBytes());
    }

    /** A committed intent-first claim of {@code key} whose lease has run out; its token. */
    private static String staleClaim(ScopedKey key) throws InterruptedException {
        TransactionTemplate claim = new TransactionTemplate(new DataSourceTransactionManager(pool));
        claim.setIsolationLevel(TransactionDefinition.ISOLATION_READ_COMMITTED);
        ClaimResult result = claim.execute(status -> store.claim(new ClaimRequest(key, HASH, Duration.ofDays(1),
                Duration.ofSeconds(5), Duration.ofMillis(20))));
        assertThat(result).isInstanceOf(ClaimResult.Claimed.class);
        Thread.sleep(60);
        return ((ClaimResult.Claimed) result).fencingToken();
    }

    /**
     * Runs {@code write} (a write of the store's own, with the claim's old token) while another instance's takeover of
     * {@code key} holds the row: the write waits for it, and the takeover commits once the write is seen waiting.
     */
    private static <T> T whileAnotherInstanceTakesItOver(ScopedKey key, String oldToken, WriteCall<T> write)
            throws Exception {
        try (Connection other = anotherInstancesTakeover(key, oldToken)) {
            CompletableFuture<T> waiting = Async.supply(write::call);
            database.awaitLockWaiter(Duration.ofSeconds(10));
            assertThat(waiting).as("the write waits for the takeover's row").isNotDone();
            other.commit();
            return waiting.get(10, TimeUnit.SECONDS);
        }
    }

    /**
     * A connection in which another instance took the claim of {@code key} over from {@code oldToken}, not committed
     * yet: its snapshot is taken before that of any write started after this returns.
     */
    private static Connection anotherInstancesTakeover(ScopedKey key, String oldToken) throws Exception {
        Connection other = pool.getConnection();
        try (PreparedStatement takeOver = other.prepareStatement("UPDATE idempotency_keys"
                + " SET fencing_token = ?::uuid, locked_until = now() + interval '30 seconds'"
                + " WHERE caller = ? AND scope = ? AND idempotency_key = ? AND fencing_token = ?::uuid")) {
            other.setAutoCommit(false);
            takeOver.setString(1, UUID.randomUUID().toString());
            takeOver.setString(2, key.caller());
            takeOver.setString(3, key.scope());
            takeOver.setString(4, key.key());
            takeOver.setString(5, oldToken);
            assertThat(takeOver.executeUpdate()).isEqualTo(1);
            return other;
        } catch (Exception | AssertionError e) {
            other.close();
            throw e;
        }
    }

    private static ScopedKey newKey() {
        return new ScopedKey("tester", "POST /repeatable-read", UUID.randomUUID().toString());
    }

    @FunctionalInterface
    private interface WriteCall<T> {
        T call();
    }
}
