package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.DownstreamKeys;
import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StaleClaimSweeper;
import io.idempotency.core.StoragePolicy;
import io.idempotency.core.StoredResponse;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.Async;
import io.idempotency.testkit.Await;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.transaction.TransactionDefinition;
import org.springframework.transaction.support.TransactionTemplate;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Pools are often configured not to auto-commit. The store's writes made outside a transaction (lease renewal,
 * take-over, fail, complete by a resolver, cleanup) must still persist: the pool rolls back whatever a connection
 * left uncommitted when it comes back. Each check reads the table on a connection of its own.
 */
class NonAutoCommitPoolIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();
    private static final HikariDataSource POOL = pool();
    private static final PostgresIdempotencyStore STORE;

    static {
        new IdempotencySchemaMigrator(POOL, IdempotencySchema.DEFAULT_TABLE_NAME).migrate();
        STORE = new PostgresIdempotencyStore(POOL, IdempotencySchema.DEFAULT_TABLE_NAME);
    }

    private static HikariDataSource pool() {
        HikariConfig config = new HikariConfig();
        config.setJdbcUrl(DATABASE.url());
        config.setUsername(DATABASE.user());
        config.setPassword(DATABASE.password());
        config.setMaximumPoolSize(2);
        config.setAutoCommit(false);
        return new HikariDataSource(config);
    }

    @AfterAll
    static void closePool() {
        POOL.close();
    }

    @Test
    void writesOutsideATransactionPersist() {
        ScopedKey renewed = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
        String token = leasedClaim(renewed);
        assertThat(STORE.renew(renewed, token, Duration.ofHours(1))).isTrue();
        assertThat(DATABASE.queryString("select locked_until > now() + interval '30 minutes' from idempotency_keys"
                + " where idempotency_key = '" + renewed.key() + "'")).as("renewed lease").isEqualTo("t");
        assertThat(STORE.fail(renewed, token)).isTrue();
        assertThat(status(renewed)).isEqualTo("FAILED");

        ScopedKey completed = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
        String second = leasedClaim(completed);
        assertThat(STORE.complete(completed, second, new StoredResponse(201, List.of(),
                "{}".getBytes(StandardCharsets.UTF_8)))).isTrue();
        assertThat(status(completed)).isEqualTo("SUCCEEDED");

        ScopedKey released = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
        assertThat(STORE.release(released, leasedClaim(released))).isTrue();
        assertThat(DATABASE.queryLong("select count(*) from idempotency_keys where idempotency_key = '"
                + released.key() + "'")).isZero();

        DATABASE.queryString("update idempotency_keys set expires_at = now() - interval '1 second'"
                + " where idempotency_key = '" + completed.key() + "'");
        assertThat(STORE.deleteExpired(100)).isEqualTo(1);
        assertThat(DATABASE.queryLong("select count(*) from idempotency_keys where idempotency_key = '"
                + completed.key() + "'")).as("cleaned up").isZero();
    }

    /**
     * A write made while a transaction of another DataSource is open on the thread (a resolver's own transaction on
     * the application's other database) holds no connection of the store's: the write commits on its own all the same.
     */
    @Test
    void writesInATransactionOfAnotherDataSourcePersist() {
        ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
        String token = leasedClaim(key);
        try (HikariDataSource otherPool = TestPostgres.newDatabase().dataSource(1)) {
            new TransactionTemplate(new DataSourceTransactionManager(otherPool)).executeWithoutResult(status -> {
                new JdbcTemplate(otherPool).execute("SELECT 1"); // the other transaction holds its connection
                assertThat(STORE.fail(key, token)).isTrue();
            });
        }
        assertThat(status(key)).isEqualTo("FAILED");
    }

    /**
     * A scope with no transaction ({@code @Transactional(propagation = SUPPORTS)}, a {@code TransactionTemplate} of that
     * propagation) binds the connection it takes to the thread for as long as it lasts, and never commits it. A write
     * the store makes there, reported done, must still persist once the scope has ended.
     */
    @Test
    void writesInAScopeWithoutATransactionPersist() {
        ScopedKey failed = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
        String failedToken = leasedClaim(failed);
        ScopedKey released = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
        String releasedToken = leasedClaim(released);
        TransactionTemplate supports = new TransactionTemplate(new DataSourceTransactionManager(POOL));
        supports.setPropagationBehavior(TransactionDefinition.PROPAGATION_SUPPORTS);
        supports.executeWithoutResult(status -> {
            new JdbcTemplate(POOL).queryForObject("SELECT 1", Integer.class); // the scope holds a connection now
            assertThat(STORE.fail(failed, failedToken)).isTrue();
            assertThat(STORE.release(released, releasedToken)).isTrue();
        });
        assertThat(status(failed)).as("marked FAILED").isEqualTo("FAILED");
        assertThat(DATABASE.queryLong("select count(*) from idempotency_keys where idempotency_key = '"
                + released.key() + "'")).as("released").isZero();
    }

    /**
     * A claim made with no transaction open commits before it returns, as the writes do: on a pool that does not
     * auto-commit, the claim would otherwise be rolled back when its connection goes back, and the next request with
     * the key would claim it too.
     */
    @Test
    void aClaimOutsideATransactionPersists() {
        ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
        ClaimRequest claim = new ClaimRequest(key, "e".repeat(64), Duration.ofDays(1), Duration.ofSeconds(1),
                Duration.ofSeconds(30));
        assertThat(STORE.claim(claim)).isInstanceOf(ClaimResult.Claimed.class);
        assertThat(status(key)).as("the claim, committed").isEqualTo("PROCESSING");
        assertThat(STORE.claim(claim)).as("the key claimed again").isInstanceOf(ClaimResult.Existing.class);
    }

    /**
     * An intent-first claim's lease is renewed in the background while its handler works, each renewal in a transaction
     * of its own: on a pool that does not auto-commit, a renewal left to the connection would be rolled back when the
     * connection goes back, the lease would run out under a live handler, and another instance's retry (or its sweeper)
     * would take the claim over and run the handler a second time. Here the claim outlives its first lease: another
     * instance's retry is told it is in progress, the sweeper finds nothing stale, and the holder's answer is stored.
     */
    @Test
    void aLeaseRenewedWhileItsHandlerWorksKeepsAnotherInstanceOut() throws Exception {
        ScopedKey key = new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
        Duration lease = Duration.ofSeconds(3);
        try (HikariDataSource pool = DATABASE.dataSource(4, config -> config.setAutoCommit(false))) {
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(pool, IdempotencySchema.DEFAULT_TABLE_NAME);
            IdempotencyEngine holder = engine(store, pool);
            IdempotencyEngine other = engine(store, pool); // another instance
            IdempotencyEngine.Execution execution = ((IdempotencyEngine.Proceed) holder.start(key, "e".repeat(64),
                    IdempotencyMode.INTENT_FIRST, lease)).execution();
            try {
                String firstLeaseEnd = DATABASE.queryString("select locked_until from idempotency_keys"
                        + " where idempotency_key = '" + key.key() + "'");
                Await.until("the claim's first lease has run out on the database's clock", Duration.ofSeconds(30),
                        () -> "t".equals(DATABASE.queryString("select now() > '" + firstLeaseEnd + "'::timestamptz")));

                assertThat(DATABASE.queryString("select locked_until > now() from idempotency_keys"
                        + " where idempotency_key = '" + key.key() + "'")).as("the lease, renewed").isEqualTo("t");
                IdempotencyEngine.Start retry = Async.supply(() -> {
                    IdempotencyEngine.Start start = other.start(key, "e".repeat(64), IdempotencyMode.INTENT_FIRST,
                            lease);
                    if (start instanceof IdempotencyEngine.Proceed proceed) {
                        proceed.execution().abandon();
                    }
                    return start;
                }).get(30, TimeUnit.SECONDS);
                assertThat(retry).as("another instance's retry").isInstanceOf(IdempotencyEngine.InProgress.class);
                assertThat(new StaleClaimSweeper(store, StaleClaimResolver.RERUN, new DownstreamKeys("secret"), lease,
                        10).sweep().found()).as("stale claims").isZero();
                assertThat(execution.finish(new StoredResponse(201, List.of(), null)))
                        .isEqualTo(IdempotencyEngine.Outcome.STORED);
            } finally {
                execution.abandon(); // after a failed assertion: nothing stays bound to the thread
                holder.shutdown();
                other.shutdown();
            }
        }
        assertThat(status(key)).isEqualTo("SUCCEEDED");
    }

    private static IdempotencyEngine engine(PostgresIdempotencyStore store, HikariDataSource pool) {
        return new IdempotencyEngine(store, new SpringTransactions(new DataSourceTransactionManager(pool)),
                StoragePolicy.DEFAULT, Duration.ofDays(1), Duration.ofMillis(300), StaleClaimResolver.RERUN,
                new DownstreamKeys("secret"));
    }

    /** A claim committed with a lease, as intent-first mode makes it; returns its fencing token. */
    private static String leasedClaim(ScopedKey key) {
        ClaimResult claim = new TransactionTemplate(new DataSourceTransactionManager(POOL)).execute(status ->
                STORE.claim(new ClaimRequest(key, "e".repeat(64), Duration.ofDays(1), Duration.ofSeconds(1),
                        Duration.ofSeconds(30))));
        assertThat(claim).isInstanceOf(ClaimResult.Claimed.class);
        return ((ClaimResult.Claimed) claim).fencingToken();
    }

    private static String status(ScopedKey key) {
        return DATABASE.queryString("select status from idempotency_keys where idempotency_key = '" + key.key() + "'");
    }
}
