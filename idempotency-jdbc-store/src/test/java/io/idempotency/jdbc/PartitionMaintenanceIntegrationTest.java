package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.RecordStatus;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StoredResponse;
import io.idempotency.core.Transactions;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.Async;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.postgresql.ds.PGSimpleDataSource;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.jdbc.datasource.DelegatingDataSource;

import javax.sql.DataSource;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.time.Instant;
import java.time.LocalDate;
import java.time.ZoneId;
import java.time.zone.ZoneOffsetTransition;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The partitioned table: partitions are created ahead and dropped after the retention, a key stays unique across a
 * partition boundary, and partition changes never make a claim wait.
 */
class PartitionMaintenanceIntegrationTest {

    private static final String TABLE = "idempotency_keys";
    /** The advisory lock an instance creating partitions of the table holds. */
    private static final String CREATION_LOCK = "hashtextextended('idempotency-partitions:' || '" + TABLE
            + "'::regclass::oid::text, 0)";
    private static final String HASH = "e".repeat(64);

    @Test
    void partitionsAreCreatedAheadAndDroppedAfterTheRetention() {
        try (HikariDataSource dataSource = partitionedDatabase()) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            PostgresPartitionMaintenance maintenance = hourly(dataSource, 3, Duration.ofSeconds(5));
            attachPartition(jdbc, "idempotency_keys_old", "now() - interval '3 days'", "now() - interval '2 days'");
            attachPartition(jdbc, "idempotency_keys_recent", "now() - interval '20 hours'", "now() - interval '19 hours'");
            insertRecord(jdbc, "old-key", "now() - interval '3 days' + interval '1 minute'");
            insertRecord(jdbc, "recent-key", "now() - interval '20 hours' + interval '1 minute'");

            PostgresPartitionMaintenance.Run run = maintenance.run(Duration.ofDays(1));

            assertThat(run.skipped()).isFalse();
            assertThat(run.created()).hasSize(4); // the current hour and three ahead
            assertThat(run.dropped()).containsExactly("idempotency_keys_old");
            Instant now = jdbc.queryForObject("select now()", java.sql.Timestamp.class).toInstant();
            List<PostgresPartitionMaintenance.Partition> partitions = maintenance.partitions();
            assertThat(partitions).extracting(PostgresPartitionMaintenance.Partition::name)
                    .contains("idempotency_keys_recent").doesNotContain("idempotency_keys_old");
            assertThat(partitions.get(partitions.size() - 1).to()).isAfter(now.plus(Duration.ofHours(3)))
                    .as("three ahead of the current hour, no more").isBeforeOrEqualTo(now.plus(Duration.ofHours(4)));
            assertThat(partitions).filteredOn(partition -> run.created().contains(partition.name()))
                    .as("each created partition spans the interval").hasSize(4)
                    .allSatisfy(partition -> assertThat(Duration.between(partition.from(), partition.to()))
                            .isEqualTo(Duration.ofHours(1)));
            assertThat(jdbc.queryForObject("select count(*) from idempotency_keys where idempotency_key = 'old-key'",
                    Integer.class)).isZero();
            assertThat(jdbc.queryForObject("select count(*) from idempotency_keys where idempotency_key = 'recent-key'",
                    Integer.class)).as("a partition within the retention is kept").isEqualTo(1);
            assertThat(jdbc.queryForObject("select count(*) from pg_tables where tablename = 'idempotency_keys_old'"
                    + " and schemaname = current_schema()", Integer.class)).as("dropped, not just detached").isZero();

            assertThat(maintenance.run(Duration.ofDays(1)).created()).as("a second run has nothing to do").isEmpty();
        }
    }

    /**
     * PostgreSQL shows partition bounds in the connection's time zone (which pgjdbc sets to the JVM's: local time on
     * many servers), offsets of half an hour and daylight saving time included, whereas the library makes bounds that
     * are multiples of the interval since the epoch. Read as other instants, the ranges there would look uncovered: a
     * run would make partitions over them (refused as overlapping) or leave time without one. Here a 90-minute
     * interval, which falls on no whole hour of these zones, and a partition made elsewhere for a local day on which
     * the clocks change (when the zone changes them).
     */
    @ParameterizedTest(name = "connection time zone {0}")
    @ValueSource(strings = {"Asia/Kolkata", "America/St_Johns", "Europe/Berlin"})
    void partitionBoundsAreReadInTheConnectionsTimeZone(String zone) {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(4,
                config -> config.setConnectionInitSql("set time zone '" + zone + "'"))) {
            new IdempotencySchemaMigrator(dataSource, TABLE, true).migrate();
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            assertThat(jdbc.queryForObject("show timezone", String.class)).isEqualTo(zone);
            ZoneId id = ZoneId.of(zone);
            // a local day well ahead: the one of the zone's next change of time, or a day a year from now
            ZoneOffsetTransition change = id.getRules().nextTransition(Instant.now().plus(Duration.ofDays(2)));
            LocalDate day = change != null ? change.getDateTimeBefore().toLocalDate() : LocalDate.now(id).plusYears(1);
            attachPartition(jdbc, "idempotency_keys_local_day", "'" + day + " 00:00'",
                    "'" + day.plusDays(1) + " 00:00'");
            attachPartition(jdbc, "idempotency_keys_old", "now() - interval '3 days'", "now() - interval '2 days'");
            insertRecord(jdbc, "old-key", "now() - interval '3 days' + interval '1 minute'");
            PostgresPartitionMaintenance maintenance = new PostgresPartitionMaintenance(dataSource, TABLE,
                    Duration.ofMinutes(90), 2, Duration.ofSeconds(5));

            PostgresPartitionMaintenance.Run run = maintenance.run(Duration.ofDays(1));

            assertThat(run.created()).hasSize(3);
            assertThat(run.dropped()).containsExactly("idempotency_keys_old");
            assertThat(maintenance.partitions()).filteredOn(partition -> run.created().contains(partition.name()))
                    .hasSize(3).allSatisfy(partition -> {
                        assertThat(partition.from().getEpochSecond() % 5400).as("a multiple of the interval").isZero();
                        assertThat(Duration.between(partition.from(), partition.to()))
                                .isEqualTo(Duration.ofMinutes(90));
                    });
            assertThat(maintenance.partitions())
                    .filteredOn(partition -> partition.name().equals("idempotency_keys_local_day")).singleElement()
                    .satisfies(partition -> {
                        assertThat(partition.from()).isEqualTo(day.atStartOfDay(id).toInstant());
                        assertThat(partition.to()).isEqualTo(day.plusDays(1).atStartOfDay(id).toInstant());
                    });
            assertThat(maintenance.coversNow()).isTrue();
            assertThat(maintenance.run(Duration.ofDays(1)).created()).as("a second run finds them all").isEmpty();
        }
    }

    @Test
    void anIntervalOfOtherThanWholeSecondsIsRefused() {
        // bounds are steps of whole seconds since the epoch, and names are made of them: a fraction does not fit
        for (Duration interval : List.of(Duration.ofMillis(1500), Duration.ofMillis(999),
                Duration.ofDays(1).plusNanos(1))) {
            assertThatThrownBy(() -> new PostgresPartitionMaintenance(new PGSimpleDataSource(), TABLE, interval, 3,
                    Duration.ofSeconds(5))).isInstanceOf(IllegalArgumentException.class)
                    .hasMessageContaining("a whole number of seconds");
        }
    }

    @Test
    void aPartitionHoldingARecordNotYetExpiredIsKeptWhateverTheRetentionNowSays() {
        try (HikariDataSource dataSource = partitionedDatabase()) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            PostgresPartitionMaintenance maintenance = hourly(dataSource, 1, Duration.ofSeconds(5));
            attachPartition(jdbc, "idempotency_keys_old", "now() - interval '3 days'", "now() - interval '2 days'");
            attachPartition(jdbc, "idempotency_keys_older", "now() - interval '5 days'", "now() - interval '4 days'");
            // claimed when the TTL was 30 days; the TTL has since been lowered to one day
            insertRecord(jdbc, "long-ttl", "now() - interval '3 days' + interval '1 minute'",
                    "now() - interval '3 days' + interval '1 minute' + interval '30 days'");
            insertRecord(jdbc, "short-ttl", "now() - interval '5 days' + interval '1 minute'");

            PostgresPartitionMaintenance.Run run = maintenance.dropExpired(Duration.ofDays(1));

            assertThat(run.dropped()).as("only the partition whose every record has expired")
                    .containsExactly("idempotency_keys_older");
            assertThat(jdbc.queryForObject("select count(*) from idempotency_keys where idempotency_key = 'long-ttl'",
                    Integer.class)).as("a record is kept until its own expiry").isEqualTo(1);
        }
    }

    /**
     * An intent-first claim whose handler still works on it — its lease renewed, so not stale — is held, however long
     * ago it was claimed: dropped with its partition, its handler's answer would find no record (the lease lost) and a
     * retry would run the request again beside it. Its partition is kept while the lease is live; a claim whose lease
     * has run out long since goes with its partition, as the retention documents.
     */
    @Test
    void aPartitionHoldingAClaimWhoseLeaseIsLiveIsKept() {
        try (HikariDataSource dataSource = partitionedDatabase()) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            PostgresPartitionMaintenance maintenance = hourly(dataSource, 1, Duration.ofSeconds(5));
            attachPartition(jdbc, "idempotency_keys_working", "now() - interval '3 days'", "now() - interval '2 days'");
            attachPartition(jdbc, "idempotency_keys_stale", "now() - interval '5 days'", "now() - interval '4 days'");
            insertClaim(jdbc, "working", "now() - interval '3 days' + interval '1 minute'", "now() + interval '5 minutes'");
            insertClaim(jdbc, "stale", "now() - interval '5 days' + interval '1 minute'", "now() - interval '4 days'");

            List<ScopedKey> abandoned = new ArrayList<>();
            PostgresPartitionMaintenance.Run run = maintenance.dropExpired(Duration.ofDays(1), name -> { },
                    abandoned::add);

            assertThat(run.dropped()).as("only the partition whose claim is stale")
                    .containsExactly("idempotency_keys_stale");
            assertThat(jdbc.queryForObject("select count(*) from idempotency_keys where idempotency_key = 'working'",
                    Integer.class)).as("a claim whose lease is live is kept").isEqualTo(1);
            assertThat(abandoned).as("the unresolved claim removed with its partition, named for a reconciliation")
                    .containsExactly(new ScopedKey("", "POST /x", "stale"));
        }
    }

    /**
     * A claim whose lease has run out is not what keeps a partition, but it can be taken over (by a sweeper or a retry,
     * to ask the resolver again) or renewed (by its holder, late) at any moment: its lease is live again, and the
     * partition is kept while it is, as the retention promises. Here the takeover comes just after the run has looked
     * at the partition's records and before it detaches it. Dropped then, the takeover's holder would lose a claim it
     * was just given: its answer would find no record, and a retry would run the request again.
     */
    @Test
    void aStaleClaimTakenOverWhileItsPartitionIsJudgedKeepsThePartition() throws Exception {
        try (HikariDataSource pool = partitionedDatabase()) {
            JdbcTemplate jdbc = new JdbcTemplate(pool);
            hourly(pool, 1, Duration.ofSeconds(5)).createAhead(false);
            attachPartition(jdbc, "idempotency_keys_stale", "now() - interval '5 days'", "now() - interval '4 days'");
            insertClaim(jdbc, "stale", "now() - interval '5 days' + interval '1 minute'", "now() - interval '4 days'");
            ScopedKey key = new ScopedKey("", "POST /x", "stale");
            String staleToken = jdbc.queryForObject("select fencing_token::text from idempotency_keys"
                    + " where idempotency_key = 'stale'", String.class);
            PartitionedPostgresIdempotencyStore store = new PartitionedPostgresIdempotencyStore(pool, TABLE);
            // the run stops once it has looked at the partition's records, the first time only
            CountDownLatch judged = new CountDownLatch(1);
            CountDownLatch resume = new CountDownLatch(1);
            DataSource pausing = new DelegatingDataSource(pool) {
                @Override
                public Connection getConnection() throws SQLException {
                    Connection connection = super.getConnection();
                    return (Connection) Proxy.newProxyInstance(getClass().getClassLoader(),
                            new Class<?>[]{Connection.class}, (proxy, method, args) -> {
                                Object result = invoke(method, connection, args);
                                if (!method.getName().equals("createStatement")) {
                                    return result;
                                }
                                Statement statement = (Statement) result;
                                return Proxy.newProxyInstance(getClass().getClassLoader(),
                                        new Class<?>[]{Statement.class}, (p, m, a) -> {
                                            Object done = invoke(m, statement, a);
                                            if (m.getName().equals("executeQuery")
                                                    && ((String) a[0]).contains("locked_until >= now()")
                                                    && judged.getCount() > 0) {
                                                judged.countDown();
                                                assertThat(resume.await(30, TimeUnit.SECONDS)).isTrue();
                                            }
                                            return done;
                                        });
                            });
                }
            };
            PostgresPartitionMaintenance maintenance = hourly(pausing, 1, Duration.ofSeconds(5));
            CompletableFuture<PostgresPartitionMaintenance.Run> run =
                    Async.supply(() -> maintenance.dropExpired(Duration.ofDays(1)));
            Optional<String> token;
            try {
                assertThat(judged.await(30, TimeUnit.SECONDS)).isTrue();
                token = store.takeOver(key, staleToken, Duration.ofMinutes(5));
            } finally {
                resume.countDown();
            }
            assertThat(token).as("the sweeper has the claim, its lease live").isPresent();

            PostgresPartitionMaintenance.Run done = run.get(30, TimeUnit.SECONDS);

            assertThat(done.dropped()).as("the partition of a claim whose lease is live")
                    .doesNotContain("idempotency_keys_stale");
            StoredResponse answer = new StoredResponse(200, List.of(), "resolved".getBytes());
            assertThat(store.complete(key, token.get(), answer)).as("the sweeper's answer is recorded").isTrue();
        }
    }

    private static Object invoke(Method method, Object target, Object[] args) throws Throwable {
        try {
            return method.invoke(target, args);
        } catch (InvocationTargetException e) {
            throw e.getCause();
        }
    }

    /**
     * A partition attached by a DBA or another tool may have a name that must be quoted in SQL, or live in another
     * schema than the table: the records check, the detach and the drop must name it as PostgreSQL does, or every
     * run fails on it and no expired partition is ever dropped again.
     */
    @Test
    void partitionsMadeElsewhereWithAQuotedNameOrInAnotherSchemaAreDropped() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        String otherSchema = database.schema() + "_archive";
        try (HikariDataSource dataSource = partitionedDatabase(database)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            PostgresPartitionMaintenance maintenance = hourly(dataSource, 1, Duration.ofSeconds(5));
            try {
                jdbc.execute("create schema " + otherSchema);
                attachPartition(jdbc, "\"Keys_2020\"", "now() - interval '5 days'", "now() - interval '4 days'");
                attachPartition(jdbc, otherSchema + ".keys_old", "now() - interval '3 days'",
                        "now() - interval '2 days'");
                insertRecord(jdbc, "quoted", "now() - interval '5 days' + interval '1 minute'");
                insertRecord(jdbc, "elsewhere", "now() - interval '3 days' + interval '1 minute'");

                PostgresPartitionMaintenance.Run run = maintenance.dropExpired(Duration.ofDays(1));

                assertThat(run.dropped()).hasSize(2);
                assertThat(maintenance.partitions()).isEmpty();
                // in this test's schemas only: other tests on the server may have tables of these names in theirs
                assertThat(jdbc.queryForObject("select count(*) from pg_class c join pg_namespace n"
                        + " on n.oid = c.relnamespace where c.relname in ('Keys_2020', 'keys_old')"
                        + " and n.nspname in (current_schema(), '" + otherSchema + "')", Integer.class))
                        .as("dropped, not just detached").isZero();
            } finally {
                jdbc.execute("drop schema if exists " + otherSchema + " cascade");
            }
        }
    }

    @Test
    void aDefaultPartitionMadeElsewhereCoversNowAndIsNeitherListedNorDropped() {
        try (HikariDataSource dataSource = partitionedDatabase()) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            PostgresPartitionMaintenance maintenance = hourly(dataSource, 2, Duration.ofSeconds(5));
            jdbc.execute("create table idempotency_keys_default partition of idempotency_keys default");

            assertThat(maintenance.coversNow()).as("the default partition takes every row").isTrue();
            assertThat(maintenance.partitions()).isEmpty();
            assertThat(maintenance.createAhead(false).created()).hasSize(3);
            assertThat(maintenance.dropExpired(Duration.ZERO).dropped()).doesNotContain("idempotency_keys_default");
            assertThat(jdbc.queryForObject("select count(*) from pg_tables where tablename = 'idempotency_keys_default'"
                    + " and schemaname = current_schema()", Integer.class)).isEqualTo(1);
        }
    }

    @Test
    void partitionsMadeElsewhereWithOpenBoundsAreListedAndKeptUpWith() {
        try (HikariDataSource dataSource = partitionedDatabase()) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            PostgresPartitionMaintenance maintenance = hourly(dataSource, 2, Duration.ofSeconds(5));
            // everything before the last days in one partition, and a partition for all time from a far day on
            jdbc.execute("create table idempotency_keys_history (like idempotency_keys including defaults"
                    + " including constraints)");
            jdbc.execute("do $$ begin execute format('alter table idempotency_keys attach partition"
                    + " idempotency_keys_history for values from (minvalue) to (%L)', now() - interval '10 days');"
                    + " end $$");
            jdbc.execute("create table idempotency_keys_future (like idempotency_keys including defaults"
                    + " including constraints)");
            jdbc.execute("do $$ begin execute format('alter table idempotency_keys attach partition"
                    + " idempotency_keys_future for values from (%L) to (maxvalue)', now() + interval '100 days');"
                    + " end $$");
            insertRecord(jdbc, "history", "now() - interval '20 days'");

            assertThat(maintenance.partitions()).extracting(PostgresPartitionMaintenance.Partition::name)
                    .containsExactly("idempotency_keys_history", "idempotency_keys_future");
            assertThat(maintenance.coversNow()).as("no partition covers now yet").isFalse();
            assertThat(maintenance.createAhead(false).created()).hasSize(3);
            assertThat(maintenance.coversNow()).isTrue();
            assertThat(maintenance.dropExpired(Duration.ofDays(30)).dropped()).as("its records are within the TTL")
                    .isEmpty();
            assertThat(maintenance.dropExpired(Duration.ofDays(1)).dropped())
                    .containsExactly("idempotency_keys_history");
        }
    }

    /**
     * Beside a default partition PostgreSQL refuses every concurrent detach, so a run with cleanup enabled removes
     * nothing and leaves the partition to whoever manages the default one. When that one detaches the expired
     * partition to keep its rows (pg_partman keeping the table, a DBA archiving it), the library must not take the
     * refused detach for one of its own and drop the table.
     */
    @Test
    void aPartitionWhoseDetachWasRefusedIsNotDroppedOnceSomeoneElseDetachesIt() {
        try (HikariDataSource dataSource = partitionedDatabase()) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            PostgresPartitionMaintenance maintenance = hourly(dataSource, 2, Duration.ofSeconds(5));
            jdbc.execute("create table idempotency_keys_default partition of idempotency_keys default");
            attachPartition(jdbc, "idempotency_keys_archived", "now() - interval '5 days'",
                    "now() - interval '4 days'");
            insertRecord(jdbc, "archived-key", "now() - interval '5 days' + interval '1 minute'");

            assertThatThrownBy(() -> maintenance.dropExpired(Duration.ofDays(1))).as("refused beside a default partition")
                    .isInstanceOf(IllegalStateException.class);
            // kept by whoever manages the default partition: detached without CONCURRENTLY, as the documentation says
            jdbc.execute("alter table idempotency_keys detach partition idempotency_keys_archived");

            assertThat(maintenance.dropExpired(Duration.ofDays(1)).dropped()).isEmpty();
            assertThat(jdbc.queryForObject("select count(*) from idempotency_keys_archived", Integer.class))
                    .as("the detached table and its rows are kept").isEqualTo(1);
        }
    }

    @Test
    void rowsInADefaultPartitionBlockTheirRangeOnlyNotTheRangesAfterIt() {
        try (HikariDataSource dataSource = partitionedDatabase()) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            PostgresPartitionMaintenance maintenance = hourly(dataSource, 2, Duration.ofSeconds(5));
            jdbc.execute("create table idempotency_keys_default partition of idempotency_keys default");
            insertRecord(jdbc, "in-the-default-partition", "now()"); // written while no range covered now

            PostgresPartitionMaintenance.Run run = maintenance.createAhead(false);

            assertThat(run.blocked()).as("the current hour").hasSize(1);
            assertThat(run.created()).as("the two hours after it").hasSize(2);
            assertThat(maintenance.coversNow()).isTrue();
            assertThat(jdbc.queryForObject("select count(*) from pg_tables where tablename like 'idempotency_keys_p%'"
                    + " and schemaname = current_schema()", Integer.class)).as("no table left unattached").isEqualTo(2);
        }
    }

    @Test
    void creatingAPartitionBesideADefaultPartitionNeverMakesAClaimWait() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = partitionedDatabase(database)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute("create table idempotency_keys_default partition of idempotency_keys default");
            PostgresPartitionMaintenance maintenance = hourly(dataSource, 2, Duration.ofSeconds(30));
            assertThat(maintenance.createAhead(false).created()).hasSize(3);
            // drop the newest partition, so that the run below must attach one while the long request runs
            dropTheNewestPartition(jdbc, maintenance);
            PartitionedPostgresIdempotencyStore store = new PartitionedPostgresIdempotencyStore(dataSource, TABLE);
            Transactions transactions = new SpringTransactions(new DataSourceTransactionManager(dataSource));

            // a long request holds its claim open; its look-up read every partition, the default one too
            Transactions.Transaction longRequest = holdAClaimOpen(store, transactions);
            try {
                CompletableFuture<PostgresPartitionMaintenance.Run> run =
                        Async.supply(() -> maintenance.createAhead(false));
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (!run.isDone() && database.lockWaiters() == 0) { // the attach waits, or gave up at once
                    assertThat(System.nanoTime() - deadline).as("the attach neither waited nor ended").isNegative();
                    Thread.sleep(10);
                }

                ClaimResult result = claimANewKey(store, transactions);
                assertThat(result).as("a claim while a partition is attached").isInstanceOf(ClaimResult.Claimed.class);

                longRequest.commit();
                try {
                    run.get(30, TimeUnit.SECONDS);
                } catch (java.util.concurrent.ExecutionException e) {
                    assertThat(PostgresPartitionMaintenance.isLockNotAvailable(e)).as(e.toString()).isTrue();
                }
                maintenance.createAhead(false);
                assertThat(maintenance.partitions()).as("attached once no claim reads the default partition")
                        .hasSize(3);
            } finally {
                longRequest.rollback();
            }
        }
    }

    /**
     * A run whose attach is not had (here beside a default partition an open claim reads; likewise a run that stops
     * between making the table and attaching it) leaves the table it made for the range, and a later run makes the
     * partition. The table may have changed meanwhile: a column added to it (by the application's migration, or an
     * upgrade of the library's). PostgreSQL attaches only a table with every column of the partitioned one, so the
     * partition must be made in the table's shape of now, not be the table left behind, or no run ever attaches that
     * range again and claims fail once it is due.
     */
    @Test
    void aTableLeftByAnAttachNotHadIsMadeAgainInTheShapeTheTableHasSince() {
        try (HikariDataSource dataSource = partitionedDatabase()) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute("create table idempotency_keys_default partition of idempotency_keys default");
            PostgresPartitionMaintenance maintenance = hourly(dataSource, 2, Duration.ofSeconds(5));
            assertThat(maintenance.createAhead(false).created()).hasSize(3);
            dropTheNewestPartition(jdbc, maintenance);
            PartitionedPostgresIdempotencyStore store = new PartitionedPostgresIdempotencyStore(dataSource, TABLE);
            Transactions transactions = new SpringTransactions(new DataSourceTransactionManager(dataSource));
            Transactions.Transaction longRequest = holdAClaimOpen(store, transactions);
            try {
                assertThatThrownBy(() -> maintenance.createAhead(false)).as("the attach not had")
                        .satisfies(e -> assertThat(PostgresPartitionMaintenance.isLockNotAvailable(e)).isTrue());
                longRequest.commit();
            } finally {
                longRequest.rollback();
            }
            assertThat(jdbc.queryForObject("select count(*) from pg_tables where tablename like 'idempotency_keys_p%'"
                    + " and schemaname = current_schema()", Integer.class)).as("two partitions and the table left")
                    .isEqualTo(3);
            jdbc.execute("alter table idempotency_keys add column note text");

            assertThat(maintenance.createAhead(false).created()).hasSize(1);

            assertThat(maintenance.partitions()).hasSize(3);
            assertThat(jdbc.queryForObject("select count(*) from pg_tables where tablename like 'idempotency_keys_p%'"
                    + " and schemaname = current_schema()", Integer.class)).as("no table left unattached").isEqualTo(3);
        }
    }

    @Test
    void afterTheIntervalChangedTheUncoveredPartOfARangeGetsAPartitionToo() {
        try (HikariDataSource dataSource = partitionedDatabase()) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            // a partition of the one-day interval used before, in the half of today's two-day range not holding now
            String range = "to_timestamp(floor(extract(epoch from now()) / 172800) * 172800)";
            String otherHalf = "(case when now() < " + range + " + interval '24 hours' then " + range
                    + " + interval '24 hours' else " + range + " end)";
            attachPartition(jdbc, "idempotency_keys_one_day", otherHalf, otherHalf + " + interval '24 hours'");
            PostgresPartitionMaintenance maintenance =
                    new PostgresPartitionMaintenance(dataSource, TABLE, Duration.ofDays(2), 1, Duration.ofSeconds(5));

            maintenance.createAhead(false);

            assertThat(maintenance.coversNow()).as("a claim now has a partition to go into").isTrue();
            List<PostgresPartitionMaintenance.Partition> partitions = maintenance.partitions();
            for (int i = 1; i < partitions.size(); i++) {
                assertThat(partitions.get(i).from()).as("no gap before %s", partitions.get(i).name())
                        .isEqualTo(partitions.get(i - 1).to());
            }
            Instant now = jdbc.queryForObject("select now()", java.sql.Timestamp.class).toInstant();
            assertThat(partitions.get(partitions.size() - 1).to()).isAfter(now.plus(Duration.ofDays(2)));
        }
    }

    /**
     * A partition is where the claims go, so it is made with the room on each page the plain table has (its
     * {@code fillfactor}): completing a claim then stays a HOT update, which writes no index entry. A partitioned
     * table has no storage parameters of its own for {@code LIKE} to copy.
     */
    @Test
    void partitionsAreMadeWithTheRoomOnEachPageThePlainTableHas() {
        try (HikariDataSource dataSource = partitionedDatabase()) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            PostgresPartitionMaintenance maintenance = hourly(dataSource, 2, Duration.ofSeconds(5));

            List<String> created = maintenance.createAhead(false).created();

            assertThat(created).hasSize(3);
            for (String partition : created) {
                assertThat(jdbc.queryForObject("select array_to_string(reloptions, ',') from pg_class"
                        + " where oid = to_regclass(?)", String.class, partition)).as(partition)
                        .isEqualTo("fillfactor=90");
            }
            assertThat(IdempotencySchema.postgresql(TABLE)).as("the plain table's")
                    .contains("WITH (fillfactor = 90)");
        }
    }

    /**
     * A column the application added to the table and that fills itself, such as a stored generated one (the size of
     * each answer, for monitoring), is adopted by the table check: no claim has to write it. PostgreSQL attaches a
     * partition only when each such column of it is generated too, so the partitions must be made with it, or every
     * creation fails and claims fail once the partitions made before run out.
     */
    @Test
    void partitionsAreMadeWithTheGeneratedColumnsTheTableWasGiven() throws Exception {
        try (HikariDataSource dataSource = partitionedDatabase()) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute("alter table idempotency_keys add column response_size integer"
                    + " generated always as (octet_length(response_body)) stored");
            new IdempotencySchemaMigrator(dataSource, TABLE, true).migrate(); // adopted as it is
            PostgresPartitionMaintenance maintenance = hourly(dataSource, 2, Duration.ofSeconds(5));

            assertThat(maintenance.createAhead(false).created()).hasSize(3);

            PartitionedPostgresIdempotencyStore store = new PartitionedPostgresIdempotencyStore(dataSource, TABLE);
            ScopedKey key = new ScopedKey("", "POST /x", UUID.randomUUID().toString());
            ClaimResult claim = store.claim(new ClaimRequest(key, HASH, Duration.ofDays(1), Duration.ofMillis(500),
                    Duration.ofMinutes(5)));
            assertThat(claim).isInstanceOf(ClaimResult.Claimed.class);
            assertThat(store.complete(key, ((ClaimResult.Claimed) claim).fencingToken(),
                    new StoredResponse(201, List.of(), "created".getBytes()))).isTrue();
            assertThat(jdbc.queryForObject("select response_size from idempotency_keys where idempotency_key = ?",
                    Integer.class, key.key())).as("the column still fills itself").isEqualTo(7);
        }
    }

    @Test
    void creatingAheadDropsNothingAndDroppingCreatesNothing() {
        try (HikariDataSource dataSource = partitionedDatabase()) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            PostgresPartitionMaintenance maintenance = hourly(dataSource, 2, Duration.ofSeconds(5));
            attachPartition(jdbc, "idempotency_keys_old", "now() - interval '3 days'", "now() - interval '2 days'");
            assertThat(maintenance.coversNow()).isFalse();

            PostgresPartitionMaintenance.Run created = maintenance.createAhead(false);

            assertThat(created.created()).hasSize(3);
            assertThat(created.dropped()).isEmpty();
            assertThat(maintenance.coversNow()).isTrue();
            assertThat(maintenance.partitions()).extracting(PostgresPartitionMaintenance.Partition::name)
                    .contains("idempotency_keys_old");

            dropTheNewestPartition(jdbc, maintenance);
            PostgresPartitionMaintenance.Run dropped = maintenance.dropExpired(Duration.ofDays(1));

            assertThat(dropped.dropped()).containsExactly("idempotency_keys_old");
            assertThat(dropped.created()).isEmpty();
            assertThat(maintenance.partitions()).hasSize(2);
        }
    }

    /**
     * A concurrent detach waits for the requests in progress on the table, holding no lock meanwhile: as long as the
     * detach wait allows, not just the DDL lock timeout, which a request longer than it would make every detach give
     * up. The statements after it wait the DDL lock timeout again.
     */
    @Test
    void aDetachWaitsForTheRequestsInProgressAsLongAsTheDetachWait() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = partitionedDatabase(database)) {
            // five times the DDL lock timeout
            assertTheDetachOutwaitsARequestInProgress(database, dataSource, dataSource, 1000);
        }
    }

    /**
     * Drops an expired partition while a request in progress that has read the table stays open for
     * {@code heldMillis}: the maintenance, on {@code maintenancePool}, waits for it (its DDL lock timeout is 200 ms).
     */
    private void assertTheDetachOutwaitsARequestInProgress(TestPostgres.Database database, HikariDataSource dataSource,
                                                          HikariDataSource maintenancePool, long heldMillis)
            throws Exception {
        JdbcTemplate jdbc = new JdbcTemplate(dataSource);
        PostgresPartitionMaintenance maintenance = new PostgresPartitionMaintenance(maintenancePool, TABLE,
                Duration.ofHours(1), 1, Duration.ofMillis(200), Duration.ofSeconds(30));
        attachPartition(jdbc, "idempotency_keys_expired", "now() - interval '5 days'", "now() - interval '4 days'");
        insertRecord(jdbc, "expired-key", "now() - interval '5 days' + interval '1 minute'");

        try (java.sql.Connection request = dataSource.getConnection()) {
            request.setAutoCommit(false);
            request.createStatement().execute("select count(*) from idempotency_keys");
            CompletableFuture<PostgresPartitionMaintenance.Run> run =
                    Async.supply(() -> maintenance.dropExpired(Duration.ofDays(1)));
            database.awaitLockWaiter(Duration.ofSeconds(10));
            Thread.sleep(heldMillis);
            request.commit();

            assertThat(run.get(30, TimeUnit.SECONDS).dropped()).containsExactly("idempotency_keys_expired");
        }
    }

    /**
     * A {@code statement_timeout} on the pool's connections (a common bound on slow statements) must not cut the
     * concurrent detach's wait for the requests in progress short: cancelled, it leaves the detach pending, which a
     * later run can finish only within the DDL lock timeout, and meanwhile PostgreSQL refuses every other detach.
     */
    @Test
    void aStatementTimeoutOnThePoolDoesNotCutTheDetachsWaitShort() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = partitionedDatabase(database);
             HikariDataSource timedOut = database.dataSource(1,
                     config -> config.setConnectionInitSql("set statement_timeout = '500ms'"))) {
            // three times the statement timeout
            assertTheDetachOutwaitsARequestInProgress(database, dataSource, timedOut, 1500);
            assertThat(new JdbcTemplate(timedOut).queryForObject("show statement_timeout", String.class))
                    .as("the connection goes back with its statement timeout").isEqualTo("500ms");
        }
    }

    /**
     * The detach and the drop are two statements: a run can end between them (the process stopped, the connection
     * lost, or here the drop not getting its lock in time). The table is then no partition any more, so listing the
     * partitions no longer finds it: a later run must still drop it, or its records stay forever.
     */
    @Test
    void aPartitionDetachedButNotDroppedIsDroppedByALaterRun() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = partitionedDatabase(database)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            // the detach may wait a minute for the readers, the drop after it only the DDL lock timeout
            PostgresPartitionMaintenance maintenance = new PostgresPartitionMaintenance(dataSource, TABLE,
                    Duration.ofHours(1), 2, Duration.ofSeconds(3), Duration.ofMinutes(1));
            maintenance.createAhead(false);
            attachPartition(jdbc, "idempotency_keys_expired", "now() - interval '5 days'", "now() - interval '4 days'");
            insertRecord(jdbc, "expired-key", "now() - interval '5 days' + interval '1 minute'");

            try (java.sql.Connection reader = dataSource.getConnection();
                 java.sql.Connection laterReader = dataSource.getConnection()) {
                // someone reads the old partition itself: the detach waits for them
                reader.setAutoCommit(false);
                reader.createStatement().execute("select count(*) from idempotency_keys_expired");
                CompletableFuture<PostgresPartitionMaintenance.Run> run =
                        Async.supply(() -> maintenance.dropExpired(Duration.ofDays(1)));
                database.awaitLockWaiter(Duration.ofSeconds(10));
                // another reader queues behind the detach, so it has the table between the detach and the drop
                laterReader.setAutoCommit(false);
                CompletableFuture<Void> queued = Async.run(() -> {
                    try {
                        laterReader.createStatement().execute(
                                "lock table idempotency_keys_expired in access share mode");
                    } catch (java.sql.SQLException e) {
                        throw new IllegalStateException(e);
                    }
                });
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (database.lockWaiters() < 2) {
                    assertThat(System.nanoTime()).as("the second reader queues").isLessThan(deadline);
                    Thread.sleep(10);
                }
                reader.commit();
                queued.get(10, TimeUnit.SECONDS);

                assertThatThrownBy(() -> run.get(30, TimeUnit.SECONDS)).as("the drop did not get its lock")
                        .satisfies(e -> assertThat(PostgresPartitionMaintenance.isLockNotAvailable(e)).isTrue());
                laterReader.commit();
            }
            assertThat(maintenance.partitions()).extracting(PostgresPartitionMaintenance.Partition::name)
                    .as("detached").doesNotContain("idempotency_keys_expired");

            List<String> toldDropped = new ArrayList<>();
            PostgresPartitionMaintenance.Run later = maintenance.dropExpired(Duration.ofDays(1), toldDropped::add);

            assertThat(later.dropped()).containsExactly("idempotency_keys_expired");
            assertThat(toldDropped).as("told as soon as it was dropped").containsExactly("idempotency_keys_expired");
            assertThat(jdbc.queryForObject("select count(*) from pg_tables where tablename = 'idempotency_keys_expired'"
                    + " and schemaname = current_schema()", Integer.class)).as("dropped by the later run").isZero();
        }
    }

    /**
     * PostgreSQL lets a table have one partition pending a concurrent detach at a time, and refuses to start another
     * detach until that one is finalized. A detach interrupted (a long reader of the table) while an older partition
     * was kept for a record claimed under a longer retention must not stop removal once that older one has expired
     * too: the pending detach is finished first, then the older partition goes. So it is also when the partition no
     * longer counts as expired: the retention was raised since (a longer TTL after a restart; six days here, within
     * which the pending partition, up to four days ago, lies and the older one does not). Its records went out of the
     * table's sight when the detach began, and skipping it would fail every run on the older partition until the
     * longer retention had passed.
     */
    @ParameterizedTest(name = "retention {0} days")
    @ValueSource(ints = {1, 6})
    void aPendingDetachIsFinishedBeforeAnOlderPartitionIsDetached(int retentionDays) throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = partitionedDatabase(database)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            // a run that gives up soon behind the reader; the run under test may wait as long as a busy server needs
            PostgresPartitionMaintenance impatient = hourly(dataSource, 2, Duration.ofMillis(500));
            PostgresPartitionMaintenance maintenance = hourly(dataSource, 2, Duration.ofSeconds(10));
            maintenance.createAhead(false);
            leaveADetachPendingBesideAnOlderKeptPartition(dataSource, impatient);
            assertThat(maintenance.partitions()).filteredOn(PostgresPartitionMaintenance.Partition::detachPending)
                    .extracting(PostgresPartitionMaintenance.Partition::name)
                    .containsExactly("idempotency_keys_expired");
            // the older partition's last record has expired since
            jdbc.update("update idempotency_keys set expires_at = now() - interval '1 minute'"
                    + " where idempotency_key = 'long-ttl'");

            PostgresPartitionMaintenance.Run run = maintenance.dropExpired(Duration.ofDays(retentionDays));

            assertThat(run.dropped()).containsExactlyInAnyOrder("idempotency_keys_expired", "idempotency_keys_kept");
            assertThat(maintenance.partitions()).extracting(PostgresPartitionMaintenance.Partition::name)
                    .doesNotContain("idempotency_keys_expired", "idempotency_keys_kept");
        }
    }

    /**
     * Partitions four to five days old ({@code idempotency_keys_expired}, its record expired) and eight to nine days old
     * ({@code idempotency_keys_kept}, kept for a record claimed under a longer retention, which expires in an hour);
     * a run with a one-day retention whose detach of the newer one a long reader of the table interrupted, leaving it
     * pending.
     */
    private static void leaveADetachPendingBesideAnOlderKeptPartition(HikariDataSource dataSource,
                                                                      PostgresPartitionMaintenance maintenance)
            throws Exception {
        JdbcTemplate jdbc = new JdbcTemplate(dataSource);
        attachPartition(jdbc, "idempotency_keys_kept", "now() - interval '9 days'", "now() - interval '8 days'");
        attachPartition(jdbc, "idempotency_keys_expired", "now() - interval '5 days'", "now() - interval '4 days'");
        insertRecord(jdbc, "long-ttl", "now() - interval '9 days' + interval '1 minute'", "now() + interval '1 hour'");
        insertRecord(jdbc, "expired-key", "now() - interval '5 days' + interval '1 minute'");
        try (java.sql.Connection reader = dataSource.getConnection()) {
            // a long reader of the table: the concurrent detach waits for it, and gives up after its lock timeout
            reader.setAutoCommit(false);
            reader.createStatement().execute("select count(*) from idempotency_keys");
            assertThatThrownBy(() -> maintenance.dropExpired(Duration.ofDays(1))).as("the detach interrupted")
                    .satisfies(e -> assertThat(PostgresPartitionMaintenance.isLockNotAvailable(e)).isTrue());
            reader.commit();
        }
    }

    /**
     * A detached table whose drop keeps failing — here an operator made a view on the partition, and a drop without
     * CASCADE refuses to take it along — must not stop retention: later runs still drop the expired partitions and the
     * other detached tables, report the one they could not drop, and never drop the operator's view.
     */
    @Test
    void aDetachedTableThatCannotBeDroppedIsReportedAndHoldsUpNothingElse() {
        try (HikariDataSource dataSource = partitionedDatabase()) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            PostgresPartitionMaintenance maintenance = hourly(dataSource, 2, Duration.ofSeconds(3));
            maintenance.createAhead(false);
            attachPartition(jdbc, "idempotency_keys_viewed", "now() - interval '9 days'", "now() - interval '8 days'");
            insertRecord(jdbc, "viewed-key", "now() - interval '9 days' + interval '1 minute'");
            jdbc.execute("create view old_keys_report as select idempotency_key from idempotency_keys_viewed");

            assertThatThrownBy(() -> maintenance.dropExpired(Duration.ofDays(1)))
                    .as("detached, then its drop refused because of the view")
                    .hasMessageContaining("idempotency_keys_viewed")
                    .satisfies(e -> assertThat(PostgresPartitionMaintenance.isLockNotAvailable(e)).isFalse());
            assertThat(maintenance.partitions()).extracting(PostgresPartitionMaintenance.Partition::name)
                    .doesNotContain("idempotency_keys_viewed");

            // another table detached for removal and not dropped yet, and a partition that has expired since
            jdbc.execute("create table idempotency_keys_left (like idempotency_keys including defaults)");
            jdbc.execute("do $$ begin execute format('comment on table idempotency_keys_left is %L', format("
                    + "'idempotency: detached from %I.%I to be dropped', current_schema(), 'idempotency_keys')); end $$");
            attachPartition(jdbc, "idempotency_keys_expired", "now() - interval '5 days'", "now() - interval '4 days'");
            insertRecord(jdbc, "expired-key", "now() - interval '5 days' + interval '1 minute'");

            for (int i = 1; i <= 2; i++) {
                PostgresPartitionMaintenance.Run run = maintenance.dropExpired(Duration.ofDays(1));

                assertThat(run.skipped()).isFalse();
                assertThat(run.dropped()).as("run %d", i).containsExactlyInAnyOrderElementsOf(
                        i == 1 ? List.of("idempotency_keys_left", "idempotency_keys_expired") : List.of());
                assertThat(run.notDropped()).as("run %d reports the table it could not drop, and why", i)
                        .singleElement().asString()
                        .startsWith("idempotency_keys_viewed: ").contains("old_keys_report").doesNotContain("\n");
            }
            assertThat(jdbc.queryForObject("select count(*) from idempotency_keys where idempotency_key = 'expired-key'",
                    Integer.class)).isZero();
            assertThat(jdbc.queryForObject("select count(*) from pg_tables where tablename in ('idempotency_keys_left',"
                    + " 'idempotency_keys_expired') and schemaname = current_schema()", Integer.class)).isZero();
            assertThat(jdbc.queryForObject("select count(*) from old_keys_report", Integer.class))
                    .as("no CASCADE: the view and its table are left to whoever made the view").isEqualTo(1);

            jdbc.execute("drop view old_keys_report");
            PostgresPartitionMaintenance.Run afterTheViewIsGone = maintenance.dropExpired(Duration.ofDays(1));

            assertThat(afterTheViewIsGone.dropped()).containsExactly("idempotency_keys_viewed");
            assertThat(afterTheViewIsGone.notDropped()).isEmpty();
        }
    }

    /**
     * Another instance drops a detached partition while this one lists the partitions (creating its own at startup,
     * or checking one covers now). A statement whose snapshot predates the drop still sees the partition's catalog
     * rows, but PostgreSQL names a relation — and so shows its bounds — only while it exists: {@code pg_get_expr}
     * gives null. The listing must leave that partition out, not fail the run (or the start) on the missing bounds.
     * Here the snapshot is held by a transaction, for a race that otherwise lasts a few microseconds.
     */
    @Test
    void aPartitionDroppedWhileThePartitionsAreListedIsLeftOut() throws Exception {
        try (HikariDataSource dataSource = partitionedDatabase();
             Connection listing = dataSource.getConnection()) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            hourly(dataSource, 1, Duration.ofSeconds(5)).createAhead(false);
            attachPartition(jdbc, "idempotency_keys_expired", "now() - interval '5 days'", "now() - interval '4 days'");
            listing.setTransactionIsolation(Connection.TRANSACTION_REPEATABLE_READ);
            listing.setAutoCommit(false);
            listing.createStatement().execute("select 1"); // the snapshot, taken before the drop
            jdbc.execute("alter table idempotency_keys detach partition idempotency_keys_expired");
            jdbc.execute("drop table idempotency_keys_expired");
            DataSource beforeTheDrop = new DelegatingDataSource(dataSource) {
                @Override
                public Connection getConnection() {
                    return (Connection) Proxy.newProxyInstance(getClass().getClassLoader(),
                            new Class<?>[]{Connection.class}, (proxy, method, args) -> {
                                if (method.getName().equals("close") || method.getName().equals("setAutoCommit")) {
                                    return null; // stays in the transaction, with its snapshot
                                }
                                try {
                                    return method.invoke(listing, args);
                                } catch (InvocationTargetException e) {
                                    throw e.getCause();
                                }
                            });
                }
            };
            PostgresPartitionMaintenance maintenance = hourly(beforeTheDrop, 1, Duration.ofSeconds(5));

            assertThat(maintenance.partitions()).extracting(PostgresPartitionMaintenance.Partition::name)
                    .hasSize(2).doesNotContain("idempotency_keys_expired");
            assertThat(maintenance.coversNow()).isTrue();
            assertThat(maintenance.createAhead(true).created()).as("nothing missing").isEmpty();
            listing.rollback();
        }
    }

    @Test
    void creationWaitsForAnotherInstanceOnlyWhenAskedAndAtMostTheLockTimeout() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = partitionedDatabase(database)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            PostgresPartitionMaintenance maintenance = hourly(dataSource, 1, Duration.ofMillis(300));
            attachPartition(jdbc, "idempotency_keys_old", "now() - interval '3 days'", "now() - interval '2 days'");
            try (java.sql.Connection otherInstance = dataSource.getConnection();
                 java.sql.Statement statement = otherInstance.createStatement()) {
                // another instance creating partitions right now
                statement.execute("select pg_advisory_lock(" + CREATION_LOCK + ")");

                assertThat(maintenance.createAhead(false).skipped()).isTrue();
                assertThatThrownBy(() -> maintenance.createAhead(true))
                        .satisfies(e -> assertThat(PostgresPartitionMaintenance.isLockNotAvailable(e)).isTrue());
                assertThat(maintenance.dropExpired(Duration.ofDays(1)).dropped())
                        .as("dropping does not wait for creation").containsExactly("idempotency_keys_old");

                CompletableFuture<PostgresPartitionMaintenance.Run> waiting =
                        Async.supply(() -> hourly(dataSource, 1, Duration.ofSeconds(10)).createAhead(true));
                database.awaitLockWaiter(Duration.ofSeconds(5)); // it waits for the other instance, not skips
                statement.execute("select pg_advisory_unlock(" + CREATION_LOCK + ")");
                assertThat(waiting.get(10, TimeUnit.SECONDS).created()).hasSize(2);
            }
            assertThat(jdbc.queryForObject("select current_setting('lock_timeout')", String.class))
                    .as("the pooled connections are given back with their own lock timeout").isEqualTo("0");
        }
    }

    /**
     * Instances of a rolling deploy or a scaled-out service starting within the same moment, each with a pool of its
     * own, each doing what the starter does at startup: migrate, then create the partitions that are due, waiting for
     * an instance creating them. On an empty schema and on a table whose partitions for now and ahead are missing
     * (only an old one left), every instance starts — none meets a table or type that already exists, a deadlock, or
     * a lock not had while no partition covers now — and the table ends with each range made once, by one of them,
     * no table left unattached, and every partition with the table's indexes.
     */
    @Test
    void instancesStartingTogetherMakeEachPartitionOnce() throws Exception {
        int instances = 4;
        for (int round = 0; round < 4; round++) {
            boolean fresh = round % 2 == 0;
            TestPostgres.Database database = TestPostgres.newDatabase();
            if (!fresh) {
                try (HikariDataSource setup = partitionedDatabase(database)) {
                    attachPartition(new JdbcTemplate(setup), "idempotency_keys_old", "now() - interval '3 days'",
                            "now() - interval '2 days'");
                }
            }
            List<HikariDataSource> pools = new ArrayList<>();
            ExecutorService starting = Executors.newFixedThreadPool(instances);
            try {
                CountDownLatch go = new CountDownLatch(1);
                List<Future<Integer>> started = new ArrayList<>();
                for (int i = 0; i < instances; i++) {
                    HikariDataSource pool = database.dataSource(2);
                    pools.add(pool);
                    started.add(starting.submit(() -> {
                        go.await();
                        new IdempotencySchemaMigrator(pool, TABLE, true).migrate();
                        PostgresPartitionMaintenance maintenance = hourly(pool, 7, Duration.ofSeconds(2));
                        try {
                            return maintenance.createAhead(true).created().size();
                        } catch (IllegalStateException e) {
                            // as the starter: another instance took longer than the lock timeout, and made now's
                            if (PostgresPartitionMaintenance.isLockNotAvailable(e) && maintenance.coversNow()) {
                                return 0;
                            }
                            throw e;
                        }
                    }));
                }
                go.countDown();
                int created = 0;
                for (Future<Integer> instance : started) {
                    created += instance.get(60, TimeUnit.SECONDS);
                }

                String where = " where c.relnamespace = current_schema()::regnamespace";
                long attached = database.queryLong(
                        "select count(*) from pg_inherits where inhparent = to_regclass('idempotency_keys')");
                assertThat(attached).as("round %d: now and 7 ahead, each made once", round)
                        .isEqualTo(created + (fresh ? 0 : 1)).isGreaterThanOrEqualTo(fresh ? 8 : 9);
                assertThat(database.queryLong("select count(*) from pg_class c" + where
                        + " and c.relkind in ('r', 'p') and not c.relispartition")).as("round %d: the table, its"
                        + " migration history and nothing left unattached", round).isEqualTo(2);
                assertThat(database.queryLong("select count(*) from pg_index i join pg_class c on c.oid = i.indrelid"
                        + where + " and c.relname like 'idempotency_keys%'")).as("round %d: three indexes each", round)
                        .isEqualTo(3 * (attached + 1));
                assertThat(hourly(pools.get(0), 7, Duration.ofSeconds(2)).coversNow()).isTrue();
            } finally {
                starting.shutdownNow();
                pools.forEach(HikariDataSource::close);
            }
        }
    }

    /**
     * Two instances keep the partitions at once — one-second partitions, so that each of their runs creates, attaches,
     * detaches and drops — while requests claim new keys, some of them held open for longer than a partition lasts. No
     * claim fails or is kept waiting by a partition change, no run fails, and every claim's record is there once its
     * transaction has committed (a partition is dropped only once all its records have expired), while the partitions
     * whose records all have expired go.
     */
    @Test
    void twoInstancesKeepingThePartitionsWhileRequestsClaimLoseNoClaim() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource first = partitionedDatabase(database); HikariDataSource second = database.dataSource(4);
             HikariDataSource requests = database.dataSource(6)) {
            PartitionedPostgresIdempotencyStore store = new PartitionedPostgresIdempotencyStore(requests, TABLE);
            Transactions transactions = new SpringTransactions(new DataSourceTransactionManager(requests));
            JdbcTemplate jdbc = new JdbcTemplate(requests);
            List<PostgresPartitionMaintenance> maintainers = List.of(first, second).stream().map(pool ->
                    new PostgresPartitionMaintenance(pool, TABLE, Duration.ofSeconds(1), 3, Duration.ofSeconds(2),
                            Duration.ofSeconds(30))).toList();
            maintainers.get(0).createAhead(true);

            AtomicBoolean stop = new AtomicBoolean();
            AtomicInteger claimed = new AtomicInteger();
            AtomicInteger dropped = new AtomicInteger();
            List<String> problems = new CopyOnWriteArrayList<>();
            List<CompletableFuture<Void>> claimers = new ArrayList<>();
            for (int thread = 0; thread < 4; thread++) {
                int longEvery = 20 + thread;
                claimers.add(Async.run(() -> {
                    for (int i = 1; !stop.get(); i++) {
                        String key = UUID.randomUUID().toString();
                        boolean longRequest = i % longEvery == 0;
                        Transactions.Transaction transaction = transactions.begin();
                        try {
                            // kept past its commit and the look below, and then left to expire (a long request's
                            // record keeps its partition meanwhile), so that the partitions it is not in go
                            ClaimResult result = store.claim(new ClaimRequest(new ScopedKey("", "POST /x", key), HASH,
                                    Duration.ofSeconds(longRequest ? 30 : 3), Duration.ofMillis(500)));
                            if (longRequest) {
                                Thread.sleep(1500); // a request that outlasts its partition's interval
                            }
                            transaction.commit();
                            if (!(result instanceof ClaimResult.Claimed)) {
                                problems.add("claim " + key + ": " + result);
                            }
                        } catch (Exception e) {
                            problems.add("claim " + key + ": " + e);
                        } finally {
                            transaction.rollback();
                        }
                        Long records = jdbc.queryForObject("select count(*) from idempotency_keys"
                                + " where idempotency_key = ?", Long.class, key);
                        if (records != 1) {
                            problems.add("claim " + key + " left " + records + " records");
                        }
                        claimed.incrementAndGet();
                    }
                }));
            }
            // at least 6 s, and on until a partition has gone, for at most a minute: on a loaded machine the runs come
            // less often, and the first run that finds a partition whose records have all expired may come later
            long start = System.nanoTime();
            long least = start + Duration.ofSeconds(6).toNanos();
            long most = start + Duration.ofMinutes(1).toNanos();
            List<CompletableFuture<Void>> runs = maintainers.stream().map(maintenance -> Async.run(() -> {
                for (long now = System.nanoTime(); now < least || (dropped.get() == 0 && now < most);
                     now = System.nanoTime()) {
                    try {
                        dropped.addAndGet(maintenance.run(Duration.ofSeconds(1)).dropped().size());
                    } catch (RuntimeException e) {
                        problems.add("maintenance: " + e);
                    }
                }
            })).toList();
            try {
                for (CompletableFuture<Void> run : runs) {
                    run.get(90, TimeUnit.SECONDS);
                }
            } finally {
                stop.set(true);
                for (CompletableFuture<Void> claimer : claimers) {
                    claimer.get(30, TimeUnit.SECONDS);
                }
            }

            assertThat(problems).isEmpty();
            assertThat(claimed.get()).isPositive();
            assertThat(dropped.get()).as("partitions went while requests claimed").isPositive();
            assertThat(maintainers.get(1).coversNow()).isTrue();
        }
    }

    /**
     * A {@code statement_timeout} on the pool's connections (a common bound on slow statements) shorter than the DDL
     * lock timeout must not cut the maintenance's lock waits short: waiting for another instance's creation, or for the
     * table's lock to attach a partition, ends as a lock not had in time, which a starting application tells apart
     * (it starts when a partition covers the current time) and the next run tries again; cancelled by the statement
     * timeout, it was a failure of any other kind, and an instance starting beside another one did not start.
     */
    @Test
    void aStatementTimeoutOnThePoolDoesNotCutTheLockWaitsShort() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = partitionedDatabase(database);
             HikariDataSource timedOut = database.dataSource(1,
                     config -> config.setConnectionInitSql("set statement_timeout = '300ms'"))) {
            // more than three times the statement timeout
            PostgresPartitionMaintenance maintenance = hourly(timedOut, 1, Duration.ofSeconds(1));
            try (java.sql.Connection otherInstance = dataSource.getConnection();
                 java.sql.Statement statement = otherInstance.createStatement()) {
                statement.execute("select pg_advisory_lock(" + CREATION_LOCK + ")"); // creating partitions now
                assertThatThrownBy(() -> maintenance.createAhead(true)).as("waiting for the other instance")
                        .satisfies(e -> assertThat(PostgresPartitionMaintenance.isLockNotAvailable(e)).isTrue());
                statement.execute("select pg_advisory_unlock(" + CREATION_LOCK + ")");
            }
            try (java.sql.Connection other = dataSource.getConnection();
                 java.sql.Statement statement = other.createStatement()) {
                other.setAutoCommit(false);
                statement.execute("lock table idempotency_keys in share update exclusive mode"); // as an ATTACH would
                assertThatThrownBy(() -> maintenance.createAhead(false)).as("the attach waiting for the table")
                        .satisfies(e -> assertThat(PostgresPartitionMaintenance.isLockNotAvailable(e)).isTrue());
                other.rollback();
            }
            assertThat(maintenance.createAhead(false).created()).hasSize(2);
            assertThat(new JdbcTemplate(timedOut).queryForObject("show statement_timeout", String.class))
                    .as("the connection goes back with its statement timeout").isEqualTo("300ms");
        }
    }

    /**
     * Two instances drop expired partitions at the same moment. While the first one's concurrent detach waits for a
     * request in progress, PostgreSQL refuses any other detach of the table, and finishing the pending one would wait
     * for the first: the second instance skips its run at once, neither failing nor waiting, and the first drops every
     * expired partition once the request has ended.
     */
    @Test
    void whileOneInstanceDropsPartitionsAnotherSkipsItsRun() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = partitionedDatabase(database);
             HikariDataSource otherInstance = database.dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            attachPartition(jdbc, "idempotency_keys_older", "now() - interval '6 days'", "now() - interval '5 days'");
            attachPartition(jdbc, "idempotency_keys_old", "now() - interval '4 days'", "now() - interval '3 days'");
            insertRecord(jdbc, "older-key", "now() - interval '6 days' + interval '1 minute'");
            insertRecord(jdbc, "old-key", "now() - interval '4 days' + interval '1 minute'");
            PostgresPartitionMaintenance first = new PostgresPartitionMaintenance(dataSource, TABLE,
                    Duration.ofHours(1), 1, Duration.ofSeconds(5), Duration.ofSeconds(30));
            PostgresPartitionMaintenance second = new PostgresPartitionMaintenance(otherInstance, TABLE,
                    Duration.ofHours(1), 1, Duration.ofSeconds(5), Duration.ofSeconds(30));

            try (java.sql.Connection request = dataSource.getConnection()) {
                request.setAutoCommit(false);
                request.createStatement().execute("select count(*) from idempotency_keys");
                CompletableFuture<PostgresPartitionMaintenance.Run> dropping =
                        Async.supply(() -> first.dropExpired(Duration.ofDays(1)));
                database.awaitLockWaiter(Duration.ofSeconds(10)); // its detach waits for the request

                long started = System.nanoTime();
                PostgresPartitionMaintenance.Run skipped = second.dropExpired(Duration.ofDays(1));

                assertThat(Duration.ofNanos(System.nanoTime() - started)).as("not waiting for the first")
                        .isLessThan(Duration.ofSeconds(5));
                assertThat(skipped.skipped()).isTrue();
                assertThat(skipped.dropped()).isEmpty();
                assertThat(dropping).as("the first still waits for the request").isNotDone();
                request.commit();

                assertThat(dropping.get(30, TimeUnit.SECONDS).dropped())
                        .containsExactly("idempotency_keys_older", "idempotency_keys_old");
            }
            assertThat(first.partitions()).isEmpty();
        }
    }

    /**
     * The maintenance runs its DDL in auto-commit (a concurrent detach cannot run in a transaction block), and gives
     * the connection back as it came: a pool that does not reset what a borrower changed (a single shared connection,
     * a pool without that setting) would otherwise hand the application a connection that commits each statement on
     * its own, where it expects to commit its work whole.
     */
    @Test
    void aConnectionThatDoesNotAutoCommitIsGivenBackSo() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = partitionedDatabase(database)) {
            attachPartition(new JdbcTemplate(dataSource), "idempotency_keys_old", "now() - interval '3 days'",
                    "now() - interval '2 days'");
        }
        org.springframework.jdbc.datasource.SingleConnectionDataSource shared =
                new org.springframework.jdbc.datasource.SingleConnectionDataSource(database.url(), database.user(),
                        database.password() == null ? "" : database.password(), true);
        shared.setAutoCommit(false);
        try {
            PostgresPartitionMaintenance.Run run = hourly(shared, 1, Duration.ofSeconds(5)).run(Duration.ofDays(1));

            assertThat(run.dropped()).containsExactly("idempotency_keys_old");
            try (Connection connection = shared.getConnection()) {
                assertThat(connection.getAutoCommit()).as("given back as it came").isFalse();
            }
        } finally {
            shared.destroy();
        }
    }

    /**
     * A setting the run cannot restore (the connection refuses the statement, here the first restore: the
     * statement_timeout's) fails the run, and the others are still restored: the connection goes back without
     * auto-commit, as it came, and with its own lock timeout.
     */
    @Test
    void aSettingThatCannotBeRestoredLeavesTheOthersRestored() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        partitionedDatabase(database).close();
        Connection physical = java.sql.DriverManager.getConnection(database.url(), database.user(),
                database.password());
        try (Statement statement = physical.createStatement()) {
            statement.execute("set lock_timeout = '7s'");
            statement.execute("set statement_timeout = '60s'");
        }
        physical.setAutoCommit(false);
        AtomicBoolean refuseRestore = new AtomicBoolean(true);
        Connection refusing = (Connection) Proxy.newProxyInstance(getClass().getClassLoader(),
                new Class<?>[] {Connection.class}, (proxy, method, args) -> {
                    if (method.getName().equals("prepareStatement")
                            && ((String) args[0]).startsWith("SELECT set_config(") && refuseRestore.getAndSet(false)) {
                        throw new SQLException("statement refused", "XX000");
                    }
                    try {
                        return method.invoke(physical, args);
                    } catch (InvocationTargetException e) {
                        throw e.getCause();
                    }
                });
        org.springframework.jdbc.datasource.SingleConnectionDataSource shared =
                new org.springframework.jdbc.datasource.SingleConnectionDataSource(refusing, true);
        try {
            assertThatThrownBy(() -> hourly(shared, 1, Duration.ofSeconds(5)).createAhead(false))
                    .isInstanceOf(IllegalStateException.class).hasMessageContaining("statement refused");
            assertThat(refuseRestore).as("the restore refused").isFalse();

            try (Connection connection = shared.getConnection(); Statement statement = connection.createStatement()) {
                assertThat(connection.getAutoCommit()).as("given back as it came").isFalse();
                try (var rs = statement.executeQuery("show lock_timeout")) {
                    rs.next();
                    assertThat(rs.getString(1)).as("the lock timeout it came with").isEqualTo("7s");
                }
            }
        } finally {
            physical.close();
        }
    }

    /**
     * Two applications keep their tables of one name in two schemas of one database. One's maintenance, waiting for a
     * lock on its own table, holds no lock the other's needs: the other creates its partitions instead of skipping
     * its run as though it were an instance of the same application.
     */
    @Test
    void maintenanceOfATableOfTheSameNameInAnotherSchemaDoesNotHoldThisOneUp() throws Exception {
        TestPostgres.Database first = TestPostgres.newDatabase();
        TestPostgres.Database second = TestPostgres.newDatabase();
        try (HikariDataSource firstPool = partitionedDatabase(first);
             HikariDataSource secondPool = partitionedDatabase(second);
             java.sql.Connection holder = firstPool.getConnection();
             java.sql.Statement statement = holder.createStatement()) {
            holder.setAutoCommit(false);
            statement.execute("lock table idempotency_keys in share update exclusive mode"); // attaching waits
            CompletableFuture<PostgresPartitionMaintenance.Run> waiting = Async.supply(() ->
                    hourly(firstPool, 1, Duration.ofSeconds(10)).createAhead(false));
            first.awaitLockWaiter(Duration.ofSeconds(5)); // the first one's run is under way, waiting on its table

            PostgresPartitionMaintenance.Run other = hourly(secondPool, 1, Duration.ofSeconds(10)).createAhead(false);

            holder.rollback();
            assertThat(other.skipped()).as("skipped for the other schema's run").isFalse();
            assertThat(other.created()).hasSize(2);
            assertThat(waiting.get(10, TimeUnit.SECONDS).created()).hasSize(2);
        }
    }

    @Test
    void maintenanceOfATableThatIsNotThereSaysSo() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            assertThatThrownBy(() -> hourly(dataSource, 1, Duration.ofSeconds(1)).createAhead(false))
                    .hasMessageContaining("table idempotency_keys does not exist in the connection's schema");
        }
    }

    @Test
    void theUniqueIndexAloneDoesNotKeepAKeyUniqueAcrossPartitions() {
        try (HikariDataSource dataSource = partitionedDatabase()) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            hourly(dataSource, 2, Duration.ofSeconds(5)).run(Duration.ofDays(1));

            insertRecord(jdbc, "twice", "now()");
            insertRecord(jdbc, "twice", "now() + interval '1 hour'");

            // why the partitioned store takes an advisory lock before it looks a key up
            assertThat(jdbc.queryForObject("select count(*) from idempotency_keys where idempotency_key = 'twice'",
                    Integer.class)).isEqualTo(2);
        }
    }

    @Test
    void aKeysLockIsTheOneEveryVersionTakes() throws Exception {
        // nothing but this lock keeps a key unique across partitions, and during a rolling upgrade instances of two
        // versions claim side by side: each must wait for the lock the other holds, so its name and hash are fixed
        try (HikariDataSource dataSource = partitionedDatabase()) {
            hourly(dataSource, 2, Duration.ofSeconds(5)).run(Duration.ofDays(1));
            PartitionedPostgresIdempotencyStore store = new PartitionedPostgresIdempotencyStore(dataSource, TABLE);
            Transactions transactions = new SpringTransactions(new DataSourceTransactionManager(dataSource));
            ScopedKey key = new ScopedKey("alice", "POST /payments", UUID.randomUUID().toString());

            try (Connection other = dataSource.getConnection(); Statement statement = other.createStatement()) {
                other.setAutoCommit(false);
                statement.execute("select pg_advisory_xact_lock(hashtextextended('idempotency:5:alice14:POST /payments"
                        + key.key() + "', 0))");
                Transactions.Transaction transaction = transactions.begin();
                try {
                    assertThat(store.claim(new ClaimRequest(key, HASH, Duration.ofDays(1), Duration.ofMillis(300))))
                            .as("the key's lock is held by another instance").isInstanceOf(ClaimResult.Busy.class);
                } finally {
                    transaction.rollback();
                }
                other.rollback();
            }
            Transactions.Transaction transaction = transactions.begin();
            try {
                assertThat(store.claim(request(key))).isInstanceOf(ClaimResult.Claimed.class);
            } finally {
                transaction.rollback();
            }
        }
    }

    @Test
    void twoRequestsWithOneKeyOnEitherSideOfAPartitionBoundaryExecuteOnce() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = partitionedDatabase(database)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            Duration interval = Duration.ofSeconds(2);
            PostgresPartitionMaintenance maintenance =
                    new PostgresPartitionMaintenance(dataSource, TABLE, interval, 10, Duration.ofSeconds(5));
            maintenance.run(Duration.ofDays(1));
            PartitionedPostgresIdempotencyStore store = new PartitionedPostgresIdempotencyStore(dataSource, TABLE);
            Transactions transactions = new SpringTransactions(new DataSourceTransactionManager(dataSource));
            ScopedKey key = new ScopedKey("", "POST /boundary", UUID.randomUUID().toString());

            // the first request claims; the second starts after the end of the partition the first one's record is in
            Transactions.Transaction first = transactions.begin();
            String token = ((ClaimResult.Claimed) store.claim(request(key))).fencingToken();
            String firstPartition = jdbc.queryForObject("select tableoid::regclass::text from idempotency_keys"
                    + " where idempotency_key = ?", String.class, key.key());
            long boundary = maintenance.partitions().stream()
                    .filter(partition -> partition.name().equals(firstPartition)).findFirst().orElseThrow()
                    .to().toEpochMilli();

            Thread.sleep(Math.max(0, boundary + 300 - jdbc.queryForObject(
                    "select (extract(epoch from clock_timestamp()) * 1000)::bigint", Long.class)));
            CompletableFuture<ClaimResult> second = Async.supply(() -> {
                Transactions.Transaction transaction = transactions.begin();
                try {
                    long started = new JdbcTemplate(dataSource).queryForObject(
                            "select (extract(epoch from now()) * 1000)::bigint", Long.class);
                    assertThat(started).as("the second request starts after the boundary").isGreaterThan(boundary);
                    return store.claim(request(key));
                } finally {
                    transaction.rollback();
                }
            });
            database.awaitLockWaiter(Duration.ofSeconds(30)); // the second request waits for the first
            assertThat(second).as("the second request waits for the first").isNotDone();
            StoredResponse answer = new StoredResponse(201, List.of(), "once".getBytes());
            assertThat(store.complete(key, token, answer)).isTrue();
            first.commit();

            ClaimResult result = second.get(30, TimeUnit.SECONDS);
            assertThat(result).isInstanceOf(ClaimResult.Existing.class);
            assertThat(((ClaimResult.Existing) result).record().status()).isEqualTo(RecordStatus.SUCCEEDED);
            assertThat(((ClaimResult.Existing) result).record().response()).isEqualTo(answer);
            assertThat(jdbc.queryForObject("select count(*) from idempotency_keys where idempotency_key = ?",
                    Integer.class, key.key())).isEqualTo(1);
        }
    }

    @Test
    void aFailedRecordInAnOlderPartitionIsTakenOverIntoTheCurrentOneAndStaysUnique() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = partitionedDatabase(database)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            hourly(dataSource, 2, Duration.ofSeconds(5)).run(Duration.ofDays(30));
            attachPartition(jdbc, "idempotency_keys_older", "now() - interval '3 days'", "now() - interval '2 days'");
            PartitionedPostgresIdempotencyStore store = new PartitionedPostgresIdempotencyStore(dataSource, TABLE);
            Transactions transactions = new SpringTransactions(new DataSourceTransactionManager(dataSource));
            ScopedKey key = new ScopedKey("", "POST /x", UUID.randomUUID().toString());
            // an attempt made in an older partition failed definitely
            jdbc.update("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash,"
                    + " fencing_token, created_at, expires_at) values ('', 'POST /x', ?, 'FAILED', ?,"
                    + " gen_random_uuid(), now() - interval '60 hours', now() + interval '1 day')", key.key(), HASH);

            // the retry takes it over, and a duplicate of the retry waits for it, then replays its answer
            Transactions.Transaction retry = transactions.begin();
            CompletableFuture<ClaimResult> duplicate;
            StoredResponse answer = new StoredResponse(201, List.of(), "retried".getBytes());
            try {
                ClaimResult taken = store.claim(request(key));
                assertThat(taken).isInstanceOf(ClaimResult.Claimed.class);
                assertThat(((ClaimResult.Claimed) taken).failedBefore()).isTrue();
                duplicate = Async.supply(() -> {
                    Transactions.Transaction transaction = transactions.begin();
                    try {
                        return store.claim(request(key));
                    } finally {
                        transaction.rollback();
                    }
                });
                database.awaitLockWaiter(Duration.ofSeconds(30));
                assertThat(duplicate).as("the duplicate waits for the retry").isNotDone();
                assertThat(store.complete(key, ((ClaimResult.Claimed) taken).fencingToken(), answer)).isTrue();
                retry.commit();
            } finally {
                retry.rollback();
            }
            ClaimResult replayed = duplicate.get(30, TimeUnit.SECONDS);
            assertThat(replayed).isInstanceOf(ClaimResult.Existing.class);
            assertThat(((ClaimResult.Existing) replayed).record().response()).isEqualTo(answer);
            assertThat(partitionsHolding(jdbc, key))
                    .as("one record, moved out of the older partition").hasSize(1)
                    .doesNotContain("idempotency_keys_older");
        }
    }

    /**
     * A takeover of a FAILED record writes it into the current partition: PostgreSQL moves the row, and a statement
     * that waited for the row and then finds it moved fails with 40001 ("tuple to be locked was already moved to
     * another partition"), at READ COMMITTED too. A renewal of the claim before it failed means "the claim is no
     * longer yours" then, as when the row stays where it is, not an error. Here one transaction marks the claim FAILED
     * and takes it over, for a race that otherwise lasts microseconds (the renewal's statement starting before the
     * FAILED mark commits, and reaching the row only after the takeover has moved it).
     */
    @Test
    void aRenewalThatFindsItsRecordMovedToAnotherPartitionIsRefusedNotFailed() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = partitionedDatabase(database)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            hourly(dataSource, 2, Duration.ofSeconds(5)).run(Duration.ofDays(30));
            attachPartition(jdbc, "idempotency_keys_older", "now() - interval '3 days'", "now() - interval '2 days'");
            PartitionedPostgresIdempotencyStore store = new PartitionedPostgresIdempotencyStore(dataSource, TABLE);
            Transactions transactions = new SpringTransactions(new DataSourceTransactionManager(dataSource));
            ScopedKey key = new ScopedKey("", "POST /x", UUID.randomUUID().toString());
            String token = UUID.randomUUID().toString();
            // an intent-first claim made in an older partition, its lease live
            jdbc.update("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash,"
                    + " fencing_token, created_at, expires_at, locked_until) values ('', 'POST /x', ?, 'PROCESSING',"
                    + " ?, ?::uuid, now() - interval '60 hours', now() + interval '1 day',"
                    + " now() + interval '5 minutes')",
                    key.key(), HASH, token);

            Transactions.Transaction failedAndRetried = transactions.begin();
            CompletableFuture<Boolean> renewal;
            try {
                assertThat(store.fail(key, token)).isTrue();
                ClaimResult retried = store.claim(request(key));
                assertThat(retried).isInstanceOf(ClaimResult.Claimed.class);
                renewal = Async.supply(() -> store.renew(key, token, Duration.ofMinutes(5)));
                database.awaitLockWaiter(Duration.ofSeconds(30));
                failedAndRetried.commit();
            } finally {
                failedAndRetried.rollback();
            }

            assertThat(renewal.get(30, TimeUnit.SECONDS)).as("the claim is no longer the renewal's").isFalse();
            assertThat(partitionsHolding(jdbc, key))
                    .as("one record, moved out of the older partition").hasSize(1)
                    .doesNotContain("idempotency_keys_older");
        }
    }

    /**
     * A batch delete locks the expired rows its statement's snapshot shows, one after another: a retry that takes over
     * an expired FAILED record meanwhile moves its row into the current partition, and the delete that then reaches
     * the row fails with 40001 — the cleanup failing on a record that is simply no longer expired. Here the record is
     * the last of many expired rows, so that the delete reaches it after the takeover has committed (most rounds; in
     * the others the delete takes it first and the retry claims the key afresh).
     */
    @Test
    void aBatchDeleteThatMeetsARowMovedByATakeoverGoesOn() throws Exception {
        try (HikariDataSource dataSource = partitionedDatabase()) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            hourly(dataSource, 2, Duration.ofSeconds(5)).run(Duration.ofDays(30));
            attachPartition(jdbc, "idempotency_keys_older", "now() - interval '3 days'", "now() - interval '2 days'");
            PartitionedPostgresIdempotencyStore store = new PartitionedPostgresIdempotencyStore(dataSource, TABLE);
            for (int round = 0; round < 5; round++) {
                jdbc.update("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash,"
                        + " fencing_token, response_status, created_at, expires_at) select '', 'POST /done', 'k' || g,"
                        + " 'SUCCEEDED', ?, gen_random_uuid(), 200, now() - interval '60 hours',"
                        + " now() - interval '2 hours' from generate_series(1, 50000) g", HASH);
                ScopedKey key = new ScopedKey("", "POST /x", UUID.randomUUID().toString());
                jdbc.update("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash,"
                        + " fencing_token, created_at, expires_at) values ('', 'POST /x', ?, 'FAILED', ?,"
                        + " gen_random_uuid(), now() - interval '60 hours', now() - interval '1 hour')",
                        key.key(), HASH);

                CompletableFuture<Integer> cleanup = Async.supply(() -> store.deleteExpired(100_000));
                Thread.sleep(30); // the delete's snapshot is taken, and it locks its way through the rows
                assertThat(store.claim(request(key))).isInstanceOf(ClaimResult.Claimed.class);

                assertThat(cleanup.get(60, TimeUnit.SECONDS)).as("round %d: every completed record deleted", round)
                        .isGreaterThanOrEqualTo(50_000);
                assertThat(jdbc.queryForList("select status from idempotency_keys where idempotency_key = ?",
                        String.class, key.key())).as("round %d: the retry's claim, once", round)
                        .containsExactly("PROCESSING");
            }
        }
    }

    @Test
    void aClaimOutsideATransactionKeepsTheKeysLockUntilItsRecordIsCommitted() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource pool = partitionedDatabase(database)) {
            hourly(pool, 2, Duration.ofSeconds(5)).run(Duration.ofDays(1));
            // the claim without a transaction stops before its look-up until released
            CountDownLatch lookingUp = new CountDownLatch(1);
            CountDownLatch release = new CountDownLatch(1);
            DataSource pausing = new DelegatingDataSource(pool) {
                @Override
                public Connection getConnection() throws SQLException {
                    Connection connection = super.getConnection();
                    if (!Thread.currentThread().getName().equals("without-transaction")) {
                        return connection;
                    }
                    return (Connection) Proxy.newProxyInstance(getClass().getClassLoader(),
                            new Class<?>[]{Connection.class}, (proxy, method, args) -> {
                                if (method.getName().equals("prepareStatement")
                                        && ((String) args[0]).contains("WITH existing AS")) {
                                    lookingUp.countDown();
                                    assertThat(release.await(30, TimeUnit.SECONDS)).isTrue();
                                }
                                try {
                                    return method.invoke(connection, args);
                                } catch (InvocationTargetException e) {
                                    throw e.getCause();
                                }
                            });
                }
            };
            PartitionedPostgresIdempotencyStore store = new PartitionedPostgresIdempotencyStore(pausing, TABLE);
            Transactions transactions = new SpringTransactions(new DataSourceTransactionManager(pausing));
            ScopedKey key = new ScopedKey("", "POST /no-transaction", UUID.randomUUID().toString());
            ExecutorService withoutTransaction = Executors.newSingleThreadExecutor(
                    runnable -> new Thread(runnable, "without-transaction"));
            try {
                Future<ClaimResult> outside = withoutTransaction.submit(() -> store.claim(request(key)));
                assertThat(lookingUp.await(30, TimeUnit.SECONDS)).isTrue();

                // a request in a transaction claims the key while the first one is between its lock and its look-up,
                // and commits only after the first one's claim has returned
                CountDownLatch insideClaimed = new CountDownLatch(1);
                CompletableFuture<ClaimResult> inside = Async.supply(() -> {
                    Transactions.Transaction transaction = transactions.begin();
                    try {
                        ClaimResult result = store.claim(request(key));
                        insideClaimed.countDown();
                        outside.get(30, TimeUnit.SECONDS);
                        transaction.commit();
                        return result;
                    } catch (Exception e) {
                        throw new IllegalStateException(e);
                    } finally {
                        transaction.rollback();
                    }
                });
                while (insideClaimed.getCount() > 0 && !inside.isDone() && database.lockWaiters() == 0) {
                    Thread.sleep(10); // either claimed at once, or waiting for the key's lock
                }
                release.countDown();

                List<ClaimResult> results =
                        List.of(outside.get(30, TimeUnit.SECONDS), inside.get(30, TimeUnit.SECONDS));
                assertThat(results).filteredOn(ClaimResult.Claimed.class::isInstance).as("claims that won").hasSize(1);
                assertThat(new JdbcTemplate(pool).queryForObject(
                        "select count(*) from idempotency_keys where idempotency_key = ?", Integer.class, key.key()))
                        .isEqualTo(1);
            } finally {
                release.countDown();
                withoutTransaction.shutdownNow();
            }
        }
    }

    @Test
    void partitionChangesNeverMakeAClaimWait() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = partitionedDatabase(database)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            PostgresPartitionMaintenance maintenance = hourly(dataSource, 2, Duration.ofSeconds(60));
            maintenance.run(Duration.ofDays(1));
            attachPartition(jdbc, "idempotency_keys_expired", "now() - interval '5 days'", "now() - interval '4 days'");
            // drop the newest partition, so that the run below must create and attach one while the long request runs
            dropTheNewestPartition(jdbc, maintenance);
            PartitionedPostgresIdempotencyStore store = new PartitionedPostgresIdempotencyStore(dataSource, TABLE);
            Transactions transactions = new SpringTransactions(new DataSourceTransactionManager(dataSource));

            // a long request holds its claim (and its transaction on the table) open
            Transactions.Transaction longRequest = holdAClaimOpen(store, transactions);
            try {
                CompletableFuture<PostgresPartitionMaintenance.Run> run =
                        Async.supply(() -> maintenance.run(Duration.ofDays(1)));
                database.awaitLockWaiter(Duration.ofSeconds(30)); // the detach waits for the long request

                List<Long> latencies = new ArrayList<>();
                for (int i = 0; i < 20; i++) {
                    long started = System.nanoTime();
                    ClaimResult result = claimANewKey(store, transactions);
                    latencies.add((System.nanoTime() - started) / 1_000_000);
                    assertThat(result).as("claim %d while partitions change", i).isInstanceOf(ClaimResult.Claimed.class);
                }
                System.out.println("[partitions] claim latencies (ms) while a detach waited: " + latencies);
                assertThat(run).as("the detach waits for the long request").isNotDone();

                longRequest.commit();
                PostgresPartitionMaintenance.Run done = run.get(60, TimeUnit.SECONDS);
                assertThat(done.dropped()).containsExactly("idempotency_keys_expired");
                assertThat(done.created()).hasSize(1);
            } finally {
                longRequest.rollback();
            }
        }
    }

    private static ClaimRequest request(ScopedKey key) {
        return new ClaimRequest(key, HASH, Duration.ofDays(1), Duration.ofSeconds(20));
    }

    /**
     * Maintenance of the table in hourly partitions, {@code ahead} of them kept ahead of now, whose statements wait at
     * most {@code ddlLockTimeout} for a lock.
     */
    private static PostgresPartitionMaintenance hourly(DataSource dataSource, int ahead, Duration ddlLockTimeout) {
        return new PostgresPartitionMaintenance(dataSource, TABLE, Duration.ofHours(1), ahead, ddlLockTimeout);
    }

    private static HikariDataSource partitionedDatabase() {
        return partitionedDatabase(TestPostgres.newDatabase());
    }

    private static HikariDataSource partitionedDatabase(TestPostgres.Database database) {
        HikariDataSource dataSource = database.dataSource(8);
        new IdempotencySchemaMigrator(dataSource, TABLE, true).migrate();
        return dataSource;
    }

    private static void attachPartition(JdbcTemplate jdbc, String name, String from, String to) {
        jdbc.execute("create table " + name + " (like idempotency_keys including defaults including constraints)");
        jdbc.execute("do $$ begin execute format('alter table idempotency_keys attach partition " + name
                + " for values from (%L) to (%L)', " + from + ", " + to + "); end $$");
    }

    private static void insertRecord(JdbcTemplate jdbc, String key, String createdAt) {
        insertRecord(jdbc, key, createdAt, createdAt + " + interval '1 day'");
    }

    /** A SUCCEEDED record of {@code key}, created and expiring at the SQL expressions given. */
    private static void insertRecord(JdbcTemplate jdbc, String key, String createdAt, String expiresAt) {
        jdbc.update("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash, fencing_token,"
                + " response_status, created_at, expires_at) values ('', 'POST /x', ?, 'SUCCEEDED', ?, gen_random_uuid(),"
                + " 200, " + createdAt + ", " + expiresAt + ")", key, HASH);
    }

    /**
     * An intent-first claim (PROCESSING) of {@code key}, created at the SQL expression given a day before its expiry,
     * its lease ending at {@code lockedUntil}.
     */
    private static void insertClaim(JdbcTemplate jdbc, String key, String createdAt, String lockedUntil) {
        jdbc.update("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash, fencing_token,"
                + " created_at, expires_at, locked_until) values ('', 'POST /x', ?, 'PROCESSING', ?, gen_random_uuid(), "
                + createdAt + ", " + createdAt + " + interval '1 day', " + lockedUntil + ")", key, HASH);
    }

    /** Claims a new key on another thread, as a new request would, allowing it to wait at most 500 ms for a lock. */
    private static ClaimResult claimANewKey(PartitionedPostgresIdempotencyStore store, Transactions transactions)
            throws Exception {
        return Async.supply(() -> {
            Transactions.Transaction transaction = transactions.begin();
            try {
                ClaimResult claimed = store.claim(new ClaimRequest(
                        new ScopedKey("", "POST /new", UUID.randomUUID().toString()), HASH,
                        Duration.ofDays(1), Duration.ofMillis(500)));
                transaction.commit();
                return claimed;
            } finally {
                transaction.rollback();
            }
        }).get(10, TimeUnit.SECONDS);
    }

    private static void dropTheNewestPartition(JdbcTemplate jdbc, PostgresPartitionMaintenance maintenance) {
        List<PostgresPartitionMaintenance.Partition> partitions = maintenance.partitions();
        jdbc.execute("drop table " + partitions.get(partitions.size() - 1).name());
    }

    /** A long request: its claim made, its transaction left open for the caller to end. */
    private static Transactions.Transaction holdAClaimOpen(PartitionedPostgresIdempotencyStore store,
                                                           Transactions transactions) {
        Transactions.Transaction longRequest = transactions.begin();
        try {
            assertThat(store.claim(request(new ScopedKey("", "POST /long", UUID.randomUUID().toString()))))
                    .isInstanceOf(ClaimResult.Claimed.class);
        } catch (RuntimeException | AssertionError e) {
            longRequest.rollback(); // left bound to the thread, it would fail every later test of this JVM
            throw e;
        }
        return longRequest;
    }

    /** The partition of each record of {@code key}. */
    private static List<String> partitionsHolding(JdbcTemplate jdbc, ScopedKey key) {
        return jdbc.queryForList("select tableoid::regclass::text from idempotency_keys where idempotency_key = ?",
                String.class, key.key());
    }
}
