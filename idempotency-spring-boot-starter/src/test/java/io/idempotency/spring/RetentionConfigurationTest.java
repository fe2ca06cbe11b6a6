package io.idempotency.spring;

import io.idempotency.core.IdempotencyStore;
import io.idempotency.jdbc.PartitionedPostgresIdempotencyStore;
import io.idempotency.testkit.Async;
import io.idempotency.testkit.Await;
import io.idempotency.testkit.TestPostgres;
import io.micrometer.core.instrument.Clock;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.composite.CompositeMeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.test.context.FilteredClassLoader;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.Primary;

import javax.sql.DataSource;
import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

import static io.idempotency.spring.StartupFailures.assertStartFails;
import static io.idempotency.spring.StartupFailures.assertStartFailsWithDescription;
import static org.assertj.core.api.Assertions.assertThat;

/** Retention wired by the starter: the startup check, the scheduled cleanup, and the partitioned mode. */
class RetentionConfigurationTest {

    @Test
    void aRetentionShorterThanTheRetryWindowStopsTheStartAndSaysWhy() {
        assertStartFails(TestDatabases.contextRunner(TestPostgres.newDatabase())
                .withPropertyValues("idempotency.retention.ttl=1d", "idempotency.retention.max-retry-window=3d"))
                .contains("idempotency.retention.ttl (1d)", "idempotency.retention.max-retry-window (3d)",
                        "idempotency.lease (5m)", "lets that retry run the request again");
    }

