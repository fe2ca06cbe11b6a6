package io.idempotency.mariadb;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIf;
import org.springframework.jdbc.core.JdbcTemplate;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The MariaDB store against the whole store contract on a pool whose driver prepares each statement on the server
 * ({@code useServerPrepStmts=true}, a common tuning): the claim's {@code SET STATEMENT … FOR} insert with
 * {@code RETURNING}, and every other statement, then travel in the binary protocol.
 */
@EnabledIf("io.idempotency.mariadb.TestMariaDb#available")
class MariaDbServerPreparedStatementsIntegrationTest extends MariaDbStoreContract {

    private static OwnDatabase DATABASE;

    @BeforeAll
    static void makeDatabase() {
        TestMariaDb.Database database = TestMariaDb.newDatabase();
        DATABASE = OwnDatabase.create(database.dataSource(MIN_POOL_SIZE + 4, config -> config.setJdbcUrl(
                database.url() + (database.url().contains("?") ? "&" : "?")
                        + "useServerPrepStmts=true&cachePrepStmts=true")));
        DATABASE.store().checkTable();
    }

    @AfterAll
    static void closePool() {
        OwnDatabase.close(DATABASE);
    }

    @Override
    protected OwnDatabase database() {
        return DATABASE;
    }

    /** The pool's connections prepare on the server: a statement with a parameter counts as one prepared there. */
    @Test
    void theStatementsArePreparedOnTheServer() {
        JdbcTemplate jdbc = new JdbcTemplate(pool());
        assertThat(jdbc.queryForObject("SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS"
                + " WHERE VARIABLE_NAME = ?", Long.class, "COM_STMT_PREPARE")).isPositive();
    }
}
