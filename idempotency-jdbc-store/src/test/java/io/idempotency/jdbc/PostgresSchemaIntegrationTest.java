package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StoredResponse;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.transaction.support.TransactionTemplate;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The shipped schema: the plain script, the Flyway migration, and a configurable table name. */
class PostgresSchemaIntegrationTest {

    /** How long an instance waits for another one's migration lock in these tests. */
    private static final int LOCK_WAIT_SECONDS = 4;

    @Test
    void thePlainScriptCreatesAWorkingTableUnderAnotherName() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            new JdbcTemplate(dataSource).execute(IdempotencySchema.postgresql("api_requests"));
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "api_requests");
            ScopedKey key = new ScopedKey("", "POST /x", "k-1");

            ClaimResult result = new TransactionTemplate(new DataSourceTransactionManager(dataSource)).execute(status ->
                    store.claim(new ClaimRequest(key, "c".repeat(64), Duration.ofDays(1), Duration.ofSeconds(1))));

            assertThat(result).isInstanceOf(ClaimResult.Claimed.class);
            assertThat(new JdbcTemplate(dataSource).queryForObject(
                    "select status from api_requests where idempotency_key = 'k-1'", String.class))
                    .isEqualTo("PROCESSING");
            assertThat(new JdbcTemplate(dataSource).queryForObject(
                    "select count(*) from pg_indexes where indexname = 'api_requests_expires_at_idx' and schemaname = current_schema()", Integer.class))
                    .isEqualTo(1);
        }
    }

    @Test
    void theMigrationKeepsItsOwnHistoryBesideTheApplicationsTablesAndRunsOnce() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute("create table flyway_schema_history (installed_rank int)"); // the application's own history
            jdbc.execute("create table payments (id bigint primary key)");

            assertThat(new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate().migrationsExecuted)
                    .isEqualTo(1);
            assertThat(new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate().migrationsExecuted)
                    .isZero();

            assertThat(jdbc.queryForObject("select count(*) from idempotency_schema_history where success", Integer.class))
                    .as("baseline and V1").isEqualTo(2);
            assertThat(jdbc.queryForObject("select count(*) from flyway_schema_history", Integer.class)).isZero();
            assertThat(jdbc.queryForObject("select count(*) from idempotency_keys", Integer.class)).isZero();
        }
    }

    @Test
    void tablesOfOtherNamesKeepHistoriesOfTheirOwn() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();

            // the application renamed its table: the new one is created, the old history left alone
            assertThat(new IdempotencySchemaMigrator(dataSource, "api_requests").migrate().migrationsExecuted)
                    .isEqualTo(1);
            assertThat(jdbc.queryForObject("select count(*) from api_requests", Integer.class)).isZero();
            assertThat(jdbc.queryForObject("select count(*) from api_requests_schema_history where success",
                    Integer.class)).as("baseline and V1").isEqualTo(2);
            assertThat(jdbc.queryForObject("select count(*) from idempotency_schema_history where success",
                    Integer.class)).as("V1 on the empty schema, nothing since").isEqualTo(1);
        }
    }

    /** The switch to dropping partitions as docs/retention.md describes it, step by step. */
    @Test
    void theDocumentedSwitchToDroppingPartitionsKeepsEveryRecordAndPassesTheMigrationsValidation() {
        switchToDroppingPartitions(Duration.ofDays(1));
        switchToDroppingPartitions(Duration.ofDays(7)); // an interval that does not end with the day
    }

    private static void switchToDroppingPartitions(Duration interval) {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
            for (String[] record : new String[][] {{"ten-days-old", "now() - interval '10 days'"},
                    {"just-now", "now()"}}) {
                jdbc.update("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash,"
                        + " fencing_token, response_status, response_body, created_at, expires_at) values ('',"
                        + " 'POST /x', ?, 'SUCCEEDED', ?, gen_random_uuid(), 201, 'stored', " + record[1] + ", "
                        + record[1] + " + interval '30 days')", record[0], "c".repeat(64));
            }

            // 1. (every instance stopped) the old table out of the way, with its indexes and constraints; the
            // schema is called idempotency_switch in the docs, here one of this test database's own
            String aside = jdbc.queryForObject("select current_schema()", String.class) + "_switch";
            jdbc.execute("create schema " + aside);
            try {
                jdbc.execute("alter table idempotency_keys set schema " + aside);
                // 2. the new table from the shipped script
                jdbc.execute(IdempotencySchema.postgresqlPartitioned("idempotency_keys"));
                // 3. one partition for every record so far, up to the end of the current partition interval (86400
                // seconds in the docs), and the records
                jdbc.execute("""
                        do $$ begin
                          execute format('create table idempotency_keys_before_switch partition of idempotency_keys'
                              || ' for values from (%%L) to (%%L)',
                              (select least(min(created_at), now()) from %s.idempotency_keys),
                              to_timestamp((floor(extract(epoch from now()) / %d) + 1) * %d));
                        end $$""".formatted(aside, interval.toSeconds(), interval.toSeconds()));
                jdbc.execute(documentedCopy(aside));
                // 4. the application, started in drop-partitions mode: its migration and its partitions
                assertThat(new IdempotencySchemaMigrator(dataSource, "idempotency_keys", true).migrate()
                        .migrationsExecuted).isZero();
                PostgresPartitionMaintenance maintenance = new PostgresPartitionMaintenance(dataSource,
                        "idempotency_keys", interval, 3, Duration.ofSeconds(5));
                assertThat(maintenance.createAhead(true).created()).as("the intervals after the current one")
                        .hasSize(3);
                assertThat(maintenance.coversNow()).isTrue();
                List<PostgresPartitionMaintenance.Partition> partitions = maintenance.partitions();
                for (int i = 1; i < partitions.size(); i++) {
                    assertThat(partitions.get(i).from()).as("no gap before " + partitions.get(i).name())
                            .isEqualTo(partitions.get(i - 1).to());
                }
                assertThat(maintenance.dropExpired(Duration.ofDays(30)).dropped()).isEmpty();

                PartitionedPostgresIdempotencyStore store = new PartitionedPostgresIdempotencyStore(dataSource,
                        "idempotency_keys");
                TransactionTemplate transactions =
                        new TransactionTemplate(new DataSourceTransactionManager(dataSource));
                for (String key : new String[] {"ten-days-old", "just-now"}) {
                    ClaimResult result = transactions.execute(status -> store.claim(new ClaimRequest(
                            new ScopedKey("", "POST /x", key), "c".repeat(64), Duration.ofDays(30),
                            Duration.ofSeconds(1))));
                    assertThat(result).as(key + " is still answered from its record")
                            .isInstanceOf(ClaimResult.Existing.class);
                }
                assertThatThrownBy(() -> new IdempotencySchemaMigrator(dataSource, "idempotency_keys", false)
                        .migrate()).as("the layout is still checked").hasMessageContaining("is partitioned");
            } finally {
                jdbc.execute("drop schema " + aside + " cascade"); // 5. once the copy has been checked
            }
        }
    }

    /** The copy of the records that retention.md's switch to drop-partitions gives, from the table set aside. */
    private static String documentedCopy(String aside) {
        StringBuilder statement = null;
        try {
            for (String line : java.nio.file.Files.readAllLines(java.nio.file.Path.of("..", "docs", "retention.md"))) {
                if (line.startsWith("INSERT INTO idempotency_keys")) {
                    statement = new StringBuilder();
                }
                if (statement != null) {
                    statement.append(line).append('\n');
                    if (line.endsWith(";")) {
                        return statement.toString().replace("idempotency_switch.", aside + ".");
                    }
                }
            }
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
        throw new AssertionError("retention.md gives no copy of the records");
    }

    /**
     * The copy of the records in the documented switch (retention.md, step 3) goes by column name: a table the library
     * adopted may have the script's columns in another order (made by hand, or by a tool), and a copy by position would
     * put each value in the column at its place — a caller as the scope, both varchar — so that the retry of a request
     * whose record was copied finds none, and runs again.
     */
    @Test
    void theDocumentedSwitchCopiesEachValueToItsColumnWhateverTheOldTablesColumnOrder() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            // the script's table, its scope column made before its caller column
            List<String> lines = new ArrayList<>(IdempotencySchema.postgresql("idempotency_keys").lines().toList());
            int caller = lines.indexOf(lines.stream().filter(line -> line.startsWith("    caller ")).findFirst()
                    .orElseThrow());
            lines.add(caller, lines.remove(caller + 1));
            jdbc.execute(String.join("\n", lines));
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate(); // adopted
            jdbc.update("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash,"
                    + " fencing_token, response_status, response_body, created_at, expires_at) values ('alice',"
                    + " 'POST /x', 'k', 'SUCCEEDED', ?, gen_random_uuid(), 201, 'stored', now() - interval '1 day',"
                    + " now() + interval '29 days')", "c".repeat(64));

            String aside = jdbc.queryForObject("select current_schema()", String.class) + "_switch";
            jdbc.execute("create schema " + aside);
            try {
                jdbc.execute("alter table idempotency_keys set schema " + aside);
                jdbc.execute(IdempotencySchema.postgresqlPartitioned("idempotency_keys"));
                jdbc.execute("""
                        do $$ begin
                          execute format('create table idempotency_keys_before_switch partition of idempotency_keys'
                              || ' for values from (%%L) to (%%L)',
                              (select least(min(created_at), now()) from %s.idempotency_keys),
                              to_timestamp((floor(extract(epoch from now()) / 86400) + 1) * 86400));
                        end $$""".formatted(aside));
                jdbc.execute(documentedCopy(aside));

                assertThat(jdbc.queryForList("select caller, scope from idempotency_keys")).singleElement()
                        .isEqualTo(java.util.Map.of("caller", "alice", "scope", "POST /x"));
                PartitionedPostgresIdempotencyStore store = new PartitionedPostgresIdempotencyStore(dataSource,
                        "idempotency_keys");
                ClaimResult retry = new TransactionTemplate(new DataSourceTransactionManager(dataSource)).execute(
                        status -> store.claim(new ClaimRequest(new ScopedKey("alice", "POST /x", "k"),
                                "c".repeat(64), Duration.ofDays(30), Duration.ofSeconds(1))));
                assertThat(retry).as("the retry is answered from the copied record")
                        .isInstanceOf(ClaimResult.Existing.class);
            } finally {
                jdbc.execute("drop schema " + aside + " cascade");
            }
        }
    }

    @Test
    void aDatabaseMigratedByAnEarlierVersionStillStartsWhateverTheTableName() {
        for (String table : new String[] {"idempotency_keys", "api_requests"}) {
            try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
                migrateAsEarlierVersionsDid(dataSource, table);

                assertThat(new IdempotencySchemaMigrator(dataSource, table).migrate().migrationsExecuted)
                        .as(table).isZero();
                assertThat(new IdempotencySchemaMigrator(dataSource, table).migrate().migrationsExecuted)
                        .as(table + ", again").isZero();
                assertThat(new JdbcTemplate(dataSource).queryForObject("select count(*) from " + table,
                        Integer.class)).isZero();
            }
        }
    }

    /**
     * A rolling deploy of a later release whose migration changed the table (a column more, with a default) while
     * instances of this one still run: one of them restarting finds a history with a version it does not know. Flyway
     * ignores applied migrations newer than those it has, so it starts, migrates nothing, and its claims work on the
     * table as the later release left it; an earlier instance that refused to start there would leave a deploy that
     * has to be rolled back unable to start the release it rolls back to.
     */
    @Test
    void anInstanceOfThisReleaseStartsOnAHistoryALaterReleaseMigratedFurther() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
            // what a later release's V2 would leave: its change, and its line in the history
            jdbc.execute("alter table idempotency_keys add column origin text not null default 'unknown'");
            jdbc.update("insert into idempotency_schema_history (installed_rank, version, description, type, script,"
                    + " checksum, installed_by, execution_time, success) select max(installed_rank) + 1, '2',"
                    + " 'Later release', 'JDBC', 'io.idempotency.jdbc.flyway.V2__Later_release', null,"
                    + " current_user, 1, true from idempotency_schema_history");

            assertThat(new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate().migrationsExecuted)
                    .isZero();
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys").verify();
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            ScopedKey key = new ScopedKey("", "POST /x", "k-1");
            TransactionTemplate transaction = new TransactionTemplate(new DataSourceTransactionManager(dataSource));
            ClaimResult claimed = transaction.execute(status -> {
                ClaimResult result = store.claim(new ClaimRequest(key, "c".repeat(64), Duration.ofDays(1),
                        Duration.ofSeconds(1)));
                store.complete(key, ((ClaimResult.Claimed) result).fencingToken(),
                        new StoredResponse(201, List.of(), "stored".getBytes()));
                return result;
            });
            assertThat(claimed).isInstanceOf(ClaimResult.Claimed.class);
            assertThat(jdbc.queryForObject("select status || ' ' || origin from idempotency_keys", String.class))
                    .isEqualTo("SUCCEEDED unknown");
            assertThat(jdbc.queryForObject("select max(version::int) from idempotency_schema_history",
                    Integer.class)).as("the later release's history left as it was").isEqualTo(2);
        }
    }

    /**
     * Pools are often configured not to auto-commit (with JPA, to let Hibernate skip a round trip per transaction): the
     * history an earlier version wrote must still be brought to the checksum V1 has now, not rolled back when the
     * connection goes back to the pool and then refused by Flyway's validation, which would stop every start.
     */
    @Test
    void aDatabaseMigratedByAnEarlierVersionStillStartsOnAPoolThatDoesNotAutoCommit() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(2)) {
            migrateAsEarlierVersionsDid(dataSource, "idempotency_keys");
        }
        try (HikariDataSource dataSource = database.dataSource(2, config -> config.setAutoCommit(false))) {
            assertThat(new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate().migrationsExecuted)
                    .isZero();
            assertThat(new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate().migrationsExecuted)
                    .as("again").isZero();
        }
    }

    @Test
    void aTableMadeFromTheScriptIsAdoptedByTheMigration() {
        for (boolean partitioned : new boolean[] {false, true}) {
            try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
                new JdbcTemplate(dataSource).execute(partitioned
                        ? IdempotencySchema.postgresqlPartitioned("idempotency_keys")
                        : IdempotencySchema.postgresql("idempotency_keys"));

                assertThat(new IdempotencySchemaMigrator(dataSource, "idempotency_keys", partitioned).migrate()
                        .migrationsExecuted).as("baselined at V1, not run over the existing table").isZero();
            }
        }
    }

    /**
     * The library keeps the table in the connection's default schema. A table of that name that the search path finds
     * in a later schema — another application's, which made it with its own migrations, when this application's
     * schema comes first and a shared one after it — was adopted, and the two applications answered each other's
     * requests with their stored answers (one caller, one route, one key). The start stops instead, naming both
     * schemas; one of the application's own in its default schema is used, the other left alone.
     */
    @Test
    void aTableOfTheNameLaterOnTheSearchPathIsNotAdopted() {
        TestPostgres.Database shared = TestPostgres.newDatabase();
        TestPostgres.Database own = TestPostgres.newDatabase();
        try (HikariDataSource other = shared.dataSource(2);
             HikariDataSource dataSource = ownFirstThenShared(own, shared)) {
            new JdbcTemplate(other).execute(IdempotencySchema.postgresql("idempotency_keys"));

            assertThatThrownBy(() -> new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate())
                    .isInstanceOfSatisfying(io.idempotency.jdbc.flyway.IdempotencySchemaException.class, e ->
                            assertThat(e.problem()).isEqualTo(
                                    io.idempotency.jdbc.flyway.IdempotencySchemaException.Problem.ELSEWHERE))
                    .hasMessageContaining("table idempotency_keys is in schema " + shared.schema())
                    .hasMessageContaining("default schema " + own.schema());
            // managed elsewhere, the same: the application's own table is missing, not the other's to be used
            assertThatThrownBy(() -> new IdempotencySchemaMigrator(dataSource, "idempotency_keys").verify())
                    .hasMessageContaining("table idempotency_keys is in schema " + shared.schema());

            new JdbcTemplate(dataSource).execute(IdempotencySchema.postgresql("idempotency_keys"));
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
            assertThat(new JdbcTemplate(dataSource).queryForObject("select count(*) from pg_tables where tablename ="
                    + " 'idempotency_schema_history' and schemaname = ?", Integer.class, own.schema())).isEqualTo(1);
            assertThat(new JdbcTemplate(other).queryForObject("select count(*) from pg_tables where tablename ="
                    + " 'idempotency_schema_history' and schemaname = ?", Integer.class, shared.schema()))
                    .as("the other's left alone").isZero();
        }
    }

    /**
     * A schema later on the search path holds the library's table and its migration history (another application's,
     * in a schema they share), and the application's own schema a table made from the script: the history Flyway keeps
     * is the default schema's, so the own table is adopted, and the other history is neither taken for it nor changed.
     */
    @Test
    void aHistoryLaterOnTheSearchPathIsNotTakenForTheOwnOne() {
        TestPostgres.Database shared = TestPostgres.newDatabase();
        TestPostgres.Database own = TestPostgres.newDatabase();
        try (HikariDataSource other = shared.dataSource(2);
             HikariDataSource dataSource = ownFirstThenShared(own, shared)) {
            new IdempotencySchemaMigrator(other, "idempotency_keys").migrate();
            JdbcTemplate otherJdbc = new JdbcTemplate(other);
            String otherHistory = otherJdbc.queryForObject("select string_agg(version || ':' || checksum, ',')"
                    + " from idempotency_schema_history", String.class);
            new JdbcTemplate(dataSource).execute(IdempotencySchema.postgresql("idempotency_keys"));

            assertThat(new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate().migrationsExecuted)
                    .as("the own table adopted, not made again").isZero();
            assertThat(new JdbcTemplate(dataSource).queryForObject("select count(*) from pg_tables where tablename ="
                    + " 'idempotency_schema_history' and schemaname = ?", Integer.class, own.schema())).isEqualTo(1);
            assertThat(otherJdbc.queryForObject("select string_agg(version || ':' || checksum, ',')"
                    + " from idempotency_schema_history", String.class)).as("the other's unchanged")
                    .isEqualTo(otherHistory);
        }
    }

    /**
     * A table made without the script's indexes on expires_at and locked_until (by a DBA, an ORM) is used, and warned
     * of: the cleanup and the stale-claim sweeper would scan it whole. One made from the script is not.
     */
    @Test
    void aTableWithoutTheIndexesOfTheScriptIsWarnedOf() {
        java.util.logging.Logger logger = java.util.logging.Logger.getLogger(IdempotencySchemaMigrator.class.getName());
        List<java.util.logging.LogRecord> records = new java.util.concurrent.CopyOnWriteArrayList<>();
        java.util.logging.Handler handler = new java.util.logging.Handler() {
            @Override
            public void publish(java.util.logging.LogRecord record) {
                records.add(record);
            }

            @Override
            public void flush() {
            }

            @Override
            public void close() {
            }
        };
        logger.addHandler(handler);
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
            assertThat(records).as("made from the script").noneMatch(record -> record.getMessage().contains("index"));

            jdbc.execute(IdempotencySchema.postgresql("bare_keys"));
            jdbc.execute("drop index bare_keys_expires_at_idx");
            jdbc.execute("drop index bare_keys_locked_until_idx");
            new IdempotencySchemaMigrator(dataSource, "bare_keys").verify();
            new IdempotencySchemaMigrator(dataSource, "bare_keys").migrate();

            assertThat(records).filteredOn(record -> record.getLevel() == java.util.logging.Level.WARNING)
                    .extracting(java.util.logging.LogRecord::getMessage).hasSize(2).allSatisfy(message -> assertThat(
                            message).contains("bare_keys has no index that begins with expires_at nor with"
                            + " locked_until", "cleanup scans the whole table", "stale-claim sweeper"));
        } finally {
            logger.removeHandler(handler);
        }
    }

    /** A pool on {@code own}'s schema whose search path goes on to {@code shared}'s, a schema it shares. */
    private static HikariDataSource ownFirstThenShared(TestPostgres.Database own, TestPostgres.Database shared) {
        return own.dataSource(2, config -> config.setConnectionInitSql("SET search_path = " + own.schema() + ", "
                + shared.schema()));
    }

    @Test
    void aTableNameInCapitalsMigratesOnEveryStart() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            assertThat(new IdempotencySchemaMigrator(dataSource, "ApiRequests").migrate().migrationsExecuted)
                    .isEqualTo(1);
            assertThat(new IdempotencySchemaMigrator(dataSource, "ApiRequests").migrate().migrationsExecuted)
                    .as("the second start finds the history the first one wrote").isZero();
            assertThat(IdempotencySchemaMigrator.historyTable("IDEMPOTENCY_KEYS")).isEqualTo("idempotency_schema_history");
        }
    }

    /**
     * Without the retry, about one round in three failed: "Unable to baseline … as it already exists". Ten rounds of
     * eight instances: once, on the main PostgreSQL (Flyway's lock is an advisory lock on every version).
     */
    @Test
    @Tag("slow")
    void instancesStartingTogetherAllMigrate() throws Exception {
        for (int round = 0; round < 10; round++) {
            boolean partitioned = round % 2 == 1;
            // an empty schema: the first instance's history table makes it non-empty for the others
            try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(24)) {
                ExecutorService instances = Executors.newFixedThreadPool(8);
                try {
                    CountDownLatch go = new CountDownLatch(1);
                    List<Future<Integer>> started = new ArrayList<>();
                    for (int i = 0; i < 8; i++) {
                        started.add(instances.submit(() -> {
                            go.await();
                            return new IdempotencySchemaMigrator(dataSource, "idempotency_keys", partitioned)
                                    .migrate().migrationsExecuted;
                        }));
                    }
                    go.countDown();
                    int executed = 0;
                    for (Future<Integer> instance : started) {
                        executed += instance.get(60, TimeUnit.SECONDS);
                    }
                    assertThat(executed).as("V1 ran once, round " + round).isEqualTo(1);
                } finally {
                    instances.shutdownNow();
                }
            }
        }
    }

    /**
     * An instance starting while another one's migration is stuck (here behind a transaction left open that creates a
     * table of the same name) waits for the migration lock as long as Flyway lets it, once: waiting three times over,
     * as when the lock's timeout was taken for the race of instances starting together, kept it from starting for two
     * and a half minutes, to fail with Flyway's advice to configure a setting the application cannot reach. The wait is
     * shortened to {@value #LOCK_WAIT_SECONDS} s here (Flyway's own is about 50 s): the instance gives up after it,
     * not after three times it.
     */
    @Test
    void anInstanceWaitingTooLongForAnotherOnesMigrationSaysWhoHoldsTheLock() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(6); java.sql.Connection stuck = dataSource.getConnection()) {
            stuck.setAutoCommit(false);
            try (java.sql.Statement statement = stuck.createStatement()) {
                statement.execute("create table idempotency_keys (id int)");
            }
            ExecutorService first = Executors.newSingleThreadExecutor();
            try {
                Future<Integer> migrating = first.submit(() -> new IdempotencySchemaMigrator(dataSource,
                        "idempotency_keys").migrate().migrationsExecuted);
                database.awaitLockWaiter(Duration.ofSeconds(30)); // its V1 waits, holding the migration lock

                IdempotencySchemaMigrator second = new IdempotencySchemaMigrator(dataSource, "idempotency_keys")
                        .withLockWait(Duration.ofSeconds(LOCK_WAIT_SECONDS));
                long started = System.nanoTime();
                assertThatThrownBy(second::migrate)
                        .isInstanceOfSatisfying(io.idempotency.jdbc.flyway.IdempotencySchemaException.class, e ->
                                assertThat(e.problem()).isEqualTo(
                                        io.idempotency.jdbc.flyway.IdempotencySchemaException.Problem.LOCKED))
                        .hasMessageContaining("idempotency_schema_history")
                        .hasMessageContaining("pg_locks");
                Duration waited = Duration.ofNanos(System.nanoTime() - started);
                // three waits take at least three times the wait, and a slow machine has time to spare below that
                assertThat(waited).as("waited for the lock once, not three times")
                        .isGreaterThanOrEqualTo(Duration.ofSeconds(LOCK_WAIT_SECONDS))
                        .isLessThan(Duration.ofSeconds(3 * LOCK_WAIT_SECONDS));

                stuck.rollback();
                assertThat(migrating.get(60, TimeUnit.SECONDS)).isEqualTo(1);
                new IdempotencySchemaMigrator(dataSource, "idempotency_keys").verify();
            } finally {
                first.shutdownNow();
            }
        }
    }

    @Test
    void aWaitForTheMigrationLockIsNeverNegative() {
        IdempotencySchemaMigrator migrator = new IdempotencySchemaMigrator(null, "idempotency_keys");
        assertThatThrownBy(() -> migrator.withLockWait(Duration.ofMillis(-1)))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("cannot be negative");
    }

    @Test
    void aTableNameWhoseHistoryWouldBeTheDefaultTablesIsRefused() {
        assertThatThrownBy(() -> IdempotencySchemaMigrator.historyTable("idempotency"))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("cannot be used");
        assertThat(IdempotencySchemaMigrator.historyTable("idempotency_keys")).isEqualTo("idempotency_schema_history");
        assertThat(IdempotencySchemaMigrator.historyTable("api_requests")).isEqualTo("api_requests_schema_history");
    }

    @Test
    void aHistoryThatOutlivedItsTableSaysSo() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
            new JdbcTemplate(dataSource).execute("drop table idempotency_keys");

            assertThatThrownBy(() -> new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate())
                    .isInstanceOfSatisfying(io.idempotency.jdbc.flyway.IdempotencySchemaException.class, e ->
                            assertThat(e.problem()).isEqualTo(
                                    io.idempotency.jdbc.flyway.IdempotencySchemaException.Problem.MISSING_DESPITE_HISTORY))
                    .hasMessageContaining("says table idempotency_keys was created, but it does not exist");
        }
    }

    /**
     * A migration Flyway keeps refusing (its history holds V1 with a checksum no version of the library wrote) is tried
     * again a bounded number of times only, and then fails the start with Flyway's own reason.
     */
    @Test
    void aMigrationFlywayKeepsRefusingFailsWithFlywaysReason() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
            new JdbcTemplate(dataSource).update("update idempotency_schema_history set checksum = 42 where version = '1'");

            assertThatThrownBy(() -> new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate())
                    .isInstanceOf(org.flywaydb.core.api.FlywayException.class)
                    .hasMessageContaining("checksum mismatch");
        }
    }

    /**
     * The table and its migration are made for PostgreSQL: a DataSource of another database is refused by name, before
     * any statement, whether the table is to be created or verified.
     */
    @Test
    void aDataSourceOfAnotherDatabaseIsRefusedByName() {
        javax.sql.DataSource mariaDb = anotherDatabase("MariaDB", "11.4.2");

        for (org.assertj.core.api.ThrowableAssert.ThrowingCallable startup : List.<org.assertj.core.api.ThrowableAssert
                .ThrowingCallable>of(() -> new IdempotencySchemaMigrator(mariaDb, "idempotency_keys").migrate(),
                () -> new IdempotencySchemaMigrator(mariaDb, "idempotency_keys").verify())) {
            assertThatThrownBy(startup)
                    .isInstanceOfSatisfying(io.idempotency.jdbc.flyway.IdempotencySchemaException.class, e ->
                            assertThat(e.problem()).isEqualTo(
                                    io.idempotency.jdbc.flyway.IdempotencySchemaException.Problem.NOT_POSTGRESQL))
                    .hasMessageContaining("made for PostgreSQL").hasMessageContaining("MariaDB 11.4.2");
        }
        assertThat(new IdempotencySchemaMigrator(mariaDb, "idempotency_keys").onPostgreSQL()).isFalse();
    }

    /** A DataSource whose connections say they are of {@code product}, and run no statement. */
    private static javax.sql.DataSource anotherDatabase(String product, String version) {
        java.sql.DatabaseMetaData metaData = proxy(java.sql.DatabaseMetaData.class, method -> switch (method) {
            case "getDatabaseProductName" -> product;
            case "getDatabaseProductVersion" -> version;
            default -> throw new java.sql.SQLException("not run on " + product + ": " + method);
        });
        java.sql.Connection connection = proxy(java.sql.Connection.class, method -> switch (method) {
            case "getMetaData" -> metaData;
            case "isClosed" -> false; // what any live connection answers without a statement
            case "getAutoCommit" -> true;
            case "close" -> null;
            default -> throw new java.sql.SQLException("not run on " + product + ": " + method);
        });
        return proxy(javax.sql.DataSource.class, method -> {
            if (method.equals("getConnection")) {
                return connection;
            }
            throw new java.sql.SQLException("not run on " + product + ": " + method);
        });
    }

    private interface Answer {
        Object to(String method) throws java.sql.SQLException;
    }

    private static <T> T proxy(Class<T> type, Answer answer) {
        return type.cast(java.lang.reflect.Proxy.newProxyInstance(type.getClassLoader(), new Class<?>[]{type},
                (self, method, args) -> answer.to(method.getName())));
    }

    /** As earlier builds migrated: one history for every table, V1's checksum over the filled-in script. */
    private static void migrateAsEarlierVersionsDid(HikariDataSource dataSource, String table) {
        org.flywaydb.core.Flyway.configure().dataSource(dataSource).table("idempotency_schema_history")
                .locations(new org.flywaydb.core.api.Location[0])
                .javaMigrations(new V1__Create_idempotency_keys(IdempotencySchema.postgresql(table)))
                .baselineOnMigrate(true).baselineVersion("0").load().migrate();
    }

    /** V1 as earlier versions shipped it (same name, so the same version and description). */
    private static final class V1__Create_idempotency_keys extends org.flywaydb.core.api.migration.BaseJavaMigration {
        private final String script;

        V1__Create_idempotency_keys(String script) {
            this.script = script;
        }

        @Override
        public Integer getChecksum() {
            java.util.zip.CRC32 crc = new java.util.zip.CRC32();
            crc.update(script.getBytes(java.nio.charset.StandardCharsets.UTF_8));
            return (int) crc.getValue();
        }

        @Override
        public void migrate(org.flywaydb.core.api.migration.Context context) throws Exception {
            try (java.sql.Statement statement = context.getConnection().createStatement()) {
                statement.execute(script);
            }
        }
    }

    @Test
    void aSchemaManagedElsewhereIsVerifiedNotMigrated() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);

            assertThatThrownBy(() -> new IdempotencySchemaMigrator(dataSource, "api_requests").verify())
                    .hasMessageContaining("table api_requests does not exist")
                    .hasMessageContaining(IdempotencySchema.POSTGRESQL_SCRIPT);
            jdbc.execute(IdempotencySchema.postgresql("api_requests"));
            new IdempotencySchemaMigrator(dataSource, "api_requests").verify();
            assertThatThrownBy(() -> new IdempotencySchemaMigrator(dataSource, "api_requests", true).verify())
                    .hasMessageContaining("is not partitioned");
            assertThat(jdbc.queryForObject("select count(*) from pg_tables where tablename like '%schema_history'"
                    + " and schemaname = current_schema()", Integer.class)).as("nothing migrated").isZero();
        }
    }

    /**
     * A table of the configured name that exists is adopted as it is: one made by another tool under the same name,
     * or by hand from an outdated script, must stop the start with what is wrong, not fail every claim (or, with
     * times stored without time zone, compare leases differently on instances in different time zones).
     */
    @Test
    void aTableOfAnotherShapeIsRefusedAtStartupWithWhatIsWrong() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute("create table other_tool_keys (key varchar(255) primary key, response text)");
            jdbc.execute(IdempotencySchema.postgresql("no_unique_key").replace(
                    "CONSTRAINT no_unique_key_pkey PRIMARY KEY (caller, scope, idempotency_key),", ""));
            jdbc.execute(IdempotencySchema.postgresql("deferrable_key").replace(
                    "PRIMARY KEY (caller, scope, idempotency_key)",
                    "UNIQUE (caller, scope, idempotency_key) DEFERRABLE INITIALLY IMMEDIATE"));
            jdbc.execute(IdempotencySchema.postgresql("also_deferrable_key"));
            jdbc.execute("alter table also_deferrable_key add constraint also_deferrable_key_deferred"
                    + " unique (idempotency_key, scope, caller) deferrable initially deferred");
            jdbc.execute(IdempotencySchema.postgresql("local_times")
                    .replace("locked_until     timestamptz", "locked_until     timestamp"));
            jdbc.execute(IdempotencySchema.postgresqlPartitioned("partitioned_local_times")
                    .replace("expires_at       timestamptz", "expires_at       timestamp"));

            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "other_tool_keys").migrate(),
                    "table other_tool_keys lacks columns", "caller", "fencing_token", "expires_at");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "other_tool_keys").verify(),
                    "table other_tool_keys lacks columns");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "no_unique_key").migrate(),
                    "no unique key on (caller, scope, idempotency_key)");
            // PostgreSQL refuses a deferrable arbiter even beside the primary key: every claim would fail
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "deferrable_key").verify(),
                    "unique key on (caller, scope, idempotency_key) is deferrable");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "also_deferrable_key").migrate(),
                    "is deferrable");
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "also_deferrable_key");
            assertThatThrownBy(() -> new TransactionTemplate(new DataSourceTransactionManager(dataSource))
                    .execute(status -> store.claim(new ClaimRequest(new ScopedKey("", "POST /x", "k-deferrable"),
                            "c".repeat(64), Duration.ofDays(1), Duration.ofSeconds(1)))))
                    .as("what the check prevents").hasStackTraceContaining("deferrable");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "local_times").verify(),
                    "locked_until is timestamp without time zone", "timestamptz");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "partitioned_local_times", true).verify(),
                    "expires_at is timestamp without time zone");

            jdbc.execute(IdempotencySchema.postgresql("right_shape"));
            new IdempotencySchemaMigrator(dataSource, "right_shape").verify();
            new IdempotencySchemaMigrator(dataSource, "right_shape").migrate();
            new IdempotencySchemaMigrator(dataSource, "partitioned_right_shape", true).migrate();
            new IdempotencySchemaMigrator(dataSource, "partitioned_right_shape", true).verify();
        }
    }

    /**
     * A table of another shape that the migration refuses to adopt is left without a history: once it is dropped, the
     * next start makes the table, instead of finding a history that says it was made and stopping again.
     */
    @Test
    void aTableRefusedForItsShapeLeavesNoHistoryBehind() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute(IdempotencySchema.postgresql("idempotency_keys").replace(
                    "CONSTRAINT idempotency_keys_pkey PRIMARY KEY (caller, scope, idempotency_key),", ""));

            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate(),
                    "no unique key on (caller, scope, idempotency_key)");
            assertThat(jdbc.queryForObject("select to_regclass('idempotency_schema_history')", String.class))
                    .isNull();

            jdbc.execute("drop table idempotency_keys");
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
            assertThat(jdbc.queryForObject("select count(*) from pg_constraint"
                    + " where conrelid = 'idempotency_keys'::regclass and contype = 'p'", Long.class)).isEqualTo(1);
        }
    }

    /**
     * A unique index that a concurrent build left invalid (it met duplicates, removed since) is no key: PostgreSQL
     * never arbitrates {@code ON CONFLICT} with it. Taken for the key, it let the application start, and every claim
     * then failed.
     */
    @Test
    void aUniqueKeyLeftInvalidByAFailedConcurrentBuildIsRefused() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute(IdempotencySchema.postgresql("invalid_key").replace(
                    "CONSTRAINT invalid_key_pkey PRIMARY KEY (caller, scope, idempotency_key),", ""));
            String row = "('', 'POST /x', 'k-%s', 'SUCCEEDED', '" + "c".repeat(64) + "',"
                    + " gen_random_uuid(), 201, now() + interval '1 day')";
            jdbc.execute("insert into invalid_key (caller, scope, idempotency_key, status, request_hash,"
                    + " fencing_token, response_status, expires_at) values " + row.formatted("dup") + ", "
                    + row.formatted("dup"));
            assertThatThrownBy(() -> jdbc.execute("create unique index concurrently invalid_key_unique"
                    + " on invalid_key (caller, scope, idempotency_key)")).hasMessageContaining("duplicated");
            jdbc.execute("delete from invalid_key");

            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "invalid_key").verify(),
                    "no unique key on (caller, scope, idempotency_key)");
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "invalid_key");
            assertThatThrownBy(() -> new TransactionTemplate(new DataSourceTransactionManager(dataSource))
                    .execute(status -> store.claim(new ClaimRequest(new ScopedKey("", "POST /x", "k-invalid"),
                            "c".repeat(64), Duration.ofDays(1), Duration.ofSeconds(1)))))
                    .as("what the check prevents").hasStackTraceContaining("ON CONFLICT");
        }
    }

    /**
     * An unlogged table (made so for speed) is emptied by PostgreSQL after a crash of the server and is not replicated
     * to standbys: after either, or a failover, every stored answer is gone and each retry runs its request again.
     */
    @Test
    void anUnloggedTableIsRefused() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute(IdempotencySchema.postgresql("unlogged_keys"));
            jdbc.execute("alter table unlogged_keys set unlogged");

            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "unlogged_keys").verify(),
                    "unlogged");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "unlogged_keys").migrate(),
                    "unlogged");
            jdbc.execute("alter table unlogged_keys set logged");
            new IdempotencySchemaMigrator(dataSource, "unlogged_keys").verify();
        }
    }

    /**
     * A table a DBA made from the script, granting the application's role too little on it: without UPDATE every claim
     * is inserted, its handler runs, and the answer cannot be recorded (500, nothing kept), request after request;
     * without DELETE, no intent-first claim can be released and every cleanup run fails while the table grows.
     */
    @Test
    void aTableTheApplicationsRoleMayNotUpdateIsRefused() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        String role = "idempotency_" + database.schema() + "_app";
        try (HikariDataSource owner = database.dataSource(1)) {
            JdbcTemplate jdbc = new JdbcTemplate(owner);
            jdbc.execute(IdempotencySchema.postgresql("idempotency_keys"));
            asNewRole(jdbc, role, () -> {
                jdbc.execute("grant usage on schema " + database.schema() + " to " + role);
                jdbc.execute("grant select, insert on idempotency_keys to " + role);
                try (HikariDataSource application = dataSourceAs(database, role)) {
                    assertThatThrownBy(() -> new IdempotencySchemaMigrator(application, "idempotency_keys").verify())
                            .isInstanceOfSatisfying(io.idempotency.jdbc.flyway.IdempotencySchemaException.class,
                                    e -> assertThat(e.problem()).isEqualTo(io.idempotency.jdbc.flyway
                                            .IdempotencySchemaException.Problem.NOT_PERMITTED))
                            .hasMessageContaining(role).hasMessageContaining("UPDATE");
                }
                jdbc.execute("grant update on idempotency_keys to " + role);
                // a committed claim released, and a record the cleanup removes, are deleted
                try (HikariDataSource application = dataSourceAs(database, role)) {
                    assertThatThrownBy(() -> new IdempotencySchemaMigrator(application, "idempotency_keys").verify())
                            .hasMessageContaining("lacks DELETE on it").hasMessageNotContaining("UPDATE");
                }
                jdbc.execute("grant delete on idempotency_keys to " + role);
                try (HikariDataSource application = dataSourceAs(database, role)) {
                    new IdempotencySchemaMigrator(application, "idempotency_keys").verify();
                }
            });
        }
    }

    /**
     * A DBA made the table and granted the application's role what its requests need, but not CREATE in the schema:
     * the default start (the library's migration on) used to fail with Flyway's "permission denied for schema", trying
     * to create its history table beside the table, and only after retrying for most of a minute. The table is used
     * as it is, once checked; without one, the start is refused with the script to run.
     */
    @Test
    void aRoleThatMayNotCreateInTheSchemaStartsOnATableADbaMadeAndIsToldTheScriptWithoutOne() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        String role = "idempotency_" + database.schema() + "_nocreate";
        try (HikariDataSource owner = database.dataSource(1)) {
            JdbcTemplate jdbc = new JdbcTemplate(owner);
            jdbc.execute(IdempotencySchema.postgresql("idempotency_keys"));
            asNewRole(jdbc, role, () -> {
                jdbc.execute("grant usage on schema " + database.schema() + " to " + role);
                jdbc.execute("grant select, insert, update, delete on idempotency_keys to " + role);
                try (HikariDataSource application = dataSourceAs(database, role)) {
                    assertThat(new IdempotencySchemaMigrator(application, "idempotency_keys").migrate()
                            .migrationsExecuted).isZero();

                    assertThatThrownBy(() -> new IdempotencySchemaMigrator(application, "api_requests").migrate())
                            .isInstanceOfSatisfying(io.idempotency.jdbc.flyway.IdempotencySchemaException.class, e ->
                                    assertThat(e.problem()).isEqualTo(io.idempotency.jdbc.flyway
                                            .IdempotencySchemaException.Problem.MAY_NOT_CREATE))
                            .hasMessageContaining("api_requests does not exist")
                            .hasMessageContaining(role + " may not create")
                            .hasMessageContaining(IdempotencySchema.POSTGRESQL_SCRIPT);
                }
                assertThat(jdbc.queryForObject("select to_regclass('idempotency_schema_history') is null",
                        Boolean.class)).as("no history was half made").isTrue();
            });
        }
    }

    /**
     * The migration ran once as the owner (a deploy job, a DBA), and the application's role may read its history but
     * not change it: every later start needs nothing written there, and must not fail rewriting the checksums that
     * only histories of earlier versions hold.
     */
    @Test
    void aRoleThatMayOnlyReadTheHistoryStartsOnceTheMigrationRan() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        String role = "idempotency_" + database.schema() + "_reader";
        try (HikariDataSource owner = database.dataSource(2)) {
            new IdempotencySchemaMigrator(owner, "idempotency_keys").migrate();
            JdbcTemplate jdbc = new JdbcTemplate(owner);
            asNewRole(jdbc, role, () -> {
                jdbc.execute("grant usage, create on schema " + database.schema() + " to " + role);
                jdbc.execute("grant select, insert, update, delete on idempotency_keys to " + role);
                jdbc.execute("grant select on " + IdempotencySchemaMigrator.HISTORY_TABLE + " to " + role);
                try (HikariDataSource application = dataSourceAs(database, role)) {
                    assertThat(new IdempotencySchemaMigrator(application, "idempotency_keys").migrate()
                            .migrationsExecuted).isZero();
                }
            });
        }
    }

    /**
     * The partitioned table must be partitioned by range of {@code created_at}: claims put their records by it, and the
     * partitions are made and dropped by it. One partitioned otherwise — by {@code expires_at}, as natural a choice for
     * retention — was adopted: the application started, made partitions for the coming days, and every claim failed,
     * its record's expiry lying weeks ahead where no partition was.
     */
    @Test
    void aTablePartitionedByAnythingButCreationTimeIsRefused() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute(IdempotencySchema.postgresqlPartitioned("keys_by_expiry")
                    .replace("idempotency_key, created_at)", "idempotency_key, expires_at)")
                    .replace("PARTITION BY RANGE (created_at)", "PARTITION BY RANGE (expires_at)"));
            jdbc.execute(IdempotencySchema.postgresqlPartitioned("keys_by_caller")
                    .replace("PARTITION BY RANGE (created_at)", "PARTITION BY HASH (caller)"));

            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "keys_by_expiry", true).migrate(),
                    "partitioned by RANGE (expires_at)", "RANGE (created_at)");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "keys_by_expiry", true).verify(),
                    "partitioned by RANGE (expires_at)");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "keys_by_caller", true).verify(),
                    "partitioned by HASH (caller)");
            new PostgresPartitionMaintenance(dataSource, "keys_by_expiry", Duration.ofDays(1), 7, Duration.ofSeconds(2))
                    .createAhead(false);
            PostgresIdempotencyStore store = new PartitionedPostgresIdempotencyStore(dataSource, "keys_by_expiry");
            assertThatThrownBy(() -> store.claim(new ClaimRequest(new ScopedKey("", "POST /x", "k-expiry"),
                    "c".repeat(64), Duration.ofDays(30), Duration.ofSeconds(1))))
                    .as("what the check prevents").hasStackTraceContaining("no partition");
        }
    }

    /**
     * The unique key tells callers, scopes and keys apart only if its columns compare text exactly: under a
     * case-insensitive collation {@code Alice} and {@code alice} would be one caller, answered with each other's
     * stored answers; in {@code character(n)} trailing spaces do not count. Such a table is not the library's.
     */
    @Test
    void keyColumnsThatDoNotCompareTextExactlyAreRefused() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute("create collation ignoring_case (provider = icu, locale = 'und-u-ks-level2',"
                    + " deterministic = false)");
            jdbc.execute(IdempotencySchema.postgresql("callers_ignoring_case")
                    .replace("caller           varchar(255)", "caller           varchar(255) collate ignoring_case"));
            jdbc.execute(IdempotencySchema.postgresqlPartitioned("partitioned_keys_ignoring_case").replace(
                    "idempotency_key  varchar(255)", "idempotency_key  varchar(255) collate ignoring_case"));
            jdbc.execute(IdempotencySchema.postgresql("padded_scopes")
                    .replace("scope            varchar(255)", "scope            character(255)"));

            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "callers_ignoring_case").verify(),
                    "caller", "ignoring_case", "exactly");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "callers_ignoring_case").migrate(),
                    "caller");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "partitioned_keys_ignoring_case", true)
                    .verify(), "idempotency_key");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "padded_scopes").verify(),
                    "scope is character", "varchar");
        }
    }

    /**
     * The columns compare exactly, but the unique key names a nondeterministic collation of its own: ON CONFLICT
     * arbitrates with it all the same (beside the primary key too), and takes "alice" for "Alice", whose record the
     * claim's look-up, comparing exactly, never finds: every claim of "alice" on a key "Alice" used fails.
     */
    @Test
    void aUniqueKeyThatDoesNotCompareTextExactlyIsRefused() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute("create collation ignoring_case (provider = icu, locale = 'und-u-ks-level2',"
                    + " deterministic = false)");
            jdbc.execute(IdempotencySchema.postgresql("key_ignoring_case").replace(
                    "CONSTRAINT key_ignoring_case_pkey PRIMARY KEY (caller, scope, idempotency_key),", ""));
            jdbc.execute("create unique index key_ignoring_case_key on key_ignoring_case"
                    + " (caller collate ignoring_case, scope, idempotency_key)");
            jdbc.execute(IdempotencySchema.postgresql("also_key_ignoring_case"));
            jdbc.execute("create unique index also_key_ignoring_case_key on also_key_ignoring_case"
                    + " (idempotency_key, scope, caller collate ignoring_case)");

            for (String table : List.of("key_ignoring_case", "also_key_ignoring_case")) {
                // what the check prevents
                PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, table);
                TransactionTemplate transaction = new TransactionTemplate(new DataSourceTransactionManager(dataSource));
                ClaimResult first = transaction.execute(status -> store.claim(new ClaimRequest(new ScopedKey("Alice",
                        "POST /x", "k-1"), "c".repeat(64), Duration.ofDays(1), Duration.ofSeconds(1))));
                assertThat(first).isInstanceOf(ClaimResult.Claimed.class);
                assertThatThrownBy(() -> transaction.execute(status -> store.claim(new ClaimRequest(
                        new ScopedKey("alice", "POST /x", "k-1"), "d".repeat(64), Duration.ofDays(1),
                        Duration.ofSeconds(1))))).as(table).isInstanceOf(IllegalStateException.class)
                        .hasMessageContaining("could not claim");

                assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, table).verify(),
                        "unique key on (caller, scope, idempotency_key) compares with a nondeterministic collation");
                assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, table).migrate(),
                        "nondeterministic collation");
            }
        }
    }

    /**
     * A table made by hand or by another tool from the documented columns, with a length or type of its own, is used
     * as it is: key columns shorter than the 255 characters a caller, scope or key may have fail only the requests
     * with long ones (in production, not in the tests that used short keys); a status too short for PROCESSING, a
     * fencing token as text, a body as text fail the first claim or the first stored answer; a request hash padded
     * beyond its 64 characters would never equal the hash of a retry. Such a table stops the start, saying so.
     */
    @Test
    void columnsTooShortOrOfAnotherTypeAreRefused() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute(IdempotencySchema.postgresql("short_keys")
                    .replace("idempotency_key  varchar(255)", "idempotency_key  varchar(64)"));
            jdbc.execute(IdempotencySchema.postgresqlPartitioned("partitioned_short_callers")
                    .replace("caller           varchar(255)", "caller           varchar(100)"));
            jdbc.execute(IdempotencySchema.postgresql("other_types")
                    .replace("status           varchar(16)", "status           varchar(8)")
                    .replace("request_hash     char(64)", "request_hash     char(80)")
                    .replace("fencing_token    uuid", "fencing_token    text")
                    .replace("response_body    bytea", "response_body    text"));

            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "short_keys");
            assertThatThrownBy(() -> new TransactionTemplate(new DataSourceTransactionManager(dataSource))
                    .execute(status -> store.claim(new ClaimRequest(new ScopedKey("", "POST /x", "k".repeat(100)),
                            "c".repeat(64), Duration.ofDays(1), Duration.ofSeconds(1)))))
                    .as("what the check prevents").hasStackTraceContaining("value too long");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "short_keys").verify(),
                    "idempotency_key is character varying(64)", "255 characters");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "short_keys").migrate(),
                    "idempotency_key is character varying(64)");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "partitioned_short_callers", true)
                    .verify(), "caller is character varying(100)");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "other_types").verify(),
                    "status is character varying(8)", "request_hash is character(80)",
                    "fencing_token is text, not uuid", "response_body is text, not bytea");

            jdbc.execute(IdempotencySchema.postgresql("longer_and_unbounded")
                    .replace("caller           varchar(255)", "caller           text")
                    .replace("idempotency_key  varchar(255)", "idempotency_key  varchar(1000)")
                    .replace("request_hash     char(64)", "request_hash     varchar")
                    .replace("response_status  integer", "response_status  smallint"));
            new IdempotencySchemaMigrator(dataSource, "longer_and_unbounded").verify();
        }
    }

    /**
     * A headers column of a bounded length (a table written by hand, {@code varchar(255)}) refuses an answer whose
     * replayed headers are longer — a list's pagination links — when it is stored, after the handler ran: every such
     * request fails. Such a table stops the start; a long enough or unbounded one does not.
     */
    @Test
    void aHeadersColumnTooShortForTheStoredHeadersIsRefused() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute(IdempotencySchema.postgresql("short_headers")
                    .replace("response_headers text", "response_headers varchar(255)"));

            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "short_headers");
            ScopedKey key = new ScopedKey("", "GET /orders", "k-1");
            String link = "<https://api.example.com/orders?page=2&per_page=100&sort=created_at>; rel=\"next\", "
                    .repeat(5);
            assertThatThrownBy(() -> new TransactionTemplate(new DataSourceTransactionManager(dataSource))
                    .execute(status -> {
                        ClaimResult.Claimed claimed = (ClaimResult.Claimed) store.claim(new ClaimRequest(key,
                                "c".repeat(64), Duration.ofDays(1), Duration.ofSeconds(1)));
                        return store.complete(key, claimed.fencingToken(), new StoredResponse(200,
                                List.of(new StoredResponse.Header("Link", link)), new byte[0]));
                    })).as("what the check prevents").hasStackTraceContaining("value too long");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "short_headers").verify(),
                    "response_headers is character varying(255), not text");

            jdbc.execute(IdempotencySchema.postgresql("long_enough_headers")
                    .replace("response_headers text", "response_headers varchar(65535)"));
            new IdempotencySchemaMigrator(dataSource, "long_enough_headers").verify();
            jdbc.execute(IdempotencySchema.postgresql("unbounded_headers")
                    .replace("response_headers text", "response_headers varchar"));
            new IdempotencySchemaMigrator(dataSource, "unbounded_headers").verify();
        }
    }

    /**
     * A unique key on only some of the key columns (a table whose keys were once unique by themselves) makes two
     * callers' identical keys collide: the second caller's claim fails on it, for as long as the first one's record is
     * kept, since the claim's insert is arbitrated on the three columns only. Such a table stops the start.
     */
    @Test
    void aUniqueKeyOnSomeOfTheKeyColumnsIsRefused() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute(IdempotencySchema.postgresql("keys_unique_alone"));
            jdbc.execute("create unique index keys_unique_alone_key_idx on keys_unique_alone (idempotency_key)");

            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "keys_unique_alone");
            TransactionTemplate transaction = new TransactionTemplate(new DataSourceTransactionManager(dataSource));
            transaction.execute(status -> store.claim(new ClaimRequest(new ScopedKey("alice", "POST /x", "k-1"),
                    "c".repeat(64), Duration.ofDays(1), Duration.ofSeconds(1))));
            assertThatThrownBy(() -> transaction.execute(status -> store.claim(new ClaimRequest(
                    new ScopedKey("bob", "POST /x", "k-1"), "c".repeat(64), Duration.ofDays(1),
                    Duration.ofSeconds(1))))).as("what the check prevents").hasStackTraceContaining("duplicate key");

            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "keys_unique_alone").verify(),
                    "keys_unique_alone_key_idx", "(idempotency_key)");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "keys_unique_alone").migrate(),
                    "keys_unique_alone_key_idx");
        }
    }

    /**
     * So does a unique key on expressions over the key columns: one on {@code lower(caller)} (for names that should
     * not differ in case) makes "Alice" and "alice" collide, and the second caller's claim fails on it for as long as
     * the first one's record is kept, as with a key on some of the columns. Such a table stops the start too; a unique
     * key that holds all three columns as they are, beside an expression, makes no distinct keys collide.
     */
    @Test
    void aUniqueKeyOnExpressionsOverTheKeyColumnsIsRefused() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute(IdempotencySchema.postgresql("callers_folded"));
            jdbc.execute("create unique index callers_folded_lower_idx on callers_folded (lower(caller), scope,"
                    + " idempotency_key)");

            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "callers_folded");
            TransactionTemplate transaction = new TransactionTemplate(new DataSourceTransactionManager(dataSource));
            transaction.execute(status -> store.claim(new ClaimRequest(new ScopedKey("Alice", "POST /x", "k-1"),
                    "c".repeat(64), Duration.ofDays(1), Duration.ofSeconds(1))));
            assertThatThrownBy(() -> transaction.execute(status -> store.claim(new ClaimRequest(
                    new ScopedKey("alice", "POST /x", "k-1"), "c".repeat(64), Duration.ofDays(1),
                    Duration.ofSeconds(1))))).as("what the check prevents").hasStackTraceContaining("duplicate key");

            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "callers_folded").verify(),
                    "callers_folded_lower_idx");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "callers_folded").migrate(),
                    "callers_folded_lower_idx");

            jdbc.execute(IdempotencySchema.postgresql("keys_folded"));
            jdbc.execute("create unique index keys_folded_lower_idx on keys_folded (lower(idempotency_key))");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "keys_folded").verify(),
                    "keys_folded_lower_idx");

            jdbc.execute(IdempotencySchema.postgresql("keys_and_more"));
            jdbc.execute("create unique index keys_and_more_idx on keys_and_more (caller, scope, idempotency_key,"
                    + " lower(status))");
            new IdempotencySchemaMigrator(dataSource, "keys_and_more").verify();
        }
    }

    /**
     * An exclusion constraint on some of the key columns with equality ({@code EXCLUDE (idempotency_key WITH =)}) is
     * such a unique key under another name: the second caller's claim of a key fails on it. Such a table stops the
     * start too.
     */
    @Test
    void anExclusionConstraintOnSomeOfTheKeyColumnsIsRefused() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute(IdempotencySchema.postgresql("keys_excluded"));
            jdbc.execute("alter table keys_excluded add constraint keys_excluded_key_excl exclude using btree"
                    + " (idempotency_key with =)");

            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "keys_excluded");
            TransactionTemplate transaction = new TransactionTemplate(new DataSourceTransactionManager(dataSource));
            transaction.execute(status -> store.claim(new ClaimRequest(new ScopedKey("alice", "POST /x", "k-1"),
                    "c".repeat(64), Duration.ofDays(1), Duration.ofSeconds(1))));
            assertThatThrownBy(() -> transaction.execute(status -> store.claim(new ClaimRequest(
                    new ScopedKey("bob", "POST /x", "k-1"), "c".repeat(64), Duration.ofDays(1),
                    Duration.ofSeconds(1))))).as("what the check prevents")
                    .hasStackTraceContaining("violates exclusion constraint");

            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "keys_excluded").verify(),
                    "keys_excluded_key_excl", "(idempotency_key)");
        }
    }

    /**
     * A precision on the time columns (Hibernate's DDL writes {@code timestamp(6) with time zone}, a DBA may write
     * {@code timestamptz(3)}) keeps them timestamptz: the table is the library's, and the start goes on. One of fewer
     * than three digits is refused: PostgreSQL rounds the times written to it, and a lease could be stored up to half a
     * second short, run out as it is claimed.
     */
    @Test
    void timesWithAPrecisionAreTimestamptzAllTheSame() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute(IdempotencySchema.postgresql("precise_times")
                    .replace("created_at       timestamptz", "created_at       timestamp(6) with time zone")
                    .replace("locked_until     timestamptz", "locked_until     timestamptz(3)"));
            jdbc.execute(IdempotencySchema.postgresqlPartitioned("partitioned_precise_times")
                    .replace("expires_at       timestamptz", "expires_at       timestamptz(6)"));

            new IdempotencySchemaMigrator(dataSource, "precise_times").verify();
            new IdempotencySchemaMigrator(dataSource, "precise_times").migrate();
            new IdempotencySchemaMigrator(dataSource, "partitioned_precise_times", true).verify();
            new IdempotencySchemaMigrator(dataSource, "partitioned_precise_times", true).migrate();

            jdbc.execute(IdempotencySchema.postgresql("coarse_times")
                    .replace("locked_until     timestamptz", "locked_until     timestamptz(0)"));
            jdbc.execute(IdempotencySchema.postgresqlPartitioned("partitioned_coarse_times")
                    .replace("created_at       timestamptz", "created_at       timestamptz(2)"));
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "coarse_times").verify(),
                    "locked_until is timestamp(0) with time zone", "milliseconds");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "partitioned_coarse_times", true)
                    .migrate(), "created_at is timestamp(2) with time zone");
        }
    }

    /**
     * A table made by another tool from the documented columns may leave out their defaults (Hibernate's DDL writes
     * {@code created_at timestamp(6) with time zone not null}, with none). The check adopts it, so the claim must not
     * depend on them: it writes its times itself, from the database's clock, or every claim would fail on the
     * missing creation time, answered 503 for as long as the table is used.
     */
    @Test
    void aTableWhoseTimesHaveNoDefaultsTakesClaims() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute(IdempotencySchema.postgresql("times_without_defaults")
                    .replace("created_at       timestamptz  NOT NULL DEFAULT now()",
                            "created_at       timestamp(6) with time zone NOT NULL")
                    .replace("updated_at       timestamptz  NOT NULL DEFAULT now()",
                            "updated_at       timestamp(6) with time zone NOT NULL"));
            jdbc.execute(IdempotencySchema.postgresqlPartitioned("partitioned_times_without_defaults")
                    .replace("created_at       timestamptz  NOT NULL DEFAULT now()", "created_at       timestamptz  NOT NULL")
                    .replace("updated_at       timestamptz  NOT NULL DEFAULT now()", "updated_at       timestamptz  NOT NULL"));
            new IdempotencySchemaMigrator(dataSource, "times_without_defaults").verify();
            new IdempotencySchemaMigrator(dataSource, "partitioned_times_without_defaults", true).verify();
            new PostgresPartitionMaintenance(dataSource, "partitioned_times_without_defaults", Duration.ofDays(1), 1,
                    Duration.ofSeconds(2)).createAhead(false);
            TransactionTemplate transaction = new TransactionTemplate(new DataSourceTransactionManager(dataSource));

            for (PostgresIdempotencyStore store : List.of(
                    new PostgresIdempotencyStore(dataSource, "times_without_defaults"),
                    new PartitionedPostgresIdempotencyStore(dataSource, "partitioned_times_without_defaults"))) {
                ClaimResult result = transaction.execute(status -> store.claim(new ClaimRequest(
                        new ScopedKey("", "POST /x", "k-1"), "c".repeat(64), Duration.ofDays(1),
                        Duration.ofSeconds(1))));

                assertThat(result).isInstanceOf(ClaimResult.Claimed.class);
            }
            assertThat(jdbc.queryForObject("select count(*) from times_without_defaults where created_at > now() - interval"
                    + " '1 minute' and updated_at = created_at", Integer.class)).as("the database's clock").isEqualTo(1);
        }
    }

    /**
     * A claim has no answer yet, and a claim of the default mode no lease: it leaves those columns empty. A table made
     * by another tool may have made them {@code NOT NULL} (Hibernate's DDL does so for an entity's primitive
     * {@code int responseStatus}), and then every claim fails, each request answered 503. Such a table stops the start.
     */
    @Test
    void columnsAClaimLeavesEmptyMustTakeNoValue() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute(IdempotencySchema.postgresql("answers_required")
                    .replace("response_status  integer,", "response_status  integer NOT NULL,")
                    .replace("locked_until     timestamptz,", "locked_until     timestamptz NOT NULL,")
                    .replace("CONSTRAINT answers_required_response_check CHECK ((status = 'SUCCEEDED') ="
                            + " (response_status IS NOT NULL))", "CHECK (true)"));
            jdbc.execute(IdempotencySchema.postgresqlPartitioned("partitioned_bodies_required")
                    .replace("response_body    bytea,", "response_body    bytea NOT NULL,"));

            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "answers_required");
            assertThatThrownBy(() -> new TransactionTemplate(new DataSourceTransactionManager(dataSource))
                    .execute(status -> store.claim(new ClaimRequest(new ScopedKey("", "POST /x", "k-1"),
                            "c".repeat(64), Duration.ofDays(1), Duration.ofSeconds(1)))))
                    .as("what the check prevents").hasStackTraceContaining("null value in column");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "answers_required").verify(),
                    "response_status", "locked_until", "NOT NULL");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "answers_required").migrate(),
                    "response_status");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "partitioned_bodies_required", true)
                    .verify(), "response_body");
        }
    }

    /**
     * A table made by another tool may have columns of its own: a surrogate id (Hibernate's DDL makes an entity's
     * {@code @Id} from a sequence {@code bigint not null}, with no default), a version. The claim writes none of them,
     * so one that is {@code NOT NULL} with no default fails every claim, each request answered 503. Such a table
     * stops the start; one whose extra columns fill themselves (a default, an identity) or may stay empty is adopted.
     */
    @Test
    void columnsOfTheTablesOwnThatAClaimCannotLeaveEmptyAreRefused() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute(IdempotencySchema.postgresql("entity_ids"));
            jdbc.execute("ALTER TABLE entity_ids ADD COLUMN id bigint NOT NULL");
            jdbc.execute(IdempotencySchema.postgresqlPartitioned("partitioned_versions"));
            jdbc.execute("ALTER TABLE partitioned_versions ADD COLUMN version integer NOT NULL");
            jdbc.execute(IdempotencySchema.postgresql("filled_extras"));
            jdbc.execute("CREATE DOMAIN tenant AS text DEFAULT 'main'");
            jdbc.execute("ALTER TABLE filled_extras ADD COLUMN id bigint GENERATED ALWAYS AS IDENTITY,"
                    + " ADD COLUMN tenant tenant NOT NULL,"
                    + " ADD COLUMN version integer NOT NULL DEFAULT 0, ADD COLUMN note text,"
                    + " ADD COLUMN key_length integer GENERATED ALWAYS AS (length(idempotency_key)) STORED NOT NULL");

            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "entity_ids");
            assertThatThrownBy(() -> new TransactionTemplate(new DataSourceTransactionManager(dataSource))
                    .execute(status -> store.claim(new ClaimRequest(new ScopedKey("", "POST /x", "k-1"),
                            "c".repeat(64), Duration.ofDays(1), Duration.ofSeconds(1)))))
                    .as("what the check prevents").hasStackTraceContaining("null value in column \"id\"");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "entity_ids").verify(),
                    "id", "NOT NULL");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "entity_ids").migrate(), "id");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "partitioned_versions", true).verify(),
                    "version");
            new IdempotencySchemaMigrator(dataSource, "filled_extras").verify();
            PostgresIdempotencyStore filled = new PostgresIdempotencyStore(dataSource, "filled_extras");
            ClaimResult claimed = new TransactionTemplate(new DataSourceTransactionManager(dataSource)).execute(
                    status -> filled.claim(new ClaimRequest(new ScopedKey("", "POST /x", "k-1"), "c".repeat(64),
                            Duration.ofDays(1), Duration.ofSeconds(1))));
            assertThat(claimed).isInstanceOf(ClaimResult.Claimed.class);
        }
    }

    /** Creates {@code role}, runs {@code body}, then drops the role and everything granted to it. */
    private static void asNewRole(JdbcTemplate owner, String role, Runnable body) {
        owner.execute("create role " + role);
        try {
            body.run();
        } finally {
            owner.execute("drop owned by " + role);
            owner.execute("drop role " + role);
        }
    }

    /** A pool of {@code database} whose connections act as {@code role}, as an application's would. */
    private static HikariDataSource dataSourceAs(TestPostgres.Database database, String role) {
        return database.dataSource(2, config -> config.setConnectionInitSql("set role " + role));
    }

    /**
     * A column of the table's own may be of a domain: one whose domain is {@code NOT NULL}, or that is {@code NOT NULL}
     * with an explicit {@code DEFAULT NULL} (which PostgreSQL keeps for a domain, where it overrides the domain's
     * default), gets no value from a claim either, and fails every claim just the same.
     */
    @Test
    void columnsOfTheTablesOwnOfADomainThatAClaimCannotLeaveEmptyAreRefused() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute("CREATE DOMAIN entity_id AS bigint NOT NULL");
            jdbc.execute("CREATE DOMAIN tenant AS text DEFAULT 'main'");
            jdbc.execute(IdempotencySchema.postgresql("domain_ids"));
            jdbc.execute("ALTER TABLE domain_ids ADD COLUMN id entity_id");
            jdbc.execute(IdempotencySchema.postgresql("null_tenants"));
            jdbc.execute("ALTER TABLE null_tenants ADD COLUMN tenant tenant NOT NULL DEFAULT NULL");

            for (String table : List.of("domain_ids", "null_tenants")) {
                PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, table);
                assertThatThrownBy(() -> new TransactionTemplate(new DataSourceTransactionManager(dataSource))
                        .execute(status -> store.claim(new ClaimRequest(new ScopedKey("", "POST /x", "k-1"),
                                "c".repeat(64), Duration.ofDays(1), Duration.ofSeconds(1)))))
                        .as("what the check prevents").hasStackTraceContaining("null value");
            }
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "domain_ids").verify(), "id", "NOT NULL");
            assertWrongShape(() -> new IdempotencySchemaMigrator(dataSource, "null_tenants").verify(), "tenant",
                    "NOT NULL");
        }
    }

    private static void assertWrongShape(org.assertj.core.api.ThrowableAssert.ThrowingCallable startup,
                                         String... said) {
        assertThatThrownBy(startup)
                .isInstanceOfSatisfying(io.idempotency.jdbc.flyway.IdempotencySchemaException.class, e ->
                        assertThat(e.problem()).isEqualTo(
                                io.idempotency.jdbc.flyway.IdempotencySchemaException.Problem.WRONG_SHAPE))
                .message().contains(said);
    }

    @Test
    void aClaimOutsideReadCommittedIsRefused() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(2)) {
            new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            TransactionTemplate repeatableRead = new TransactionTemplate(new DataSourceTransactionManager(dataSource));
            repeatableRead.setIsolationLevel(TransactionTemplate.ISOLATION_REPEATABLE_READ);

            assertThatThrownBy(() -> repeatableRead.execute(status -> store.claim(new ClaimRequest(
                    new ScopedKey("", "POST /x", "k-rr"), "c".repeat(64), Duration.ofDays(1), Duration.ofSeconds(1)))))
                    .isInstanceOf(IllegalStateException.class)
                    .hasMessageContaining("READ COMMITTED");
            assertThat(new JdbcTemplate(dataSource).queryForObject(
                    "select count(*) from idempotency_keys", Integer.class)).as("rolled back").isZero();
        }
    }

    @Test
    void tableNamesThatAreNotPlainIdentifiersAreRejected() {
        assertThatThrownBy(() -> IdempotencySchema.checkTableName("keys; drop table payments"))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("plain SQL identifier");
        assertThatThrownBy(() -> IdempotencySchema.checkTableName("public.keys"))
                .isInstanceOf(IllegalArgumentException.class);
        // the names made from it (indexes, partitions) must stay distinct after PostgreSQL cuts them at 63
        String longest = "k".repeat(IdempotencySchema.MAX_TABLE_NAME_LENGTH);
        assertThat(IdempotencySchema.checkTableName(longest)).isEqualTo(longest);
        assertThatThrownBy(() -> IdempotencySchema.checkTableName(longest + "k"))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("at most 46 characters");
    }
}
