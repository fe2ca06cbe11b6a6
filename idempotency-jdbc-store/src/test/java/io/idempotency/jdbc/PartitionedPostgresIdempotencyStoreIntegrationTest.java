package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.Transactions;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.IdempotencyStoreContract;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.transaction.support.TransactionTemplate;

import java.time.Duration;

import static org.assertj.core.api.Assertions.assertThat;

/** The partitioned PostgreSQL store against the whole store contract. */
class PartitionedPostgresIdempotencyStoreIntegrationTest extends IdempotencyStoreContract {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();
    private static final HikariDataSource DATA_SOURCE = DATABASE.dataSource(MIN_POOL_SIZE + 4);
    private static final IdempotencyStore STORE;
    private static final Transactions TRANSACTIONS = new SpringTransactions(new DataSourceTransactionManager(DATA_SOURCE));

    static {
        new IdempotencySchemaMigrator(DATA_SOURCE, IdempotencySchema.DEFAULT_TABLE_NAME, true).migrate();
        new PostgresPartitionMaintenance(DATA_SOURCE, IdempotencySchema.DEFAULT_TABLE_NAME, Duration.ofHours(1), 3,
                Duration.ofSeconds(5)).run(Duration.ofDays(30));
        STORE = new PartitionedPostgresIdempotencyStore(DATA_SOURCE, IdempotencySchema.DEFAULT_TABLE_NAME);
    }

    @AfterAll
    static void closePool() {
        DATA_SOURCE.close();
    }

    /**
     * The bounded wait of the claim must not leak into the handler's statements: neither when the claim inserts, nor
     * when it takes a FAILED record over (the handler then runs in that transaction).
     */
    @Test
    void theClaimRestoresTheLockTimeoutTheHandlerRunsWith() {
        ScopedKey key = newKey();
        ClaimResult first = lockTimeoutAfterClaiming(key);
        assertThat(first).isInstanceOf(ClaimResult.Claimed.class);
        new TransactionTemplate(new DataSourceTransactionManager(DATA_SOURCE)).executeWithoutResult(status ->
                assertThat(STORE.fail(key, ((ClaimResult.Claimed) first).fencingToken())).isTrue());
        assertThat(lockTimeoutAfterClaiming(key)).as("a FAILED record taken over")
                .isInstanceOf(ClaimResult.Claimed.class);
    }

    /** Claims {@code key} in a transaction whose lock_timeout is 7s, and checks it is 7s again after the claim. */
    private static ClaimResult lockTimeoutAfterClaiming(ScopedKey key) {
        JdbcTemplate jdbc = new JdbcTemplate(DATA_SOURCE);
        return new TransactionTemplate(new DataSourceTransactionManager(DATA_SOURCE)).execute(status -> {
            jdbc.execute("SET LOCAL lock_timeout = '7s'");
            ClaimResult result = STORE.claim(new ClaimRequest(key, "d".repeat(64), Duration.ofDays(1),
                    Duration.ofMillis(100)));
            assertThat(jdbc.queryForObject("SHOW lock_timeout", String.class)).isEqualTo("7s");
            return result;
        });
    }

    @Override
    protected IdempotencyStore store() {
        return STORE;
    }

    @Override
    protected Transactions transactions() {
        return TRANSACTIONS;
    }

    @Override
    protected void awaitBlockedClaim() throws InterruptedException {
        DATABASE.awaitLockWaiter(Duration.ofSeconds(30));
    }
}
