package io.idempotency.spring;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.ExpiredRecordCleaner;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.jdbc.PostgresIdempotencyStore;
import io.idempotency.jdbc.PostgresPartitionMaintenance;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.TestPostgres;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.dao.DataAccessResourceFailureException;

import java.time.Duration;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatExceptionOfType;

/** What a run of the cleanup reports. */
@ExtendWith(OutputCaptureExtension.class)
class RetentionSchedulerTest {

    /** retention.md: each mode logs what it removed; a run that finds nothing expired says nothing. */
    @Test
    void aRunLogsTheRecordsItRemoved(CapturedOutput output) {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(2)) {
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
            database.queryString("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash,"
                    + " fencing_token, response_status, expires_at) select '', 'POST /x', 'k-' || i, 'SUCCEEDED',"
                    + " repeat('a', 64), gen_random_uuid(), 200, now() - interval '1 second'"
                    + " from generate_series(1, 3) i");
            RetentionScheduler scheduler = RetentionScheduler.deleting(new ExpiredRecordCleaner(
                    new PostgresIdempotencyStore(dataSource, "idempotency_keys"), 2), Duration.ofHours(1),
                    new MicrometerIdempotencyMeters(new SimpleMeterRegistry()));

            scheduler.runOnce();
            scheduler.runOnce();

            assertThat(output.getAll()).containsPattern("INFO .* Removed 3 expired idempotency records in \\d+ ms"
                    + " \\(2 batches\\)");
            assertThat(output.getAll()).doesNotContain("Removed 0");
            assertThat(database.queryLong("select count(*) from idempotency_keys")).isZero();
        }
    }

    @Test
    void recordsRemovedBeforeARunFailsAreCounted(CapturedOutput output) {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(2)) {
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
            database.queryString("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash,"
                    + " fencing_token, response_status, expires_at) select '', 'POST /x', 'k-' || i, 'SUCCEEDED',"
                    + " repeat('a', 64), gen_random_uuid(), 200, now() - interval '1 second'"
                    + " from generate_series(1, 3) i");
            // the database goes away after the first batch has been deleted and committed
            IdempotencyStore store = FailingStores.connectionRefusedAt(
                    new PostgresIdempotencyStore(dataSource, "idempotency_keys"), "deleteExpired", 2);
            SimpleMeterRegistry registry = new SimpleMeterRegistry();
            RetentionScheduler scheduler = RetentionScheduler.deleting(new ExpiredRecordCleaner(store, 1),
                    Duration.ofHours(1), new MicrometerIdempotencyMeters(registry));

            assertThatExceptionOfType(DataAccessResourceFailureException.class).isThrownBy(scheduler::runOnce);

            assertThat(database.queryLong("select count(*) from idempotency_keys")).isEqualTo(2);
            assertThat(registry.get("idempotency.cleanup.removed").tag("unit", "records").counter().count())
                    .as("the record that is gone is counted").isEqualTo(1.0);
            assertThat(output.getAll()).as("and logged")
                    .contains("Removed 1 expired idempotency record before the cleanup run failed");
        }
    }

    @Test
    void aDetachedTableThatCannotBeDroppedIsLoggedWhileTheExpiredPartitionsAreDroppedAndCounted(CapturedOutput output) {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(2)) {
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys", true).migrate();
            // detached for removal earlier, and since then read by a view, so a drop without CASCADE is refused
            database.queryString("create table idempotency_keys_viewed (like idempotency_keys)");
            database.queryString("do $$ begin execute format('comment on table idempotency_keys_viewed is %L',"
                    + " format('idempotency: detached from %I.%I to be dropped', current_schema(),"
                    + " 'idempotency_keys')); end $$");
            database.queryString("create view old_keys_report as select * from idempotency_keys_viewed");
            database.queryString("create table idempotency_keys_expired (like idempotency_keys including defaults including constraints)");
            database.queryString("do $$ begin execute format('alter table idempotency_keys attach partition"
                    + " idempotency_keys_expired for values from (%L) to (%L)', now() - interval '5 days',"
                    + " now() - interval '4 days'); end $$");
            SimpleMeterRegistry registry = new SimpleMeterRegistry();
            RetentionScheduler scheduler = partitioned(dataSource, false, registry);

            scheduler.runOnce();

            assertThat(output).contains("Idempotency partitions dropped: [idempotency_keys_expired]")
                    .contains("WARN").contains("could not be dropped").contains("idempotency_keys_viewed: ")
                    .contains("view old_keys_report depends on table idempotency_keys_viewed");
            assertThat(registry.get("idempotency.cleanup.removed").tag("unit", "partitions").counter().count())
                    .isEqualTo(1.0);
        }
    }

    /**
     * retention.md, partitions managed beside a default partition: a range over rows the default partition holds is
     * skipped with a warning naming it, the later ones are still made, and no partition is dropped — PostgreSQL
     * refuses the concurrent detach while a default partition exists — with the refusal the run's failure.
     */
    @Test
    void besideADefaultPartitionABlockedRangeIsWarnedOfAndNoPartitionIsDropped(CapturedOutput output) {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(2)) {
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys", true).migrate();
            database.queryString("create table idempotency_keys_default partition of idempotency_keys default");
            // written while no range covered the current time
            database.queryString("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash,"
                    + " fencing_token, response_status, expires_at) values ('', 'POST /x', 'k-default', 'SUCCEEDED',"
                    + " repeat('a', 64), gen_random_uuid(), 200, now() + interval '30 days') returning 'inserted'");
            database.queryString("create table idempotency_keys_expired (like idempotency_keys including defaults"
                    + " including constraints)");
            database.queryString("do $$ begin execute format('alter table idempotency_keys attach partition"
                    + " idempotency_keys_expired for values from (%L) to (%L)', now() - interval '5 days',"
                    + " now() - interval '4 days'); end $$");
            SimpleMeterRegistry registry = new SimpleMeterRegistry();
            RetentionScheduler scheduler = partitioned(dataSource, true, registry);

            assertThatExceptionOfType(RuntimeException.class).isThrownBy(scheduler::runOnce)
                    .withStackTraceContaining("default partition");

            assertThat(output.getOut().lines().filter(line -> line.contains("Idempotency partitions not created for")))
                    .as("the current hour's range, which the default partition's row is in").isNotEmpty()
                    .allSatisfy(line -> assertThat(line).contains("WARN")
                            .containsPattern("not created for \\[\\[.+, .+\\)\\]"));
            assertThat(database.queryLong("select count(*) from pg_inherits where inhparent"
                    + " = 'idempotency_keys'::regclass and inhrelid::regclass::text like 'idempotency_keys_p%'"))
                    .as("the two hours after it")
                    .isEqualTo(2);
            assertThat(database.queryLong("select count(*) from pg_inherits where inhrelid"
                    + " = 'idempotency_keys_expired'::regclass")).as("the expired partition is kept").isEqualTo(1);
            assertThat(database.queryString("select obj_description('idempotency_keys_expired'::regclass, 'pg_class')"))
                    .as("and not marked as one this library detached").isNull();
            assertThat(registry.find("idempotency.cleanup.removed").counters())
                    .allSatisfy(counter -> assertThat(counter.count()).isZero());
        }
    }

    /**
     * A run with cleanup enabled makes the partitions that are due before and again after it drops (a detach may have
     * waited an interval): a range the default partition's rows keep blocked is still one finding of the run, and is
     * warned of once per run — whether the drop succeeds or fails — not once per creation.
     */
    @Test
    void aRangeTheDefaultPartitionBlocksIsWarnedOfOncePerRun(CapturedOutput output) {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(2)) {
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys", true).migrate();
            database.queryString("create table idempotency_keys_default partition of idempotency_keys default");
            database.queryString("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash,"
                    + " fencing_token, response_status, expires_at) values ('', 'POST /x', 'k-default', 'SUCCEEDED',"
                    + " repeat('a', 64), gen_random_uuid(), 200, now() + interval '30 days') returning 'inserted'");
            RetentionScheduler scheduler = partitioned(dataSource, true, new SimpleMeterRegistry());

            scheduler.runOnce(); // nothing expired: the drop succeeds

            assertThat(output.getOut().lines().filter(line -> line.contains("Idempotency partitions not created for")))
                    .as("a run whose drop succeeds").hasSize(1);

            database.queryString("create table idempotency_keys_expired (like idempotency_keys including defaults"
                    + " including constraints)");
            database.queryString("do $$ begin execute format('alter table idempotency_keys attach partition"
                    + " idempotency_keys_expired for values from (%L) to (%L)', now() - interval '5 days',"
                    + " now() - interval '4 days'); end $$");

            assertThatExceptionOfType(RuntimeException.class).isThrownBy(scheduler::runOnce)
                    .withStackTraceContaining("default partition");

            assertThat(output.getOut().lines().filter(line -> line.contains("Idempotency partitions not created for")))
                    .as("and a run whose drop fails, one more").hasSize(2);
        }
    }

    @Test
    void partitionsDroppedBeforeARunFailsAreCountedAndLogged(CapturedOutput output) {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(2)) {
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys", true).migrate();
            String suffix = UUID.randomUUID().toString().replace("-", "").substring(0, 12);
            String oldest = "idempotency_keys_oldest_" + suffix;
            String viewed = "idempotency_keys_viewed_" + suffix;
            // two expired partitions; the newer one is read by a view, so its drop, after its detach, is refused
            database.queryString("create table " + oldest + " (like idempotency_keys including defaults including"
                    + " constraints)");
            database.queryString("do $$ begin execute format('alter table idempotency_keys attach partition " + oldest
                    + " for values from (%L) to (%L)', now() - interval '6 days', now() - interval '5 days'); end $$");
            database.queryString("create table " + viewed + " (like idempotency_keys including defaults including"
                    + " constraints)");
            database.queryString("do $$ begin execute format('alter table idempotency_keys attach partition " + viewed
                    + " for values from (%L) to (%L)', now() - interval '5 days', now() - interval '4 days'); end $$");
            database.queryString("create view report_" + suffix + " as select * from " + viewed);
            SimpleMeterRegistry registry = new SimpleMeterRegistry();
            RetentionScheduler scheduler = partitioned(dataSource, false, registry);

            assertThatExceptionOfType(IllegalStateException.class).isThrownBy(scheduler::runOnce)
                    .withMessageContaining("depends on table " + viewed);

            assertThat(database.queryLong("select count(*) from pg_class where relname = '" + oldest + "'"))
                    .isZero();
            assertThat(registry.get("idempotency.cleanup.removed").tag("unit", "partitions").counter().count())
                    .as("the partition that is gone is counted").isEqualTo(1.0);
            assertThat(output).contains("Idempotency partitions dropped before the run failed: [" + oldest + "]");
        }
    }

    /**
     * A scheduler that drops the expired partitions of {@code idempotency_keys} (partitions of an hour, two kept
     * ahead), making those due too when {@code createPartitions}, counting in {@code registry}.
     */
    private static RetentionScheduler partitioned(HikariDataSource dataSource, boolean createPartitions,
                                                  SimpleMeterRegistry registry) {
        return RetentionScheduler.partitioned(new PostgresPartitionMaintenance(dataSource, "idempotency_keys",
                Duration.ofHours(1), 2, Duration.ofSeconds(3)), createPartitions, true, Duration.ofDays(1),
                Duration.ofHours(1), new MicrometerIdempotencyMeters(registry));
    }
}
