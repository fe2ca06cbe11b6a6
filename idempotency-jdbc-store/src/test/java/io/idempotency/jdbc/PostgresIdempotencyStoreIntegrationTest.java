package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.core.Transactions;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.IdempotencyStoreContract;
import io.idempotency.testkit.TestPostgres;
import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.transaction.support.TransactionTemplate;

import java.time.Duration;

import static org.assertj.core.api.Assertions.assertThat;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;

/** The PostgreSQL store against the whole store contract, on a schema created by the shipped migration. */
class PostgresIdempotencyStoreIntegrationTest extends IdempotencyStoreContract {

    private static final HikariDataSource DATA_SOURCE = TestPostgres.newDatabase().dataSource(MIN_POOL_SIZE + 4);
    private static final IdempotencyStore STORE;
    private static final Transactions TRANSACTIONS = new SpringTransactions(new DataSourceTransactionManager(DATA_SOURCE));

    static {
        new IdempotencySchemaMigrator(DATA_SOURCE, IdempotencySchema.DEFAULT_TABLE_NAME).migrate();
        STORE = new PostgresIdempotencyStore(DATA_SOURCE, IdempotencySchema.DEFAULT_TABLE_NAME);
    }

    @AfterAll
    static void closePool() {
        DATA_SOURCE.close();
    }

    /** The bounded wait of the claim must not leak into the handler's statements. */
    @Test
    void theClaimRestoresTheLockTimeoutTheHandlerRunsWith() {
        JdbcTemplate jdbc = new JdbcTemplate(DATA_SOURCE);
        String during = new TransactionTemplate(new DataSourceTransactionManager(DATA_SOURCE)).execute(status -> {
            jdbc.execute("SET LOCAL lock_timeout = '7s'");
            assertThat(STORE.claim(new ClaimRequest(newKey(), "d".repeat(64), Duration.ofDays(1),
                    Duration.ofMillis(100)))).isInstanceOf(ClaimResult.Claimed.class);
            return jdbc.queryForObject("SHOW lock_timeout", String.class);
        });
        assertThat(during).isEqualTo("7s");
    }

    @Override
    protected IdempotencyStore store() {
        return STORE;
    }

    @Override
    protected Transactions transactions() {
        return TRANSACTIONS;
    }
}
