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
