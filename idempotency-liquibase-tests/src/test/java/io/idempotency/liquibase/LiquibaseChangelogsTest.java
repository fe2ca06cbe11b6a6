package io.idempotency.liquibase;

import io.idempotency.core.IdempotencyTemplate;
import io.idempotency.core.ScopedKey;
import io.idempotency.spring.TestDatabases;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.context.ApplicationContext;
import org.springframework.jdbc.core.JdbcTemplate;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The library's table beside an application's Liquibase changelog: the library's migration and its startup check run
 * after Liquibase, whatever the changelog does with the table — makes it from a shipped script, leaves it to the
 * library, makes it to add an index of its own, or makes it wrong.
 */
class LiquibaseChangelogsTest {

    private static final String ATTACHED = "select count(*) from pg_inherits"
            + " where inhparent = to_regclass('idempotency_keys')";

    private static final String SCRIPT = "io/idempotency/jdbc/postgresql/schema.sql";

    private static final String PARTITIONED_SCRIPT = "io/idempotency/jdbc/postgresql/partitioned-schema.sql";

    /** Boot's Liquibase, a DataSource, its transactions and the starter, on a fresh database. */
    private static ApplicationContextRunner application(TestPostgres.Database database, String changelog) {
        return TestDatabases.nonWebRunner(database)
                .withConfiguration(AutoConfigurations.of(
                        org.springframework.boot.jdbc.autoconfigure.JdbcTemplateAutoConfiguration.class,
                        org.springframework.boot.liquibase.autoconfigure.LiquibaseAutoConfiguration.class))
                .withPropertyValues("spring.liquibase.change-log=classpath:db/" + changelog);
    }

    /**
     * The changelog refers to the script in the jar, which a later version of the library may change (a comment will
     * do): Liquibase then finds another checksum for a changeset it ran long ago, and refuses to start unless told
     * that any is valid. The startup check, not the checksum, says whether the table is what the library needs.
     */
    @Test
    void theChangelogOfTheScriptInTheJarStartsAgainAfterTheScriptChanged() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        ApplicationContextRunner application = application(database, "self-managed.xml")
                .withPropertyValues("idempotency.jdbc.initialize-schema=false");
        application.run(context -> assertThat(context).hasNotFailed());
        // as if an earlier version's script had run: its checksum is not the one the jar's script has now
        database.queryString("update databasechangelog set md5sum = '9:00000000000000000000000000000000'"
                + " where id = 'idempotency-keys'");

