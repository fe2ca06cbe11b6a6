package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.Transactions;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;

import java.sql.Timestamp;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The partitions follow the database's clock, not the JVM's: the database's clock is moved a day or more away from
 * the JVM's (functions {@code now()}, {@code statement_timestamp()} and {@code clock_timestamp()} that shadow
 * PostgreSQL's in the connection's search path). Partitions made for the JVM's hour would leave the database's hour
 * without one, and every claim would fail for want of a partition to go into; partitions dropped by the JVM's clock
 * would be dropped too early, or kept past their retention.
 */
class PartitionMaintenanceDatabaseClockIntegrationTest {

    private static final String TABLE = "idempotency_keys";
    private static final String HASH = "d".repeat(64);

    @ParameterizedTest(name = "database clock {0} relative to the JVM")
    @ValueSource(strings = {"+ interval '1 day'", "- interval '1 day'"})
    void partitionsAreCreatedForTheDatabasesCurrentTimeSoThatClaimsHaveOneToGoInto(String skew) throws Exception {
        try (HikariDataSource dataSource = skewedPartitionedDatabase(skew)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            PostgresPartitionMaintenance maintenance = new PostgresPartitionMaintenance(dataSource, TABLE,
                    Duration.ofHours(1), 2, Duration.ofSeconds(5));

            assertThat(maintenance.createAhead(false).created()).hasSize(3);

            Instant databaseNow = jdbc.queryForObject("select now()", Timestamp.class).toInstant();
            assertThat(maintenance.partitions()).as("a partition covers the database's current time")
                    .anySatisfy(partition -> assertThat(databaseNow).isAfterOrEqualTo(partition.from())
                            .isBefore(partition.to()));
            assertThat(maintenance.coversNow()).isTrue();

            PartitionedPostgresIdempotencyStore store = new PartitionedPostgresIdempotencyStore(dataSource, TABLE);
            Transactions transactions = new SpringTransactions(new DataSourceTransactionManager(dataSource));
            ScopedKey key = new ScopedKey("", "POST /x", UUID.randomUUID().toString());
            Transactions.Transaction transaction = transactions.begin();
            try {
                assertThat(store.claim(new ClaimRequest(key, HASH, Duration.ofDays(1), Duration.ofMillis(500))))
                        .as("a claim now finds its partition").isInstanceOf(ClaimResult.Claimed.class);
                transaction.commit();
            } finally {
                transaction.rollback();
            }
            assertThat(store.find(key)).isPresent();
        }
    }

    /**
     * Three days between the clocks: the partition two days old by the database's clock is past the one-day
     * retention and is dropped; the one twenty hours old is within it and is kept, even though its one record (claimed
     * under a TTL since lowered) has expired. Read on the JVM's clock, the first would be kept for three days more with
     * the database ahead, and the second dropped with the database behind.
     */
    @ParameterizedTest(name = "database clock {0} relative to the JVM")
    @ValueSource(strings = {"+ interval '3 days'", "- interval '3 days'"})
    void partitionsAreDroppedAfterTheRetentionByTheDatabasesClock(String skew) {
        try (HikariDataSource dataSource = skewedPartitionedDatabase(skew)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            PostgresPartitionMaintenance maintenance = new PostgresPartitionMaintenance(dataSource, TABLE,
                    Duration.ofHours(1), 1, Duration.ofSeconds(5));
            attachPartition(jdbc, "idempotency_keys_old", "now() - interval '2 days'",
                    "now() - interval '2 days' + interval '1 hour'");
            attachPartition(jdbc, "idempotency_keys_recent", "now() - interval '20 hours'",
                    "now() - interval '19 hours'");
            insertRecord(jdbc, "old-key", "now() - interval '2 days' + interval '1 minute'",
                    "now() - interval '1 day' + interval '1 minute'");
            insertRecord(jdbc, "recent-key", "now() - interval '20 hours' + interval '1 minute'",
                    "now() - interval '1 minute'");

            PostgresPartitionMaintenance.Run run = maintenance.dropExpired(Duration.ofDays(1));

            assertThat(run.dropped()).as("only the partition past the retention on the database's clock")
                    .containsExactly("idempotency_keys_old");
            assertThat(maintenance.partitions()).extracting(PostgresPartitionMaintenance.Partition::name)
                    .containsExactly("idempotency_keys_recent");
        }
    }

    /** A database with the partitioned table whose connections see {@code now()} moved by {@code skew}. */
    private static HikariDataSource skewedPartitionedDatabase(String skew) {
        TestPostgres.Database database = TestPostgres.newDatabase();
        // in the test's own schema (dropped with it), named before pg_catalog, so the shadowing functions are found
        // first: now(), and the statement's and the current time the store writes and compares records with
        for (String clock : List.of("now() returns timestamptz language sql stable",
                "statement_timestamp() returns timestamptz language sql stable",
                "clock_timestamp() returns timestamptz language sql volatile")) {
            database.queryString("create function " + database.schema() + "." + clock + " as $$ select pg_catalog."
                    + clock.substring(0, clock.indexOf(')') + 1) + " " + skew + " $$");
        }
        TestPostgres.Database skewed = new TestPostgres.Database(
                database.url() + ",pg_catalog", database.user(), database.password(), database.schema());
        HikariDataSource dataSource = skewed.dataSource(4);
        new IdempotencySchemaMigrator(dataSource, TABLE, true).migrate();
        Double skewSeconds = new JdbcTemplate(dataSource).queryForObject(
                "select extract(epoch from now() - pg_catalog.now())", Double.class);
        assertThat(Math.abs(skewSeconds)).as("the session's now() is skewed").isGreaterThanOrEqualTo(86_400.0);
        return dataSource;
    }

    private static void attachPartition(JdbcTemplate jdbc, String name, String from, String to) {
        jdbc.execute("create table " + name + " (like idempotency_keys including defaults including constraints)");
        jdbc.execute("do $$ begin execute format('alter table idempotency_keys attach partition " + name
                + " for values from (%L) to (%L)', " + from + ", " + to + "); end $$");
    }

    /** A SUCCEEDED record of {@code key}, created and expiring at the SQL expressions given. */
    private static void insertRecord(JdbcTemplate jdbc, String key, String createdAt, String expiresAt) {
        jdbc.update("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash, fencing_token,"
                + " response_status, created_at, expires_at) values ('', 'POST /x', ?, 'SUCCEEDED', ?, gen_random_uuid(),"
                + " 200, " + createdAt + ", " + expiresAt + ")", key, HASH);
    }
}
