package io.idempotency.spring;

import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.boot.diagnostics.FailureAnalysis;

import static io.idempotency.spring.StartupFailures.startupFailure;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code idempotency.jdbc.table-name} set to a PostgreSQL reserved key word: the application does not start, and the
 * report names the setting and why, rather than a syntax error of the migration's first statement.
 */
class ReservedTableNameSettingTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    @ParameterizedTest
    @ValueSource(strings = {"user", "order", "Group", "left"})
    void aReservedKeyWordAsTheTableNameStopsTheStartNamingTheSetting(String table) {
        for (String initialize : new String[] {"true", "false"}) {
            FailureAnalysis analysis = new IdempotencyFailureAnalyzer().analyze(startupFailure(
                    TestDatabases.contextRunner(DATABASE).withPropertyValues("idempotency.jdbc.table-name=" + table,
                            "idempotency.jdbc.initialize-schema=" + initialize)));
            assertThat(analysis).as("a report naming the setting, not a bare SQL error").isNotNull();
            assertThat(analysis.getDescription()).startsWith("idempotency.jdbc.table-name (\"" + table + "\")")
                    .contains("reserved");
            assertThat(analysis.getAction()).contains("idempotency.jdbc.table-name");
        }
    }
}
