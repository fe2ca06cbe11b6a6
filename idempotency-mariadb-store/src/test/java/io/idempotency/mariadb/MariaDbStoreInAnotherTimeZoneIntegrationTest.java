package io.idempotency.mariadb;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.core.Transactions;
import io.idempotency.jdbc.SpringTransactions;
import io.idempotency.testkit.IdempotencyStoreContract;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The store contract on connections whose session time zone is twelve hours behind UTC. The table holds UTC times,
 * written and compared on the database's UTC clock ({@code UTC_TIMESTAMP(6)}) in every statement: one that read the
 * session's local time instead ({@code NOW()}) would keep expired records and ended leases for twelve hours more,
 * which a server whose time zone is UTC (where {@code NOW()} and {@code UTC_TIMESTAMP()} agree) never shows.
 */
class MariaDbStoreInAnotherTimeZoneIntegrationTest extends IdempotencyStoreContract {

    private static final String SESSION_TIME_ZONE = "-12:00";

    private static HikariDataSource DATA_SOURCE;
    private static IdempotencyStore STORE;
    private static Transactions TRANSACTIONS;

    @BeforeAll
    static void database() {
        DATA_SOURCE = TestMariaDb.newDatabase().dataSource(MIN_POOL_SIZE + 4,
                config -> config.setConnectionInitSql("SET time_zone = '" + SESSION_TIME_ZONE + "'"));
        new JdbcTemplate(DATA_SOURCE).execute(MariaDbIdempotencyStore.schema("idempotency_keys"));
        STORE = new MariaDbIdempotencyStore(DATA_SOURCE, "idempotency_keys");
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

    @Test
    void theSessionsRunTwelveHoursBehindUtc() {
        Long hours = new JdbcTemplate(DATA_SOURCE).queryForObject(
                "SELECT TIMESTAMPDIFF(HOUR, UTC_TIMESTAMP(6), NOW(6)) + 0", Long.class);
        assertThat(hours).isEqualTo(-12);
    }
}