    /**
     * A DBA made the partitioned table, and partitions ahead, and granted the application's role what requests need:
     * the start used to pass while those partitions covered the present, and every run then failed ("must be owner of
     * table") until they ran out, and with them every claim. Keeping the partitions needs the table's owner.
     */
    @Test
    void keepingThePartitionsOfATableTheApplicationsRoleDoesNotOwnIsRefusedAtStartup() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        database.queryString(io.idempotency.jdbc.IdempotencySchema.postgresqlPartitioned("idempotency_keys"));
        database.queryString("create table idempotency_keys_now partition of idempotency_keys for values from"
                + " (now() - interval '1 day') to (now() + interval '30 days')");
        String role = "idempotency_" + database.schema() + "_app";
        database.queryString("create role " + role);
        try {
            database.queryString("grant usage on schema " + database.schema() + " to " + role);
            database.queryString("grant select, insert, update, delete on idempotency_keys to " + role);
            org.springframework.boot.test.context.runner.WebApplicationContextRunner asTheRole =
                    TestDatabases.contextRunner(database).withPropertyValues(
                            "spring.datasource.hikari.connection-init-sql=set role " + role,
                            "idempotency.retention.cleanup.mode=drop-partitions",
                            "idempotency.retention.cleanup.partition-interval=1d");

            assertStartFailsWithDescription(asTheRole).contains("the database role " + role
                    + " does not own table idempotency_keys", "lacks CREATE on schema", "create-partitions=true",
                    "every claim fail");
            org.springframework.boot.test.context.runner.WebApplicationContextRunner droppingOnly =
                    asTheRole.withPropertyValues("idempotency.retention.cleanup.create-partitions=false");
            assertStartFailsWithDescription(droppingOnly).contains("cleanup.enabled=true", "does not own table",
                    "idempotency_keys_now (").doesNotContain("CREATE");
            // the partitions left to whoever owns the table: requests need no more than they were granted
            asTheRole.withPropertyValues("idempotency.retention.cleanup.create-partitions=false",
                    "idempotency.retention.cleanup.enabled=false").run(context -> assertThat(context).hasNotFailed());
            // the table the role's, but not the partition a DBA made ahead: it could not be dropped
            database.queryString("alter table idempotency_keys owner to " + role);
            assertStartFailsWithDescription(droppingOnly).contains("does not own its partitions idempotency_keys_now")
                    .doesNotContain("does not own table");
            // dropping needs no CREATE on the schema
            database.queryString("alter table idempotency_keys_now owner to " + role);
            droppingOnly.run(context -> assertThat(context).hasNotFailed());
        } finally {
            database.queryString("drop owned by " + role);
            database.queryString("drop role " + role);
        }
    }

    @Test
    void partitionsManagedElsewhereAreLeftAloneButMustCoverTheCurrentTime() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        database.queryString(io.idempotency.jdbc.IdempotencySchema.postgresqlPartitioned("idempotency_keys"));
        org.springframework.boot.test.context.runner.WebApplicationContextRunner managedElsewhere =
                TestDatabases.contextRunner(database).withPropertyValues(
                        "idempotency.retention.cleanup.mode=drop-partitions",
                        "idempotency.retention.cleanup.create-partitions=false",
                        "idempotency.retention.cleanup.enabled=false");

        assertStartFailsWithDescription(managedElsewhere)
                .contains("No partition of the idempotency table covers the current time", "create-partitions=false");
        // the tool that manages them made a default partition (as pg_partman does): that covers now
        database.queryString("create table idempotency_keys_default partition of idempotency_keys default");
        managedElsewhere.run(context -> {
            assertThat(context).hasNotFailed();
            assertThat(database.queryLong("select count(*) from pg_inherits"
                    + " where inhparent = to_regclass('idempotency_keys')")).as("only the tool's").isEqualTo(1);
        });
        // the application keeps no partitions ahead: a setting of 0 says so, and means nothing more
        managedElsewhere.withPropertyValues("idempotency.retention.cleanup.partitions-ahead=0")
                .run(context -> assertThat(context).hasNotFailed());
    }

    @Test
    void aNegativeRetryWindowIsRefusedRatherThanLettingAnyTtlPass() {
        // window plus lease below zero: every TTL would cover it, and records could go before the clients' retries
        assertStartFailsWithDescription(TestDatabases.contextRunner(TestPostgres.newDatabase())
                .withPropertyValues("idempotency.retention.ttl=1h", "idempotency.retention.max-retry-window=-7d"))
                .contains("idempotency.retention.max-retry-window (-7d) must be 0 or more");
    }

    /**
     * A record expires at the database's now() plus the TTL: retention.md promises that a TTL PostgreSQL could not add
     * to now() stops the start, and that the longest one allowed (36500000d) still lets every claim be made.
     */
    @Test
    void aTtlAboveAHundredThousandYearsStopsTheStartAndTheLongestAllowedOneStillClaims() {
        assertStartFailsWithDescription(TestDatabases.contextRunner(TestPostgres.newDatabase())
                .withPropertyValues("idempotency.retention.ttl=36500001d"))
                .contains("idempotency.retention.ttl (36500001d) must be at most 36500000d");
        TestPostgres.Database database = TestPostgres.newDatabase();
        TestDatabases.contextRunner(database)
                .withPropertyValues("idempotency.retention.ttl=36500000d")
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    io.idempotency.core.ScopedKey key = new io.idempotency.core.ScopedKey("", "events", "m-1");
                    io.idempotency.core.IdempotencyTemplate template =
                            context.getBean(io.idempotency.core.IdempotencyTemplate.class);
                    assertThat(template.execute(key, new byte[0], () -> new byte[] {1}).replayed()).isFalse();
                    assertThat(template.execute(key, new byte[0], () -> new byte[] {2}).value()).containsExactly(1);
                    assertThat(database.queryLong("select extract(year from expires_at)::bigint from idempotency_keys"
                            + " where idempotency_key = 'm-1'")).isGreaterThan(100_000);
                });
    }

    @Test
    void theTtlMustAlsoCoverTheLease() {
        TestDatabases.contextRunner(TestPostgres.newDatabase())
                .withPropertyValues("idempotency.retention.ttl=7d", "idempotency.retention.max-retry-window=7d")
                .run(context -> assertThat(context).hasFailed());
        TestDatabases.contextRunner(TestPostgres.newDatabase())
                .withPropertyValues("idempotency.retention.ttl=7d", "idempotency.retention.max-retry-window=6d")
                .run(context -> assertThat(context).hasNotFailed());
        // "at least": a TTL of exactly the window plus the lease is enough
        TestDatabases.contextRunner(TestPostgres.newDatabase())
                .withPropertyValues("idempotency.retention.ttl=7d", "idempotency.retention.max-retry-window=6d",
                        "idempotency.lease=1d")
                .run(context -> assertThat(context).hasNotFailed());
    }

    @Test
    void theScheduledCleanupRemovesExpiredRecordsOnlyAndCountsThem() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        TestDatabases.contextRunner(database)
                .withUserConfiguration(Meters.class)
                .withPropertyValues("idempotency.retention.cleanup.interval=200ms")
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    database.queryString("insert into idempotency_keys (caller, scope, idempotency_key, status,"
                            + " request_hash, fencing_token, response_status, expires_at) values"
                            + " ('', 'POST /x', 'expired', 'SUCCEEDED', repeat('a', 64), gen_random_uuid(), 200,"
                            + "  now() - interval '1 second'),"
                            + " ('', 'POST /x', 'live', 'SUCCEEDED', repeat('a', 64), gen_random_uuid(), 200,"
                            + "  now() + interval '1 day')");
                    long deadline = System.currentTimeMillis() + 15_000;
                    while (database.queryLong("select count(*) from idempotency_keys where idempotency_key = 'expired'") > 0
                            && System.currentTimeMillis() < deadline) {
                        Thread.sleep(100);
                    }
                    assertThat(database.queryLong("select count(*) from idempotency_keys where idempotency_key = 'expired'"))
                            .isZero();
                    assertThat(database.queryLong("select count(*) from idempotency_keys where idempotency_key = 'live'"))
                            .isEqualTo(1);
                    // counted once the batch has committed: the record can be gone a moment before it is counted
                    MeterRegistry meters = context.getBean(MeterRegistry.class);
                    assertThat(awaitCount(() -> meters.find(MicrometerIdempotencyMeters.REMOVED).tag("unit", "records")
                            .counter())).isEqualTo(1.0);
                });
    }

    /**
     * retention.md: the cleanup runs every interval, an hour by default, but its first run comes at most 10 s after
     * startup, so that records which expired while the application was down do not wait an hour.
     */
    @Test
    void theFirstCleanupComesWithinTenSecondsOfTheStartWhateverTheInterval() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        TestDatabases.contextRunner(database).run(context -> {
            assertThat(context).hasNotFailed();
            assertThat(context.getBean(IdempotencyProperties.class).getRetention().getCleanup().getInterval())
                    .isEqualTo(java.time.Duration.ofHours(1));
            database.queryString("insert into idempotency_keys (caller, scope, idempotency_key, status,"
                    + " request_hash, fencing_token, response_status, expires_at) values"
                    + " ('', 'POST /x', 'expired', 'SUCCEEDED', repeat('a', 64), gen_random_uuid(), 200,"
                    + "  now() - interval '1 second')");
            long deadline = System.currentTimeMillis() + 13_000; // the 10 s, and the run itself on a slow machine
            while (database.queryLong("select count(*) from idempotency_keys") > 0
                    && System.currentTimeMillis() < deadline) {
                Thread.sleep(200);
            }
            assertThat(database.queryLong("select count(*) from idempotency_keys"))
                    .as("removed by the first run").isZero();
        });
    }

    /** {@code idempotency.retention.cleanup.batch-size}: the records each delete statement of a run removes. */
    @Test
    @ExtendWith(OutputCaptureExtension.class)
    void theCleanupDeletesInBatchesOfTheConfiguredSize(CapturedOutput output) {
        TestPostgres.Database database = TestPostgres.newDatabase();
        TestDatabases.contextRunner(database)
                .withPropertyValues("idempotency.retention.cleanup.interval=300ms",
                        "idempotency.retention.cleanup.batch-size=2")
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    database.queryString("insert into idempotency_keys (caller, scope, idempotency_key, status,"
                            + " request_hash, fencing_token, response_status, expires_at) select '', 'POST /x',"
                            + " 'k-' || i, 'SUCCEEDED', repeat('a', 64), gen_random_uuid(), 200,"
                            + " now() - interval '1 second' from generate_series(1, 5) i");
                    long deadline = System.currentTimeMillis() + 15_000;
                    while (!output.getAll().contains("Removed 5 expired idempotency records")
                            && System.currentTimeMillis() < deadline) {
                        Thread.sleep(50);
                    }
                    assertThat(output.getAll()).as("one run: two full batches and a short one")
                            .containsPattern("Removed 5 expired idempotency records in \\d+ ms \\(3 batches\\)");
                });
    }

    @Test
    void theSweeperResolvesAClaimWhoseLeaseRanOutAndCountsIt() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        TestDatabases.contextRunner(database)
                .withUserConfiguration(Meters.class)
                .withPropertyValues("idempotency.sweeper.interval=200ms")
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    // an intent-first claim whose holder died: its lease ran out, nobody retried
                    database.queryString("insert into idempotency_keys (caller, scope, idempotency_key, status,"
                            + " request_hash, fencing_token, expires_at, locked_until) values ('', 'POST /charges',"
                            + " 'abandoned', 'PROCESSING', repeat('a', 64), gen_random_uuid(),"
                            + " now() + interval '1 day', now() - interval '1 second'),"
                            + " ('', 'POST /charges', 'running', 'PROCESSING', repeat('a', 64), gen_random_uuid(),"
                            + " now() + interval '1 day', now() + interval '1 hour')");
                    long deadline = System.currentTimeMillis() + 15_000;
                    while ("PROCESSING".equals(database.queryString("select status from idempotency_keys"
                            + " where idempotency_key = 'abandoned'")) && System.currentTimeMillis() < deadline) {
                        Thread.sleep(100);
                    }
                    assertThat(database.queryString("select status from idempotency_keys"
                            + " where idempotency_key = 'abandoned'")).as("the default resolver lets a retry run")
                            .isEqualTo("FAILED");
                    assertThat(database.queryString("select status from idempotency_keys"
                            + " where idempotency_key = 'running'")).as("a lease still running").isEqualTo("PROCESSING");
                    // counted once the sweep has ended: the claim can be FAILED a moment before it is counted
                    MeterRegistry meters = context.getBean(MeterRegistry.class);
                    assertThat(awaitCount(() -> meters.find(MicrometerIdempotencyMeters.RESOLVED).tag("outcome", "failed")
                            .counter())).isEqualTo(1.0);
                });
    }

    @Test
    void eachCounterIsDescribedOnceForAllItsTags() {
        // a registry keeps one description per name (Actuator's /actuator/metrics/{name}, Prometheus' HELP line): the
        // one it shows must describe every value of the tag, not whichever was registered first
        TestDatabases.contextRunner(TestPostgres.newDatabase())
                .withUserConfiguration(Meters.class)
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    MeterRegistry meters = context.getBean(MeterRegistry.class);
                    for (String name : new String[]{MicrometerIdempotencyMeters.REMOVED,
                            MicrometerIdempotencyMeters.RESOLVED}) {
                        assertThat(meters.find(name).counters()).as(name).hasSize(2);
                        assertThat(meters.find(name).counters().stream().map(counter -> counter.getId()
                                .getDescription()).distinct()).as("descriptions of " + name).hasSize(1);
                    }
                });
    }

    @Test
    void withSeveralRegistriesEachCountsTheSweepOnce() {
        // an application with two registries of its own (say one scraped, one pushed) and none primary
        TestPostgres.Database database = TestPostgres.newDatabase();
        TestDatabases.contextRunner(database)
                .withUserConfiguration(TwoRegistries.class)
                .withPropertyValues("idempotency.sweeper.interval=200ms")
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    insertAbandonedClaim(database);
                    for (String name : new String[]{"scraped", "pushed"}) {
                        MeterRegistry meters = context.getBean(name, MeterRegistry.class);
                        assertThat(awaitCount(() -> meters.find(MicrometerIdempotencyMeters.RESOLVED)
                                .tag("outcome", "failed").counter())).as(name).isEqualTo(1.0);
                    }
                });
        // as Spring Boot Actuator wires several: a primary composite over them, which forwards to each
        TestPostgres.Database composed = TestPostgres.newDatabase();
        TestDatabases.contextRunner(composed)
                .withUserConfiguration(TwoRegistries.class, PrimaryComposite.class)
                .withPropertyValues("idempotency.sweeper.interval=200ms")
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    insertAbandonedClaim(composed);
                    for (String name : new String[]{"scraped", "pushed"}) {
                        MeterRegistry meters = context.getBean(name, MeterRegistry.class);
                        assertThat(awaitCount(() -> meters.find(MicrometerIdempotencyMeters.RESOLVED)
                                .tag("outcome", "failed").counter())).as(name + ", counted through the composite only")
                                .isEqualTo(1.0);
                    }
                });
    }

    /**
     * A composite registry of the application's own beside the primary one over every registry (as Spring Boot
     * Actuator makes it when there are several and none is primary): the primary one holds the other, so counted in
     * both, the registries of the inner one would count every claim twice.
     */
    @Test
    void aCompositeHeldByAnotherCountsTheSweepOnce() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        TestDatabases.contextRunner(database)
                .withUserConfiguration(NestedComposite.class, PrimaryComposite.class)
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    insertAbandonedClaim(database);
                    // the scheduled sweeps come 30 s after the start: this one is the first
                    context.getBean(StaleClaimSweepScheduler.class).sweepOnce();
                    assertThat(database.queryString("select status from idempotency_keys")).isEqualTo("FAILED");
                    CompositeMeterRegistry fannedOut = context.getBean("fannedOut", CompositeMeterRegistry.class);
                    assertThat(fannedOut.getRegistries()).hasSize(1);
                    for (MeterRegistry meters : List.of(fannedOut.getRegistries().iterator().next(),
                            context.getBean("pushed", MeterRegistry.class))) {
                        assertThat(meters.get(MicrometerIdempotencyMeters.RESOLVED).tag("outcome", "failed")
                                .counter().count()).as(meters.toString()).isEqualTo(1.0);
                    }
                });
    }

    /** {@code idempotency.sweeper.batch-size}: the stale claims one sweep looks at; the next sweep takes the rest. */
    @Test
    void aSweepResolvesAtMostTheConfiguredBatchOfStaleClaims() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        TestDatabases.contextRunner(database)
                .withPropertyValues("idempotency.sweeper.batch-size=2") // and the default interval: 30 s to the first
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    database.queryString("insert into idempotency_keys (caller, scope, idempotency_key, status,"
                            + " request_hash, fencing_token, expires_at, locked_until) select '', 'POST /charges',"
                            + " 'abandoned-' || i, 'PROCESSING', repeat('a', 64), gen_random_uuid(),"
                            + " now() + interval '1 day', now() - interval '1 second' from generate_series(1, 3) i");
                    StaleClaimSweepScheduler sweeper = context.getBean(StaleClaimSweepScheduler.class);

                    sweeper.runOnce();
                    assertThat(database.queryLong("select count(*) from idempotency_keys where status = 'FAILED'"))
                            .as("resolved by the first sweep").isEqualTo(2);
                    assertThat(database.queryLong("select count(*) from idempotency_keys"
                            + " where status = 'PROCESSING'")).isEqualTo(1);

                    sweeper.runOnce();
                    assertThat(database.queryLong("select count(*) from idempotency_keys where status = 'FAILED'"))
                            .as("and the rest by the next").isEqualTo(3);
                });
    }

    /** An intent-first claim whose holder died: its lease ran out, nobody retried. */
    private static void insertAbandonedClaim(TestPostgres.Database database) {
        database.queryString("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash,"
                + " fencing_token, expires_at, locked_until) values ('', 'POST /charges', 'abandoned', 'PROCESSING',"
                + " repeat('a', 64), gen_random_uuid(), now() + interval '1 day', now() - interval '1 second')");
    }

    @Test
    void thePartitionedModeCreatesAPartitionedTableWithPartitionsAhead() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        TestDatabases.contextRunner(database)
                .withPropertyValues("idempotency.retention.cleanup.mode=drop-partitions",
                        "idempotency.retention.cleanup.partition-interval=1h",
                        "idempotency.retention.ttl=1d", "idempotency.retention.max-retry-window=1h",
                        "idempotency.retention.cleanup.partitions-ahead=3")
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    assertThat(context.getBean(IdempotencyStore.class)).isInstanceOf(PartitionedPostgresIdempotencyStore.class);
                    assertThat(database.queryString("select relkind from pg_class where oid = to_regclass('idempotency_keys')"))
                            .isEqualTo("p");
                    assertThat(database.queryLong("select count(*) from pg_inherits"
                            + " where inhparent = to_regclass('idempotency_keys')")).isEqualTo(4);
                });
    }

    /**
     * A concurrent detach waits, holding no lock, for the transactions that use the table: a request in progress holds
     * its claim's open. Bounded by the DDL lock timeout (2 s), it gave up on any request longer than that and left the
     * detach pending, and with such requests always in flight no partition was ever dropped.
     */
    @Test
    void anExpiredPartitionIsDroppedWhileARequestLongerThanTheDdlLockTimeoutIsInProgress() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        withAnExpiredPartition(database, (context, scheduler) -> {
            try (Connection request = context.getBean(DataSource.class).getConnection()) {
                // a request of four seconds in progress: its transaction on the table stays open meanwhile
                request.setAutoCommit(false);
                request.createStatement().execute("select count(*) from idempotency_keys");
                CompletableFuture<Void> ends = Async.run(() -> {
                    try {
                        Thread.sleep(4000);
                        request.commit();
                    } catch (InterruptedException | SQLException e) {
                        throw new IllegalStateException(e);
                    }
                });

                scheduler.runOnce();

                ends.get(30, TimeUnit.SECONDS);
            }
            assertThat(database.queryLong("select count(*) from pg_class"
                    + " where relname = 'idempotency_keys_expired' and relnamespace = current_schema()::regnamespace"))
                    .as("detached and dropped once the request ended").isZero();
            assertThat(database.queryLong("select count(*) from pg_inherits"
                    + " where inhparent = to_regclass('idempotency_keys') and inhdetachpending"))
                    .as("no detach left pending").isZero();
        });
    }

    /**
     * An intent-first claim no one resolved within the retention goes with its partition: whether its side effect
     * happened was never recorded, and a retry now runs it again. The sweeper names every claim it resolves, since the
     * log is what a reconciliation has; a claim removed unresolved is named too, with a warning.
     */
    @Test
    @ExtendWith(OutputCaptureExtension.class)
    void anUnresolvedClaimDroppedWithItsPartitionIsNamedInAWarning(CapturedOutput output) {
        TestPostgres.Database database = TestPostgres.newDatabase();
        withAnExpiredPartition(database, (context, scheduler) -> {
            database.queryString("insert into idempotency_keys (caller, scope, idempotency_key, status,"
                    + " request_hash, fencing_token, created_at, expires_at, locked_until) values ('alice',"
                    + " 'POST /charges', 'charge-41', 'PROCESSING', 'h', gen_random_uuid(),"
                    + " now() - interval '5 days' + interval '1 minute', now() - interval '4 days',"
                    + " now() - interval '5 days' + interval '6 minutes')");

            scheduler.runOnce();

            assertThat(database.queryLong("select count(*) from idempotency_keys")).isZero();
            assertThat(output).containsPattern("WARN .*Idempotency claim of caller 'alice' on 'POST /charges'"
                    + " with key 'charge-41' removed from an expired partition, its outcome never resolved");
        });
    }

    private interface WithAnExpiredPartition {
        void run(org.springframework.boot.test.context.assertj.AssertableWebApplicationContext context,
                 RetentionScheduler scheduler) throws Throwable;
    }

    /**
     * Runs {@code test} in an application of hourly partitions and a retention of a day, whose scheduled runs are
     * stopped (the test makes them), with a partition {@code idempotency_keys_expired} of five to four days ago.
     */
    private static void withAnExpiredPartition(TestPostgres.Database database, WithAnExpiredPartition test) {
        TestDatabases.contextRunner(database)
                .withPropertyValues("idempotency.retention.cleanup.mode=drop-partitions",
                        "idempotency.retention.cleanup.partition-interval=1h",
                        "idempotency.retention.cleanup.partitions-ahead=3",
                        "idempotency.retention.ttl=1d", "idempotency.retention.max-retry-window=1h")
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    RetentionScheduler scheduler = context.getBean(RetentionScheduler.class);
                    scheduler.stop();
                    database.queryString("create table idempotency_keys_expired"
                            + " (like idempotency_keys including defaults including constraints)");
                    database.queryString("do $$ begin execute format('alter table idempotency_keys attach"
                            + " partition idempotency_keys_expired for values from (%L) to (%L)',"
                            + " now() - interval '5 days', now() - interval '4 days'); end $$");
                    test.run(context, scheduler);
                });
    }

    @Test
    void partitionsMadeAheadMustOutlastTheTimeUntilTheNextRunsThatCreateMore() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        // seven hours of partitions ahead, but the next run that creates more comes a day later
        assertStartFailsWithDescription(TestDatabases.contextRunner(database)
                .withPropertyValues("idempotency.retention.cleanup.mode=drop-partitions",
                        "idempotency.retention.cleanup.partition-interval=1h",
                        "idempotency.retention.ttl=1d", "idempotency.retention.max-retry-window=1h",
                        "idempotency.retention.cleanup.partitions-ahead=7",
                        "idempotency.retention.cleanup.interval=1d"))
                .contains("idempotency.retention.cleanup.partitions-ahead (7)",
                        "idempotency.retention.cleanup.partition-interval (1h)",
                        "idempotency.retention.cleanup.interval (1d)");
        TestDatabases.contextRunner(TestPostgres.newDatabase())
                .withPropertyValues("idempotency.retention.cleanup.mode=drop-partitions",
                        "idempotency.retention.cleanup.partition-interval=1h",
                        "idempotency.retention.ttl=1d", "idempotency.retention.max-retry-window=1h",
                        "idempotency.retention.cleanup.partitions-ahead=7",
                        "idempotency.retention.cleanup.interval=3h")
                .run(context -> assertThat(context).hasNotFailed());
    }

    /**
     * Every claim locks every partition and its indexes until its transaction ends, in a lock table the whole server
     * shares: hourly partitions for the default TTL of 30 days (724 with three ahead) let fewer than a dozen requests
     * claim at once on a server of default settings before claims fail with "out of shared memory". Refused by the
     * settings alone, before the table is made; the same TTL in daily partitions starts.
     */
    @Test
    void aTtlInSoManyPartitionsThatClaimsWouldExhaustTheLockTableIsRefused() {
        TestPostgres.Database database = TestPostgres.newDatabase();

        assertStartFailsWithDescription(TestDatabases.contextRunner(database)
                .withPropertyValues("idempotency.retention.cleanup.mode=drop-partitions",
                        "idempotency.retention.cleanup.partition-interval=1h",
                        "idempotency.retention.cleanup.partitions-ahead=3"))
                .contains("idempotency.retention.ttl (30d)", "idempotency.retention.cleanup.partition-interval (1h)",
                        "keeps 724 partitions, more than 100", "out of shared memory");
        assertThat(database.queryString("select coalesce(to_regclass('idempotency_keys')::text, 'none')"))
                .isEqualTo("none");
        // 96 kept: four days of hours, the present and three ahead
        TestDatabases.contextRunner(database)
                .withPropertyValues("idempotency.retention.cleanup.mode=drop-partitions",
                        "idempotency.retention.cleanup.partition-interval=1h",
                        "idempotency.retention.cleanup.partitions-ahead=3",
                        "idempotency.retention.ttl=92h", "idempotency.retention.max-retry-window=1h")
                .run(context -> assertThat(context).hasNotFailed());
        TestDatabases.contextRunner(TestPostgres.newDatabase())
                .withPropertyValues("idempotency.retention.cleanup.mode=drop-partitions",
                        "idempotency.retention.cleanup.partition-interval=1d",
                        "idempotency.retention.cleanup.partitions-ahead=3")
                .run(context -> assertThat(context).hasNotFailed());
    }

    /**
     * Too few partitions ahead is a matter of the settings alone: refused before the table is made, so that the
     * refusal leaves a new database as it was, and the application started again in the default mode finds no
     * partitioned table it would have to be told to migrate away from.
     */
    @Test
    void tooFewPartitionsAheadAreRefusedBeforeTheTableIsMade() {
        TestPostgres.Database database = TestPostgres.newDatabase();

        assertStartFailsWithDescription(TestDatabases.contextRunner(database)
                .withPropertyValues("idempotency.retention.cleanup.mode=drop-partitions",
                        "idempotency.retention.cleanup.partitions-ahead=0"))
                .contains("idempotency.retention.cleanup.partitions-ahead (0)");
        assertThat(database.queryString("select coalesce(to_regclass('idempotency_keys')::text, 'none')"))
                .isEqualTo("none");
        TestDatabases.contextRunner(database).run(context -> assertThat(context).hasNotFailed());
    }

    /**
     * Exactly two intervals of partitions ahead are not enough: the schedule counts an interval from the end of a run,
     * so a run whose creation waited out its DDL lock timeout and failed is followed by the next one more than two
     * intervals after the last creation, whose own creation may wait as long again. Meanwhile the partitions made
     * ahead had run out, and every claim failed.
     */
    @Test
    void partitionsMadeAheadMustAlsoOutlastAFailedRunsLockTimeouts() {
        assertStartFailsWithDescription(TestDatabases.contextRunner(TestPostgres.newDatabase())
                .withPropertyValues("idempotency.retention.cleanup.mode=drop-partitions",
                        "idempotency.retention.cleanup.partition-interval=1h",
                        "idempotency.retention.ttl=1d", "idempotency.retention.max-retry-window=1h",
                        "idempotency.retention.cleanup.partitions-ahead=2",
                        "idempotency.retention.cleanup.interval=1h"))
                .contains("idempotency.retention.cleanup.partitions-ahead (2)", "and 5 seconds more");
        TestDatabases.contextRunner(TestPostgres.newDatabase())
                .withPropertyValues("idempotency.retention.cleanup.mode=drop-partitions",
                        "idempotency.retention.cleanup.partition-interval=1h",
                        "idempotency.retention.ttl=1d", "idempotency.retention.max-retry-window=1h",
                        "idempotency.retention.cleanup.partitions-ahead=2",
                        "idempotency.retention.cleanup.interval=3595s")
                .run(context -> assertThat(context).hasNotFailed());
    }

    @Test
    void intervalsOfTheBackgroundWorkMustBePositive() {
        // else the work would run back to back, every millisecond, against the database
        for (String interval : new String[]{"idempotency.retention.cleanup.interval=0s",
                "idempotency.retention.cleanup.interval=-1h", "idempotency.sweeper.interval=0s"}) {
            TestDatabases.contextRunner(TestPostgres.newDatabase()).withPropertyValues(interval).run(context -> {
                assertThat(context).as(interval).hasFailed();
                assertThat(new IdempotencyFailureAnalyzer().analyze(context.getStartupFailure()).getDescription())
                        .contains(interval.substring(0, interval.indexOf('=')), "must be positive");
            });
        }
        TestDatabases.contextRunner(TestPostgres.newDatabase())
                .withPropertyValues("idempotency.retention.cleanup.mode=drop-partitions",
                        "idempotency.retention.cleanup.interval=-1h")
                .run(context -> assertThat(context).as("not taken for partitions that always last").hasFailed());
    }

    @Test
    void cleanupDisabledRemovesTheSchedulerOnlyInDeleteMode() {
        TestDatabases.contextRunner(TestPostgres.newDatabase())
                .withPropertyValues("idempotency.retention.cleanup.enabled=false")
                .run(context -> assertThat(context).hasNotFailed().doesNotHaveBean(RetentionScheduler.class));
        TestPostgres.Database database = TestPostgres.newDatabase();
        TestDatabases.contextRunner(database)
                .withPropertyValues("idempotency.retention.cleanup.enabled=false",
                        "idempotency.retention.cleanup.mode=DROP_PARTITIONS", // bound like the property itself
                        "idempotency.retention.cleanup.partitions-ahead=1")
                .run(context -> {
                    assertThat(context).hasNotFailed().hasSingleBean(RetentionScheduler.class);
                    assertThat(database.queryLong("select count(*) from pg_inherits"
                            + " where inhparent = to_regclass('idempotency_keys')")).isEqualTo(2);
                });
    }

    @Test
    void thePartitionedModeRefusesATableCreatedForDeletes() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        TestDatabases.contextRunner(database).run(context -> assertThat(context).hasNotFailed()); // creates the plain table
        assertStartFails(TestDatabases.contextRunner(database)
                .withPropertyValues("idempotency.retention.cleanup.mode=drop-partitions"))
                .contains("is not partitioned");
    }

    /**
     * Without Micrometer the cleanup and the sweeper run all the same, counting into nothing: an expired record is
     * removed, and an abandoned claim resolved.
     */
    @Test
    void theStarterRunsWithoutMicrometer() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        TestDatabases.contextRunner(database)
                .withClassLoader(new FilteredClassLoader("io.micrometer"))
                .withPropertyValues("idempotency.retention.cleanup.interval=100ms", "idempotency.sweeper.interval=100ms")
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    assertThat(context).doesNotHaveBean(MicrometerIdempotencyMeters.class);
                    assertThat(context.getBean(RetentionScheduler.class).isRunning()).isTrue();
                    database.queryString("insert into idempotency_keys (caller, scope, idempotency_key, status,"
                            + " request_hash, fencing_token, response_status, expires_at, locked_until) values"
                            + " ('', 'POST /x', 'expired', 'SUCCEEDED', repeat('a', 64), gen_random_uuid(), 200,"
                            + "  now() - interval '1 second', null),"
                            + " ('', 'POST /x', 'abandoned', 'PROCESSING', repeat('a', 64), gen_random_uuid(), null,"
                            + "  now() + interval '1 day', now() - interval '1 second')");
                    String statuses = "select coalesce(string_agg(idempotency_key || ' ' || status, ', '"
                            + " order by idempotency_key), '') from idempotency_keys";
                    Await.until("the expired record removed and the abandoned claim resolved", Duration.ofSeconds(15),
                            () -> database.queryString(statuses).equals("abandoned FAILED"));
                });
    }

    /** The count of {@code counter} once it is positive, or after 15 s. */
    private static double awaitCount(Supplier<Counter> counter) throws InterruptedException {
        long deadline = System.currentTimeMillis() + 15_000;
        while ((counter.get() == null || counter.get().count() == 0) && System.currentTimeMillis() < deadline) {
            Thread.sleep(50);
        }
        return counter.get() == null ? 0 : counter.get().count();
    }

    @Configuration(proxyBeanMethods = false)
    static class TwoRegistries {
        @Bean
        MeterRegistry scraped() {
            return new SimpleMeterRegistry();
        }

        @Bean
        MeterRegistry pushed() {
            return new SimpleMeterRegistry();
        }
    }

    /** A composite of the application's own over a registry that is no bean, and a registry of its own. */
    @Configuration(proxyBeanMethods = false)
    static class NestedComposite {
        @Bean
        CompositeMeterRegistry fannedOut() {
            return new CompositeMeterRegistry(Clock.SYSTEM, List.of(new SimpleMeterRegistry()));
        }

        @Bean
        MeterRegistry pushed() {
            return new SimpleMeterRegistry();
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class PrimaryComposite {
        @Bean
        @Primary
        CompositeMeterRegistry compositeMeterRegistry(List<MeterRegistry> registries) {
            return new CompositeMeterRegistry(Clock.SYSTEM, registries);
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class Meters {
        @Bean
        MeterRegistry meterRegistry() {
            return new SimpleMeterRegistry();
        }
    }
}
