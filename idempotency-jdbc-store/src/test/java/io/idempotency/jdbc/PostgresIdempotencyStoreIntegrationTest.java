package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ScopedKey;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.transaction.TransactionDefinition;
import org.springframework.transaction.support.TransactionTemplate;

import java.time.Duration;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;

/** The PostgreSQL store against the whole store contract, on a schema created by the shipped migration. */
class PostgresIdempotencyStoreIntegrationTest extends PostgresStoreContract {

    private static final OwnDatabase DATABASE = OwnDatabase.create(
            dataSource -> new IdempotencySchemaMigrator(dataSource, IdempotencySchema.DEFAULT_TABLE_NAME).migrate(),
            dataSource -> new PostgresIdempotencyStore(dataSource, IdempotencySchema.DEFAULT_TABLE_NAME));

    @AfterAll
    static void closePool() {
        DATABASE.pool().close();
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

    @Override
    protected OwnDatabase database() {
        return DATABASE;
    }

    @Override
    protected int statementsOfAFirstClaim() {
        return 1;
    }
}
