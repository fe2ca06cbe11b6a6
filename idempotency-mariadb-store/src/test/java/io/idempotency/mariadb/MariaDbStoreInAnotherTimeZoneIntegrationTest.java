package io.idempotency.mariadb;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.springframework.jdbc.core.JdbcTemplate;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The store contract on connections whose session time zone is twelve hours behind UTC. The table holds UTC times,
 * written and compared on the database's UTC clock ({@code UTC_TIMESTAMP(6)}) in every statement: one that read the
 * session's local time instead ({@code NOW()}) would keep expired records and ended leases for twelve hours more,
 * which a server whose time zone is UTC (where {@code NOW()} and {@code UTC_TIMESTAMP()} agree) never shows.
 */
class MariaDbStoreInAnotherTimeZoneIntegrationTest extends MariaDbStoreContract {

    private static final String SESSION_TIME_ZONE = "-12:00";

    private static OwnDatabase DATABASE;

    @BeforeAll
    static void makeDatabase() {
        DATABASE = OwnDatabase.create(TestMariaDb.newDatabase().dataSource(MIN_POOL_SIZE + 4,
                config -> config.setConnectionInitSql("SET time_zone = '" + SESSION_TIME_ZONE + "'")));
    }

    @AfterAll
    static void closePool() {
        OwnDatabase.close(DATABASE);
    }

    @Override
    protected OwnDatabase database() {
        return DATABASE;
    }

    @Test
    void theSessionsRunTwelveHoursBehindUtc() {
        Long hours = new JdbcTemplate(pool()).queryForObject(
                "SELECT TIMESTAMPDIFF(HOUR, UTC_TIMESTAMP(6), NOW(6)) + 0", Long.class);
        assertThat(hours).isEqualTo(-12);
    }
}
