package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.DownstreamKeys;
import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StoragePolicy;
import io.idempotency.core.StoredResponse;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;

import java.time.Duration;
import java.util.List;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * What PostgreSQL sees of a request's transaction while its handler works, which decides what
 * {@code idle_in_transaction_session_timeout} bounds (docs/how-it-works.md, "Crash windows"; docs/side-effects.md,
 * "Configuration"). In the default mode the claim is the transaction's first statement: the session is in a
 * transaction, holding the key, from before the handler runs. In intent-first mode the claim is committed before
 * the handler runs, and the handler's own transaction holds its pooled connection while PostgreSQL sees no open
 * transaction until the handler's first statement: an external call made before it is no idle transaction.
 */
@Tag("engine")
class OpenTransactionsDuringTheWorkIntegrationTest {

    private static final String HASH = "5".repeat(64);

    @ParameterizedTest(name = "pool at READ COMMITTED already: {0}")
    @ValueSource(booleans = {true, false})
    void anIntentFirstHandlersTransactionOpensAtItsFirstStatementADefaultModeOneAtTheClaim(boolean readCommitted)
            throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource pool = database.dataSource(3)) {
            new IdempotencySchemaMigrator(pool, IdempotencySchema.DEFAULT_TABLE_NAME).migrate();
            new JdbcTemplate(pool).execute("create table effects (id bigserial primary key)");
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(pool, IdempotencySchema.DEFAULT_TABLE_NAME);
            IdempotencyEngine engine = new IdempotencyEngine(store,
                    new SpringTransactions(new DataSourceTransactionManager(pool), readCommitted),
                    StoragePolicy.DEFAULT, Duration.ofDays(1), Duration.ofSeconds(1), StaleClaimResolver.RERUN,
                    new DownstreamKeys("secret"));
            try {
                IdempotencyEngine.Execution intent = proceed(engine.start(newKey(), HASH, IdempotencyMode.INTENT_FIRST,
                        Duration.ofSeconds(30)));
                assertThat(idleInTransaction(database)).as("intent committed, handler not yet at a statement")
                        .isZero();
                new JdbcTemplate(pool).update("insert into effects default values");
                assertThat(idleInTransaction(database)).as("the handler's first write opened it").isOne();
                intent.finish(new StoredResponse(201, List.of(), null));
                assertThat(idleInTransaction(database)).isZero();

                IdempotencyEngine.Execution claim = proceed(engine.start(newKey(), HASH));
                assertThat(idleInTransaction(database)).as("the default mode's claim, uncommitted").isOne();
                claim.finish(new StoredResponse(201, List.of(), null));
                assertThat(idleInTransaction(database)).isZero();
            } finally {
                engine.shutdown();
            }
        }
    }

    private static IdempotencyEngine.Execution proceed(IdempotencyEngine.Start start) {
        assertThat(start).isInstanceOf(IdempotencyEngine.Proceed.class);
        return ((IdempotencyEngine.Proceed) start).execution();
    }

    private static ScopedKey newKey() {
        return new ScopedKey("", "POST /charges", UUID.randomUUID().toString());
    }

    /** Sessions of this test's database that are in a transaction and waiting for their client. */
    private static long idleInTransaction(TestPostgres.Database database) {
        return database.queryLong("select count(*) from pg_stat_activity where application_name = '"
                + database.schema() + "' and state = 'idle in transaction'");
    }
}
