package io.idempotency.spring;

import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The README warns that the library's migration takes two connections of the application's pool at once (Flyway's
 * lock and its migration): with a pool of one, the start waits for the second until the pool's connection timeout and
 * fails. With two it starts. Should the migration come to need fewer, or more, the warning must change with it.
 */
class SchemaMigrationConnectionsTest {

    @Test
    void aPoolOfOneConnectionCannotMigrateTheTableAndTwoCan() {
        TestPostgres.Database one = TestPostgres.newDatabase();
        TestDatabases.contextRunner(one).withPropertyValues("spring.datasource.hikari.maximum-pool-size=1",
                        "spring.datasource.hikari.connection-timeout=1000")
                .run(context -> {
                    assertThat(context).as("the migration waits for a second connection").hasFailed();
                    assertThat(context.getStartupFailure()).rootCause().hasMessageContaining("Connection is not"
                            + " available");
                });

        TestPostgres.Database two = TestPostgres.newDatabase();
        TestDatabases.contextRunner(two).withPropertyValues("spring.datasource.hikari.maximum-pool-size=2",
                        "spring.datasource.hikari.connection-timeout=1000")
                .run(context -> assertThat(context).hasNotFailed());
        assertThat(two.queryLong("select count(*) from idempotency_keys")).as("the table was made").isZero();
    }
}
