package io.idempotency.jpa;

import io.idempotency.spring.IdempotencyAutoConfiguration;
import io.idempotency.testkit.TestPostgres;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.runner.WebApplicationContextRunner;

/** Contexts for the startup checks: Boot's JPA, web MVC and the starter, on a test database. */
final class JpaContexts {

    private JpaContexts() {
    }

    static WebApplicationContextRunner contextRunner(TestPostgres.Database database) {
        return new WebApplicationContextRunner()
                .withConfiguration(AutoConfigurations.of(
                        org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration.class,
                        org.springframework.boot.hibernate.autoconfigure.HibernateJpaAutoConfiguration.class,
                        org.springframework.boot.transaction.autoconfigure.TransactionAutoConfiguration.class,
                        org.springframework.boot.webmvc.autoconfigure.WebMvcAutoConfiguration.class,
                        org.springframework.boot.webmvc.autoconfigure.DispatcherServletAutoConfiguration.class,
                        IdempotencyAutoConfiguration.class))
                .withPropertyValues(database.springPropertyValues().toArray(String[]::new));
    }
}