        application.run(context -> {
            assertThat(context).hasNotFailed();
            assertClaimedOnceAndReplayed(context, database);
        });
    }

    @Test
    void thePartitionedScriptAppliedByLiquibaseIsPartitionedAndClaimedIn() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        application(database, "self-managed-partitioned.xml")
                .withPropertyValues("idempotency.jdbc.initialize-schema=false",
                        "idempotency.retention.cleanup.mode=drop-partitions")
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    // the current partition and the seven made ahead, by the library on the changelog's table
                    assertThat(database.queryLong(ATTACHED)).isEqualTo(8);
                    assertClaimedOnceAndReplayed(context, database);
                    assertThat(database.queryString("select to_regclass('idempotency_schema_history')")).isNull();
                });
    }

    @Test
    void theLibraryMigratesAfterTheChangelogOfTheApplicationsOwnTables() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        application(database, "business-tables.xml").run(context -> {
            assertThat(context).hasNotFailed();
            assertThat(database.queryString("select seen from idempotency_table_seen"))
                    .as("the library's table when the changelog ran").isEqualTo("f");
            // made by the library's migration (version 1 run, not adopted)
            assertThat(database.queryString("select type from idempotency_schema_history where version = '1'"
                    + " and success")).isEqualTo("JDBC");
            assertClaimedOnceAndReplayed(context, database);
        });
    }

    @Test
    void aTableTheChangelogMadeFromTheScriptIsAdoptedWithTheApplicationsOwnIndex() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        ApplicationContextRunner application = application(database, "own-index.xml");
        application.run(context -> {
            assertThat(context).hasNotFailed();
            // adopted: its history starts at version 1, the table as the changelog made it
            assertThat(database.queryString("select type from idempotency_schema_history where version = '1'"
                    + " and success")).isEqualTo("BASELINE");
            assertThat(database.queryString("select to_regclass('idempotency_keys_scope_idx')")).isNotNull();
            assertClaimedOnceAndReplayed(context, database);
        });
        // started again: nothing left to run for either, and the records are kept
        application.run(context -> {
            assertThat(context).hasNotFailed();
            assertThat(database.queryLong("select count(*) from idempotency_schema_history")).isEqualTo(1);
            assertThat(database.queryLong("select count(*) from idempotency_keys")).isEqualTo(1);
            assertClaimedOnceAndReplayed(context, database);
        });
    }

    @Test
    void aTableWithoutItsUniqueKeyStopsTheStartSayingSo() {
        TestPostgres.Database managedElsewhere = TestPostgres.newDatabase();
        application(managedElsewhere, "without-unique-key.xml")
                .withPropertyValues("idempotency.jdbc.initialize-schema=false")
                .run(context -> {
                    assertThat(context).hasFailed();
                    assertThat(context.getStartupFailure()).rootCause().hasMessageContaining(
                            "there is no unique key on (caller, scope, idempotency_key), which arbitrates claims");
                });
        TestPostgres.Database adopted = TestPostgres.newDatabase();
        application(adopted, "without-unique-key.xml").run(context -> {
            assertThat(context).hasFailed();
            assertThat(context.getStartupFailure()).rootCause().hasMessageContaining(
                    "there is no unique key on (caller, scope, idempotency_key), which arbitrates claims");
            assertThat(adopted.queryLong("select count(*) from idempotency_keys")).isZero();
        });
    }

    /**
     * The script in the jar included as a changelog of its own: Liquibase splits it right (a {@code ;} in its comments)
     * and makes it one changeset, {@code raw} by {@code includeAll}, which has no place for {@code validCheckSum}. A
     * later version's script that differs stops the start; the changeset the README describes, given that identity,
     * accepts it without running again.
     */
    @Test
    void theScriptInTheJarIncludedAsAChangelogRefusesALaterVersionsScriptUntilMadeAChangeset() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        ApplicationContextRunner included = application(database, "include-script-in-jar.xml")
                .withPropertyValues("idempotency.jdbc.initialize-schema=false");
        assertTheWholeScriptRanAndServes(included, database);
        assertThat(database.queryString("select id || ' ' || author from databasechangelog"
                + " where filename = 'io/idempotency/jdbc/postgresql/schema.sql'")).isEqualTo("raw includeAll");
        // as if an earlier version's script had run
        database.queryString("update databasechangelog set md5sum = '9:00000000000000000000000000000000'"
                + " where id = 'raw'");

        included.run(context -> {
            assertThat(context).hasFailed();
            assertThat(context.getStartupFailure()).rootCause().hasMessageContaining(
                    "io/idempotency/jdbc/postgresql/schema.sql::raw::includeAll was: 9:00000000000000000000000000000000");
        });
        application(database, "included-script-as-changeset.xml")
                .withPropertyValues("idempotency.jdbc.initialize-schema=false")
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    assertThat(database.queryLong("select count(*) from databasechangelog")).isEqualTo(2);
                    assertThat(database.queryLong("select count(*) from idempotency_keys")).isEqualTo(1);
                    assertClaimedOnceAndReplayed(context, database);
                });
    }

    /** A copy of the script, as it is, in a folder of the application's that {@code includeAll} takes in. */
    @Test
    void aCopyOfTheScriptIncludedWithItsFolderIsSplitAndClaimedIn() throws IOException {
        assertThat(resource("db/idempotency/schema.sql")).isEqualTo(resource(SCRIPT));
        TestPostgres.Database database = TestPostgres.newDatabase();
        assertTheWholeScriptRanAndServes(application(database, "include-all-copy.xml")
                .withPropertyValues("idempotency.jdbc.initialize-schema=false"), database);
    }

    /** The script's statements, as they are, after a {@code --changeset} line of a formatted SQL changelog. */
    @Test
    void theScriptsStatementsInAFormattedSqlChangelogAreSplitAndClaimedIn() throws IOException {
        assertThat(resource("db/formatted-statements.sql"))
                .endsWith("--changeset shop:idempotency-keys\n" + resource(SCRIPT));
        TestPostgres.Database database = TestPostgres.newDatabase();
        assertTheWholeScriptRanAndServes(application(database, "formatted-statements.sql")
                .withPropertyValues("idempotency.jdbc.initialize-schema=false"), database);
    }

    /**
     * A formatted SQL changelog cannot include another (Liquibase has no {@code include} there): the line meant to is
     * a comment of the changeset before it, no table is made, and the startup check says so.
     */
    @Test
    void aFormattedSqlChangelogCannotIncludeTheScriptAndTheStartupCheckSaysTheTableIsMissing() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        application(database, "formatted-include-script.sql")
                .withPropertyValues("idempotency.jdbc.initialize-schema=false")
                .run(context -> {
                    assertThat(context).hasFailed();
                    assertThat(context.getStartupFailure()).rootCause()
                            .hasMessageContaining("table idempotency_keys does not exist");
                    assertThat(database.queryLong("select count(*) from databasechangelog")).isEqualTo(1);
                });
    }

    /**
     * The partitioned script in the jar included as a changelog of its own, in {@code drop-partitions} mode: Liquibase
     * splits it right (a {@code ;} in its comments) and runs it whole, the startup check accepts the partitioned
     * table, and the library makes its partitions on it.
     */
    @Test
    void thePartitionedScriptInTheJarIncludedAsAChangelogIsSplitPartitionedAndClaimedIn() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        ApplicationContextRunner included = application(database, "include-partitioned-script-in-jar.xml")
                .withPropertyValues("idempotency.jdbc.initialize-schema=false",
                        "idempotency.retention.cleanup.mode=drop-partitions");
        assertTheWholePartitionedScriptRanAndServes(included, database);
        assertThat(database.queryString("select id || ' ' || author from databasechangelog"
                + " where filename = '" + PARTITIONED_SCRIPT + "'")).isEqualTo("raw includeAll");

        // started again: Liquibase runs nothing, the library finds its partitions there, the records are kept
        included.run(context -> {
            assertThat(context).hasNotFailed();
            assertThat(database.queryLong("select count(*) from databasechangelog")).isEqualTo(2);
            assertThat(database.queryLong("select count(*) from idempotency_keys")).isEqualTo(1);
            assertClaimedOnceAndReplayed(context, database);
        });
    }

    /**
     * The partitioned script's statements, as they are, after a {@code --changeset} line of a formatted SQL
     * changelog, in {@code drop-partitions} mode.
     */
    @Test
    void thePartitionedScriptsStatementsInAFormattedSqlChangelogAreSplitPartitionedAndClaimedIn() throws IOException {
        assertThat(resource("db/formatted-partitioned-statements.sql"))
                .endsWith("--changeset shop:idempotency-keys\n" + resource(PARTITIONED_SCRIPT));
        TestPostgres.Database database = TestPostgres.newDatabase();
        assertTheWholePartitionedScriptRanAndServes(application(database, "formatted-partitioned-statements.sql")
                .withPropertyValues("idempotency.jdbc.initialize-schema=false",
                        "idempotency.retention.cleanup.mode=drop-partitions"), database);
    }

    /**
     * In {@code drop-partitions} mode the application starts, every statement of the partitioned script ran, the
     * library made the current partition and the seven ahead, and a key is claimed once and replayed.
     */
    private static void assertTheWholePartitionedScriptRanAndServes(ApplicationContextRunner runner,
                                                                    TestPostgres.Database database) {
        runner.run(context -> {
            assertThat(context).hasNotFailed();
            assertThat(database.queryString("select p.partstrat::text || ' ' || a.attname from pg_partitioned_table p"
                    + " join pg_attribute a on a.attrelid = p.partrelid and a.attnum = p.partattrs[0]"
                    + " where p.partrelid = to_regclass('idempotency_keys')")).isEqualTo("r created_at");
            assertThat(database.queryLong("select count(*) from pg_constraint"
                    + " where conrelid = to_regclass('idempotency_keys') and contype = 'c'")).isEqualTo(2);
            assertThat(database.queryString("select string_agg(c.relname, ' ' order by c.relname) from pg_index x"
                    + " join pg_class c on c.oid = x.indexrelid where x.indrelid = to_regclass('idempotency_keys')"))
                    .isEqualTo("idempotency_keys_expires_at_idx idempotency_keys_locked_until_idx"
                            + " idempotency_keys_pkey");
            assertThat(database.queryLong(ATTACHED)).isEqualTo(8);
            assertThat(database.queryString("select to_regclass('idempotency_schema_history')")).isNull();
            assertClaimedOnceAndReplayed(context, database);
        });
    }

    /** The application starts, every statement of the script ran, and a key is claimed once and replayed. */
    private static void assertTheWholeScriptRanAndServes(ApplicationContextRunner runner,
                                                         TestPostgres.Database database) {
        runner.run(context -> {
            assertThat(context).hasNotFailed();
            assertMadeByTheWholeScript(database);
            assertClaimedOnceAndReplayed(context, database);
        });
    }

    /** Every statement of the script ran: the table with its fill factor, its checks, and both of its indexes. */
    private static void assertMadeByTheWholeScript(TestPostgres.Database database) {
        assertThat(database.queryString("select reloptions::text from pg_class"
                + " where oid = to_regclass('idempotency_keys')")).isEqualTo("{fillfactor=90}");
        assertThat(database.queryLong("select count(*) from pg_constraint"
                + " where conrelid = to_regclass('idempotency_keys') and contype = 'c'")).isEqualTo(2);
        assertThat(database.queryString("select string_agg(indexname, ' ' order by indexname) from pg_indexes"
                + " where schemaname = current_schema() and tablename = 'idempotency_keys'"))
                .isEqualTo("idempotency_keys_expires_at_idx idempotency_keys_locked_until_idx idempotency_keys_pkey");
    }

    private static String resource(String path) throws IOException {
        try (InputStream in = LiquibaseChangelogsTest.class.getClassLoader().getResourceAsStream(path)) {
            assertThat(in).as(path).isNotNull();
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        }
    }

    /** One key executed twice: the work runs once, the second answer is the first one's, replayed. */
    private static void assertClaimedOnceAndReplayed(ApplicationContext context, TestPostgres.Database database)
            throws Exception {
        IdempotencyTemplate template = context.getBean(IdempotencyTemplate.class);
        JdbcTemplate jdbc = context.getBean(JdbcTemplate.class);
        ScopedKey key = new ScopedKey("", "POST /orders", UUID.randomUUID().toString());
        String reference = "order-" + key.key();
        byte[] request = reference.getBytes(StandardCharsets.UTF_8);

        IdempotencyTemplate.Result first = template.execute(key, request, () -> {
            jdbc.update("insert into orders (reference) values (?)", reference);
            return reference.getBytes(StandardCharsets.UTF_8);
        });
        IdempotencyTemplate.Result second = template.execute(key, request, () -> {
            jdbc.update("insert into orders (reference) values (?)", reference);
            return "again".getBytes(StandardCharsets.UTF_8);
        });

        assertThat(first.replayed()).isFalse();
        assertThat(second.replayed()).isTrue();
        assertThat(new String(second.value(), StandardCharsets.UTF_8)).isEqualTo(reference);
        assertThat(database.queryLong("select count(*) from orders where reference = '" + reference + "'"))
                .isEqualTo(1);
        assertThat(database.queryString("select status from idempotency_keys where idempotency_key = '" + key.key()
                + "'")).isEqualTo("SUCCEEDED");
    }
}
