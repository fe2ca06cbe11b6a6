package io.idempotency.spring;

import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.springframework.boot.diagnostics.FailureAnalysis;

import static io.idempotency.spring.StartupFailures.startupFailure;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code idempotency.jdbc.table-name} naming a schema, or quoted as SQL would quote it: the report says where the table
 * lives and how to choose that schema, or how the name is written, rather than that the name must fit in 63
 * characters, which it does.
 */
class QualifiedTableNameSettingTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    @ParameterizedTest
    @ValueSource(strings = {"billing.idempotency_keys", "\"billing\".\"idempotency_keys\""})
    void aTableNameWithASchemaStopsTheStartSayingHowToChooseTheSchema(String table) {
        FailureAnalysis analysis = new IdempotencyFailureAnalyzer().analyze(startupFailure(
                TestDatabases.contextRunner(DATABASE).withPropertyValues("idempotency.jdbc.table-name=" + table)));
        assertThat(analysis).isNotNull();
        assertThat(analysis.getDescription()).startsWith("idempotency.jdbc.table-name (")
                .contains("connection's default schema").contains("currentSchema").doesNotContain("63");
    }

    @ParameterizedTest
    @ValueSource(strings = {"\"ApiRequests\"", "`api_requests`"})
    void aQuotedTableNameStopsTheStartSayingItIsWrittenUnquoted(String table) {
        FailureAnalysis analysis = new IdempotencyFailureAnalyzer().analyze(startupFailure(
                TestDatabases.contextRunner(DATABASE).withPropertyValues("idempotency.jdbc.table-name=" + table)));
        assertThat(analysis).isNotNull();
        assertThat(analysis.getDescription()).startsWith("idempotency.jdbc.table-name (")
                .contains("without quotes").doesNotContain("63");
    }
}
