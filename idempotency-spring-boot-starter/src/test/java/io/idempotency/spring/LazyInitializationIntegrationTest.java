package io.idempotency.spring;

import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.boot.LazyInitializationBeanFactoryPostProcessor;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code spring.main.lazy-initialization=true}: beans are made when first asked for, so work the starter does at
 * startup must not hang on a bean nothing asks for.
 */
class LazyInitializationIntegrationTest {

    /** What SpringApplication adds when spring.main.lazy-initialization is true. */
    private static ApplicationContextRunner lazy(TestPostgres.Database database) {
        return TestDatabases.nonWebRunner(database)
                .withInitializer(context -> context.addBeanFactoryPostProcessor(
                        new LazyInitializationBeanFactoryPostProcessor()));
    }

    @Test
    void theTableIsCreatedAtStartupOnAnInstanceThatNeitherCleansUpNorSweeps() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        lazy(database)
                .withPropertyValues("idempotency.retention.cleanup.enabled=false", "idempotency.sweeper.enabled=false")
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    assertThat(database.queryString("select to_regclass('idempotency_keys')::text"))
                            .as("the table, once the application has started").isEqualTo("idempotency_keys");
                });
    }

    @Test
    void aMissingTableStillStopsTheStartWhenTheSchemaIsManagedElsewhere() {
        lazy(TestPostgres.newDatabase())
                .withPropertyValues("idempotency.jdbc.initialize-schema=false",
                        "idempotency.retention.cleanup.enabled=false", "idempotency.sweeper.enabled=false")
                .run(context -> assertThat(context).getFailure()
                        .hasStackTraceContaining("idempotency.jdbc.initialize-schema=false"));
    }

    @Test
    void aRetentionThatDoesNotCoverTheRetryWindowStillStopsTheStart() {
        lazy(TestPostgres.newDatabase())
                .withPropertyValues("idempotency.retention.ttl=1d")
                .run(context -> assertThat(context).getFailure()
                        .hasStackTraceContaining("idempotency.retention.ttl (1d) must be at least"));
    }

    @Test
    void aRetentionThatDoesNotCoverTheRetryWindowStillStopsTheStartOfAWebApplication() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        TestDatabases.contextRunner(database)
                .withInitializer(context -> context.addBeanFactoryPostProcessor(
                        new LazyInitializationBeanFactoryPostProcessor()))
                .withPropertyValues("idempotency.retention.ttl=1d")
                .run(context -> assertThat(context).getFailure()
                        .hasStackTraceContaining("idempotency.retention.ttl (1d) must be at least"));
    }
}
