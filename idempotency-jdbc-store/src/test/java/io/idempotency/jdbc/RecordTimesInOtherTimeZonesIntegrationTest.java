package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.jdbc.core.JdbcTemplate;

import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Timestamp;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneId;
import java.time.zone.ZoneOffsetTransition;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Record times in sessions whose time zone has summer time. PostgreSQL adds a day to a {@code timestamptz} as a
 * calendar day of the session's time zone (pgjdbc sets that zone to the JVM's, psql to the server's {@code timezone}),
 * which is 23 hours, or 23½ on Lord Howe Island, across the change to summer time: a retention written in days would
 * end that much before the TTL it stands for.
 */
class RecordTimesInOtherTimeZonesIntegrationTest {

    private static final String TABLE = IdempotencySchema.DEFAULT_TABLE_NAME;

    /**
     * retention.md's {@code UPDATE} that extends the stored records to a longer TTL of 60 days, run by an operator in a
     * session of a zone that changes to summer time within those 60 days: the record is then kept 60 whole days after
     * its claim, not 60 calendar days of that zone.
     */
    @ParameterizedTest
    @ValueSource(strings = {"Europe/Berlin", "America/St_Johns", "Pacific/Chatham", "Australia/Lord_Howe"})
    void theDocumentedExtensionOfStoredRecordsAddsTheWholeTtlAcrossAChangeToSummerTime(String zone) throws Exception {
        String update = null;
        for (String line : Files.readAllLines(Path.of("..", "docs", "retention.md"))) {
            int start = line.indexOf("`UPDATE " + TABLE + " SET expires_at");
            if (start >= 0) {
                update = line.substring(start + 1, line.indexOf('`', start + 1));
            }
        }
        assertThat(update).as("the statement retention.md gives").isNotNull();
        Duration ttl = Duration.ofDays(60);
        // claimed a day before the zone's last change to summer time, under a TTL of one day
        ZoneOffsetTransition summerTime = ZoneId.of(zone).getRules().previousTransition(Instant.now());
        while (!summerTime.isGap()) {
            summerTime = ZoneId.of(zone).getRules().previousTransition(summerTime.getInstant());
        }
        Instant claimed = summerTime.getInstant().minus(Duration.ofDays(1));
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(3,
                config -> config.setConnectionInitSql("SET TIME ZONE '" + zone + "'"))) {
            new IdempotencySchemaMigrator(dataSource, TABLE).migrate();
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            assertThat(jdbc.queryForObject("SHOW TimeZone", String.class)).isEqualTo(zone);
            jdbc.update("INSERT INTO " + TABLE + " (caller, scope, idempotency_key, status, request_hash,"
                    + " fencing_token, response_status, created_at, updated_at, expires_at) VALUES ('', 'POST /payments',"
                    + " 'k-1', 'SUCCEEDED', repeat('a', 64), gen_random_uuid(), 201, ?, ?, ?)",
                    Timestamp.from(claimed), Timestamp.from(claimed), Timestamp.from(claimed.plus(Duration.ofDays(1))));

            assertThat(jdbc.update(update + " AND idempotency_key = 'k-1'")).isEqualTo(1);

            Timestamp expires = jdbc.queryForObject("SELECT expires_at FROM " + TABLE, Timestamp.class);
            assertThat(Duration.between(claimed, expires.toInstant()))
                    .as("kept for the TTL after its claim, in a session of %s", zone).isEqualTo(ttl);
        }
    }
}
