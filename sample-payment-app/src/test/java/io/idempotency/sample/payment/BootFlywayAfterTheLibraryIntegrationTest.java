package io.idempotency.sample.payment;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.jdbc.IdempotencySchema;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.context.ConfigurableApplicationContext;

import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The README's "With Spring Boot's own Flyway": an application whose database already holds the library's table (it
 * used the library before it added {@code spring-boot-starter-flyway}) finds a schema that is not empty and has no
 * Flyway history of its own. Boot's Flyway then refuses to start; with {@code spring.flyway.baseline-on-migrate=true}
 * alone it marks the application's V1 as applied without running it (and the sample's V2, which changes what V1
 * makes, fails); with {@code spring.flyway.baseline-version=0} too, V1 runs. The refusal's failure report names the
 * library's history and both settings. The sample, whose migrations Boot's Flyway applies, is that application.
 */
@ExtendWith(OutputCaptureExtension.class)
class BootFlywayAfterTheLibraryIntegrationTest {

    @Test
    void bootsFlywayOnADatabaseHoldingTheLibrarysTableNeedsABaselineBelowTheFirstMigration(CapturedOutput output) {
        TestPostgres.Database refused = databaseWithTheLibrarysTable();
        assertThatThrownBy(() -> start(refused).close()).hasStackTraceContaining("baseline");
        // Spring Boot's failure report says why, and what to set
        assertThat(output.getOut() + output.getErr()).contains("APPLICATION FAILED TO START")
                .contains("idempotency_schema_history")
                .contains("spring.flyway.baseline-on-migrate=true and spring.flyway.baseline-version=0")
                .contains("baseline at the version that made them instead");

        // the sample's V2 changes the table its V1 makes: with V1 taken as applied, V2 fails
        TestPostgres.Database baselineAtOne = databaseWithTheLibrarysTable();
        assertThatThrownBy(() -> start(baselineAtOne, "spring.flyway.baseline-on-migrate=true").close())
                .hasStackTraceContaining("relation \"payments\" does not exist");
        assertThat(baselineAtOne.queryString("select version from flyway_schema_history where type = 'BASELINE'"))
                .as("V1 marked as applied without running it").isEqualTo("1");
        assertThat(payments(baselineAtOne)).isZero();

        TestPostgres.Database baselineAtZero = databaseWithTheLibrarysTable();
        start(baselineAtZero, "spring.flyway.baseline-on-migrate=true", "spring.flyway.baseline-version=0").close();
        assertThat(payments(baselineAtZero)).as("V1 ran: the payments table exists").isOne();
    }

    private static TestPostgres.Database databaseWithTheLibrarysTable() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(2)) {
            new IdempotencySchemaMigrator(dataSource, IdempotencySchema.DEFAULT_TABLE_NAME).migrate();
        }
        return database;
    }

    private static long payments(TestPostgres.Database database) {
        return database.queryLong("select count(*) from information_schema.tables where table_schema = '"
                + database.schema() + "' and table_name = 'payments'");
    }

    private static ConfigurableApplicationContext start(TestPostgres.Database database, String... properties) {
        List<String> all = new ArrayList<>(database.springPropertyValues());
        all.add("server.port=0");
        all.add("idempotency.sweeper.enabled=false");
        all.addAll(List.of(properties));
        return new SpringApplicationBuilder(SamplePaymentApplication.class).properties(all.toArray(String[]::new))
                .run();
    }
}
