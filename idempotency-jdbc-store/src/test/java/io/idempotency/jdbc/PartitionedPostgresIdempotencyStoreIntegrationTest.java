package io.idempotency.jdbc;

import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import org.junit.jupiter.api.AfterAll;

import java.time.Duration;

/** The partitioned PostgreSQL store against the whole store contract. */
class PartitionedPostgresIdempotencyStoreIntegrationTest extends PostgresStoreContract {

    private static final OwnDatabase DATABASE = OwnDatabase.create(dataSource -> {
        new IdempotencySchemaMigrator(dataSource, IdempotencySchema.DEFAULT_TABLE_NAME, true).migrate();
        new PostgresPartitionMaintenance(dataSource, IdempotencySchema.DEFAULT_TABLE_NAME, Duration.ofHours(1), 3,
                Duration.ofSeconds(5)).run(Duration.ofDays(30));
    }, dataSource -> new PartitionedPostgresIdempotencyStore(dataSource, IdempotencySchema.DEFAULT_TABLE_NAME));

    @AfterAll
    static void closePool() {
        DATABASE.pool().close();
    }

    @Override
    protected OwnDatabase database() {
        return DATABASE;
    }

    @Override
    protected int statementsOfAFirstClaim() {
        return 2;
    }
}
