package io.idempotency.mariadb;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.core.Transactions;
import io.idempotency.jdbc.SpringTransactions;
import io.idempotency.testkit.IdempotencyStoreContract;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIf;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The MariaDB store against the whole store contract on a pool whose driver prepares each statement on the server
 * ({@code useServerPrepStmts=true}, a common tuning): the claim's {@code SET STATEMENT … FOR} insert with
 * {@code RETURNING}, and every other statement, then travel in the binary protocol.
 */
@EnabledIf("io.idempotency.mariadb.TestMariaDb#available")
class MariaDbServerPreparedStatementsIntegrationTest extends IdempotencyStoreContract {

    private static HikariDataSource DATA_SOURCE;
    private static IdempotencyStore STORE;
    private static Transactions TRANSACTIONS;

    @BeforeAll
    static void database() {
        TestMariaDb.Database database = TestMariaDb.newDatabase();
        DATA_SOURCE = database.dataSource(MIN_POOL_SIZE + 4, config -> config.setJdbcUrl(database.url()
                + (database.url().contains("?") ? "&" : "?") + "useServerPrepStmts=true&cachePrepStmts=true"));
        new JdbcTemplate(DATA_SOURCE).execute(MariaDbIdempotencyStore.schema("idempotency_keys"));
        MariaDbIdempotencyStore store = new MariaDbIdempotencyStore(DATA_SOURCE, "idempotency_keys");
        store.checkTable();
        STORE = store;
        TRANSACTIONS = new SpringTransactions(new DataSourceTransactionManager(DATA_SOURCE));
    }

    @AfterAll
    static void closePool() {
        if (DATA_SOURCE != null) {
            DATA_SOURCE.close();
        }
    }

    @Override
    protected IdempotencyStore store() {
        return STORE;
    }

    @Override
    protected Transactions transactions() {
        return TRANSACTIONS;
    }

    /** The pool's connections prepare on the server: a statement with a parameter counts as one prepared there. */
    @Test
    void theStatementsArePreparedOnTheServer() {
        JdbcTemplate jdbc = new JdbcTemplate(DATA_SOURCE);
        assertThat(jdbc.queryForObject("SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS"
                + " WHERE VARIABLE_NAME = ?", Long.class, "COM_STMT_PREPARE")).isPositive();
    }
}
