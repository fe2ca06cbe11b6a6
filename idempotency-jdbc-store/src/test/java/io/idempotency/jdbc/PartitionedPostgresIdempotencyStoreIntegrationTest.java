package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.core.Transactions;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.AfterAll;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;

import javax.sql.DataSource;
import java.time.Duration;

/** The partitioned PostgreSQL store against the whole store contract. */
class PartitionedPostgresIdempotencyStoreIntegrationTest extends PostgresStoreContract {

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

    @Override
    protected IdempotencyStore store() {
        return STORE;
    }

    @Override
    protected DataSource dataSource() {
        return DATA_SOURCE;
    }

    @Override
    protected IdempotencyStore storeOn(DataSource dataSource) {
        return new PartitionedPostgresIdempotencyStore(dataSource, IdempotencySchema.DEFAULT_TABLE_NAME);
    }

    @Override
    protected int statementsOfAFirstClaim() {
        return 2;
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
