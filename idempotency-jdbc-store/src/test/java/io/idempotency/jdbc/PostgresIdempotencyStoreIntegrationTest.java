package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.IdempotencyRecord;
import io.idempotency.core.RecordStatus;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.Transactions;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.transaction.TransactionDefinition;
import org.springframework.transaction.support.TransactionTemplate;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.jdbc.datasource.TransactionAwareDataSourceProxy;

/** The PostgreSQL store against the whole store contract, on a schema created by the shipped migration. */
class PostgresIdempotencyStoreIntegrationTest extends PostgresStoreContract {

    private static final OwnDatabase DATABASE = OwnDatabase.create(
            dataSource -> new IdempotencySchemaMigrator(dataSource, IdempotencySchema.DEFAULT_TABLE_NAME).migrate(),
            dataSource -> new PostgresIdempotencyStore(dataSource, IdempotencySchema.DEFAULT_TABLE_NAME));

    @AfterAll
    static void closePool() {
        DATABASE.pool().close();
    }

    /** A cap on stored bodies up to the largest body PostgreSQL can take is accepted, one byte more is refused. */
    @Test
    void aCapOnStoredBodiesIsAcceptedUpToTheLargestBodyPostgresqlTakes() {
        PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource(),
                IdempotencySchema.DEFAULT_TABLE_NAME);
        store.checkStoredBodySize(PostgresIdempotencyStore.MAX_STORED_BODY_SIZE);
        assertThatThrownBy(() -> store.checkStoredBodySize(PostgresIdempotencyStore.MAX_STORED_BODY_SIZE + 1))
                .isInstanceOf(IllegalStateException.class)
                .hasMessageContaining("bytes cannot be stored");
    }

    /**
     * A look-up made outside a transaction, on a connection of its own, that the database refuses fails as Spring's
     * translation of the error, as one made in a transaction through {@code JdbcTemplate} does.
     */
    @Test
    void aLookUpOutsideATransactionThatFailsIsTranslated() {
        PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource(), "no_such_table");
        assertThatThrownBy(() -> store.find(newKey()))
                .isInstanceOf(org.springframework.jdbc.BadSqlGrammarException.class)
                .hasMessageContaining("no_such_table");
    }

    /**
     * A transaction that holds no connection of the store's DataSource (another pool, here on the same database)
     * must not get a claim that commits on its own: the claim refuses, and writes nothing.
     */
    @Test
    void aClaimInATransactionOnAnotherDataSourceIsRefused() {
        ScopedKey key = newKey();
        try (HikariDataSource otherPool = DATABASE.postgres().dataSource(1)) {
            TransactionTemplate other = new TransactionTemplate(new DataSourceTransactionManager(otherPool));
            assertThatThrownBy(() -> other.executeWithoutResult(status -> {
                new JdbcTemplate(otherPool).execute("SELECT 1"); // the other transaction holds its connection
                store().claim(new ClaimRequest(key, "d".repeat(64), Duration.ofDays(1), Duration.ofMillis(100)));
            })).isInstanceOf(IllegalStateException.class)
                    .hasMessageContaining("holds no connection of the idempotency store's DataSource");
        }
        assertThat(store().find(key)).as("nothing was written for the refused claim").isEmpty();
    }

    /**
     * The takeover of a FAILED record is fenced by the token the claim saw, not only by the status: between the look-up
     * and the takeover, the record may have been removed (past its retention) and the key claimed by another request,
     * whose attempt failed too. That FAILED record is the other request's, which may have reached a third party under
     * the key: the retry must find it and be refused, not take it over because it is FAILED as well.
     */
    @Test
    void aFailedRecordReplacedByAnotherRequestsWhileTheRetryLookedIsNotTakenOver() throws Exception {
        ScopedKey key = newKey();
        String hashA = "a".repeat(64);
        String hashB = "b".repeat(64);
        String first = ((ClaimResult.Claimed) claimCommitted(key, hashA, Duration.ofDays(1))).fencingToken();
        assertThat(holds(store -> store.fail(key, first))).isTrue();
        ExecutorService other = Executors.newSingleThreadExecutor(); // its own transactions, apart from the retry's
        AtomicReference<String> replacing = new AtomicReference<>();
        PostgresIdempotencyStore retryStore = new PostgresIdempotencyStore(dataSource(),
                IdempotencySchema.DEFAULT_TABLE_NAME) {
            @Override
            protected ClaimRow claimOnce(ClaimRequest request, String token) {
                ClaimRow row = super.claimOnce(request, token);
                if (replacing.get() == null) {
                    try {
                        replacing.set(other.submit(() -> {
                            new JdbcTemplate(dataSource()).update("DELETE FROM " + IdempotencySchema.DEFAULT_TABLE_NAME
                                    + " WHERE caller = ? AND scope = ? AND idempotency_key = ?",
                                    key.caller(), key.scope(), key.key());
                            PostgresIdempotencyStoreIntegrationTest test = PostgresIdempotencyStoreIntegrationTest.this;
                            String token2 = ((ClaimResult.Claimed) test.claimCommitted(key, hashB,
                                    Duration.ofDays(1))).fencingToken();
                            assertThat(test.holds(store -> store.fail(key, token2))).isTrue();
                            return token2;
                        }).get(10, TimeUnit.SECONDS));
                    } catch (Exception e) {
                        throw new IllegalStateException(e);
                    }
                }
                return row;
            }
        };
        try {
            ClaimResult retry = retryStore.claim(new ClaimRequest(key, hashA, Duration.ofDays(1),
                    Duration.ofSeconds(5)));

            assertThat(replacing.get()).as("the record was replaced after the retry looked").isNotNull();
            assertThat(retry).isInstanceOf(ClaimResult.Existing.class);
            assertThat(((ClaimResult.Existing) retry).record().requestHash()).isEqualTo(hashB);
            IdempotencyRecord record = store().find(key).orElseThrow();
            assertThat(record.status()).isEqualTo(RecordStatus.FAILED);
            assertThat(record.requestHash()).as("still the other request's").isEqualTo(hashB);
            assertThat(record.fencingToken()).isEqualTo(replacing.get());
        } finally {
            other.shutdownNow();
        }
    }

    /**
     * A store made on a {@link TransactionAwareDataSourceProxy} of the pool works in the transactions of the pool's
     * transaction manager, which binds the connection under the pool: its claim joins them, and rolls back with them,
     * rather than being refused as a claim in a transaction of another DataSource.
     */
    @Test
    void aClaimOnAStoreMadeOnATransactionAwareProxyJoinsTheTransactionOfItsTarget() {
        ScopedKey key = newKey();
        PostgresIdempotencyStore proxied = new PostgresIdempotencyStore(
                new TransactionAwareDataSourceProxy(dataSource()), IdempotencySchema.DEFAULT_TABLE_NAME);
        new TransactionTemplate(new DataSourceTransactionManager(dataSource())).executeWithoutResult(status -> {
            assertThat(proxied.claim(new ClaimRequest(key, "d".repeat(64), Duration.ofDays(1),
                    Duration.ofMillis(100)))).isInstanceOf(ClaimResult.Claimed.class);
            status.setRollbackOnly();
        });
        assertThat(store().find(key)).as("the claim rolled back with the transaction it joined").isEmpty();
    }

    /**
     * At REPEATABLE READ a claim that waited for another transaction's claim of the key fails with a serialization
     * error instead of reading the record that transaction committed: the claim refuses to run there at all, and
     * what it wrote rolls back with the transaction.
     */
    @Test
    void aClaimAtRepeatableReadIsRefused() {
        TransactionTemplate repeatableRead = new TransactionTemplate(new DataSourceTransactionManager(dataSource()));
        repeatableRead.setIsolationLevel(TransactionDefinition.ISOLATION_REPEATABLE_READ);
        ScopedKey key = newKey();
        assertThatThrownBy(() -> repeatableRead.executeWithoutResult(status -> store().claim(new ClaimRequest(key,
                "c".repeat(64), Duration.ofDays(1), Duration.ofSeconds(1)))))
                .isInstanceOf(IllegalStateException.class).hasMessageContaining("must run at READ COMMITTED");
        assertThat(store().find(key)).isEmpty();
    }

    /**
     * The bounded wait covers the whole claim: a retry that waited most of it for another claim of the key, which then
     * failed, and finds the FAILED record being taken over by a third request, waits only for what is left, not for
     * a whole bounded wait again.
     */
    @Test
    void aTakeoverAfterAWaitForTheInsertWaitsOnlyForWhatIsLeft() throws Exception {
        ScopedKey key = newKey();
        String hash = "d".repeat(64);
        Duration maxWait = Duration.ofSeconds(6);
        AtomicReference<Connection> takingOver = new AtomicReference<>();
        // once the retry's insert has waited and it looks the committed record up, a third request holds that record
        PostgresIdempotencyStore retryStore = new PostgresIdempotencyStore(dataSource(),
                IdempotencySchema.DEFAULT_TABLE_NAME) {
            @Override
            public Optional<IdempotencyRecord> find(ScopedKey looked) {
                if (takingOver.get() == null) {
                    takingOver.set(lockRow(looked));
                }
                return super.find(looked);
            }
        };
        Transactions.Transaction holder = transactions().begin();
        ExecutorService executor = Executors.newSingleThreadExecutor();
        try {
            String token = ((ClaimResult.Claimed) store().claim(new ClaimRequest(key, hash, Duration.ofDays(1),
                    Duration.ofSeconds(5)))).fencingToken();
            long started = System.nanoTime();
            Future<ClaimResult> retry = executor.submit(() -> retryStore.claim(new ClaimRequest(key, hash,
                    Duration.ofDays(1), maxWait)));
            awaitBlockedClaim();
            // most of the retry's wait, counted from its start: a late look at the blocked claim does not add to it
            Thread.sleep(Math.max(0, 4000 - TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started)));
            assertThat(store().fail(key, token)).isTrue();
            holder.commit();

            assertThat(retry.get(30, TimeUnit.SECONDS)).isInstanceOf(ClaimResult.Busy.class);
            Duration waited = Duration.ofNanos(System.nanoTime() - started);
            assertThat(takingOver.get()).as("the record was held when the retry tried to take it over").isNotNull();
            assertThat(waited).as("the whole claim's wait").isLessThan(maxWait.plusMillis(1500));
        } finally {
            holder.rollback();
            executor.shutdownNow();
            if (takingOver.get() != null) {
                takingOver.get().rollback();
                takingOver.get().close();
            }
        }
    }

    /**
     * The bounded wait covers the whole claim when it looks again, too: a retry that waited most of it for another
     * claim of the key, whose record was then released, and that finds the key claimed by a third request, waits for
     * that one only for what is left. Waiting a whole bounded wait again, it would still be waiting when the third
     * request commits, and answer with its record instead of Busy.
     */
    @Test
    void aClaimThatLooksAgainWaitsOnlyForWhatIsLeft() throws Exception {
        ScopedKey key = newKey();
        String hash = "d".repeat(64);
        Duration maxWait = Duration.ofSeconds(4);
        ExecutorService third = Executors.newSingleThreadExecutor(); // keeps its transaction on its thread
        AtomicReference<Future<Transactions.Transaction>> thirdClaim = new AtomicReference<>();
        AtomicReference<String> holderToken = new AtomicReference<>();
        // once the retry's insert has waited and it looks the committed record up, the record is released and a third
        // request claims the key
        PostgresIdempotencyStore retryStore = new PostgresIdempotencyStore(dataSource(),
                IdempotencySchema.DEFAULT_TABLE_NAME) {
            @Override
            public Optional<IdempotencyRecord> find(ScopedKey looked) {
                if (thirdClaim.get() == null) {
                    try {
                        assertThat(third.submit(() -> store().release(looked, holderToken.get()))
                                .get(10, TimeUnit.SECONDS)).isTrue();
                        Future<Transactions.Transaction> claimed = third.submit(() -> {
                            Transactions.Transaction transaction = transactions().begin();
                            assertThat(store().claim(new ClaimRequest(looked, hash, Duration.ofDays(1),
                                    Duration.ofSeconds(5)))).isInstanceOf(ClaimResult.Claimed.class);
                            return transaction;
                        });
                        claimed.get(10, TimeUnit.SECONDS);
                        thirdClaim.set(claimed);
                    } catch (Exception e) {
                        throw new IllegalStateException(e);
                    }
                }
                return super.find(looked);
            }
        };
        Transactions.Transaction holder = transactions().begin();
        ExecutorService executor = Executors.newSingleThreadExecutor();
        try {
            holderToken.set(((ClaimResult.Claimed) store().claim(new ClaimRequest(key, hash, Duration.ofDays(1),
                    Duration.ofSeconds(5)))).fencingToken());
            Future<ClaimResult> retry = executor.submit(() -> retryStore.claim(new ClaimRequest(key, hash,
                    Duration.ofDays(1), maxWait)));
            awaitBlockedClaim();
            Thread.sleep(2000); // half of the retry's wait
            holder.commit();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (thirdClaim.get() == null) {
                assertThat(System.nanoTime() - deadline).as("the retry looked the record up").isNegative();
                Thread.sleep(10);
            }
            Thread.sleep(3000); // past what was left of the retry's wait, not past a whole one
            Transactions.Transaction thirdTransaction = thirdClaim.get().get();
            third.submit(() -> thirdTransaction.commit()).get(10, TimeUnit.SECONDS);

            assertThat(retry.get(30, TimeUnit.SECONDS)).isInstanceOf(ClaimResult.Busy.class);
        } finally {
            holder.rollback();
            executor.shutdownNow();
            if (thirdClaim.get() != null) {
                Transactions.Transaction thirdTransaction = thirdClaim.get().get();
                third.submit(() -> thirdTransaction.rollback()).get(10, TimeUnit.SECONDS);
            }
            third.shutdownNow();
        }
    }

    /** A connection whose open transaction holds the row of {@code key} locked. */
    private Connection lockRow(ScopedKey key) {
        try {
            Connection connection = dataSource().getConnection();
            connection.setAutoCommit(false);
            try (PreparedStatement statement = connection.prepareStatement("SELECT 1 FROM idempotency_keys"
                    + " WHERE caller = ? AND scope = ? AND idempotency_key = ? FOR UPDATE")) {
                statement.setString(1, key.caller());
                statement.setString(2, key.scope());
                statement.setString(3, key.key());
                try (ResultSet rs = statement.executeQuery()) {
                    assertThat(rs.next()).as("the record is there to lock").isTrue();
                }
            }
            return connection;
        } catch (SQLException e) {
            throw new IllegalStateException(e);
        }
    }

    @Override
    protected OwnDatabase database() {
        return DATABASE;
    }

    @Override
    protected int statementsOfAFirstClaim() {
        return 1;
    }
}
