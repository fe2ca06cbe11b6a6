package io.idempotency.spring;

import io.idempotency.testkit.TestPostgres;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.boot.test.context.runner.WebApplicationContextRunner;
import org.springframework.test.context.DynamicPropertyRegistry;

/** The starter tests' databases, and how a Spring context is pointed at one. */
public final class TestDatabases {

    private TestDatabases() {
    }

    /** A fresh database with the test application's business tables. */
    static TestPostgres.Database withOrders() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        database.queryString("create table orders (id bigserial primary key, note text not null)");
        database.queryString("create table order_audit (order_id bigint not null references orders (id)"
                + " deferrable initially deferred)");
        return database;
    }

    /** Business rows {@code database} holds written with {@code note}. */
    static long rows(TestPostgres.Database database, String note) {
        return database.queryLong("select count(*) from orders where note = '" + note + "'");
    }

    /** Idempotency records {@code database} holds of {@code key}. */
    static long keyRows(TestPostgres.Database database, String key) {
        return database.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key + "'");
    }

    /** Points a {@code @SpringBootTest} at {@code database}. */
    static void register(DynamicPropertyRegistry registry, TestPostgres.Database database) {
        database.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    /**
     * A non-web application context (a message listener's, a batch job's): a DataSource, its transactions and the
     * starter, on {@code database}.
     */
    public static ApplicationContextRunner nonWebRunner(TestPostgres.Database database) {
        return new ApplicationContextRunner()
                .withConfiguration(AutoConfigurations.of(
                        org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration.class,
                        org.springframework.boot.jdbc.autoconfigure.DataSourceTransactionManagerAutoConfiguration.class,
                        org.springframework.boot.transaction.autoconfigure.TransactionAutoConfiguration.class,
                        IdempotencyAutoConfiguration.class))
                .withPropertyValues(database.springPropertyValues().toArray(String[]::new));
    }

    /** A web application context with the auto-configurations the starter works with, on {@code database}. */
    static WebApplicationContextRunner contextRunner(TestPostgres.Database database) {
        return contextRunner().withPropertyValues(database.springPropertyValues().toArray(String[]::new));
    }

    /** The same, for a {@code DataSource} the caller's properties describe. */
    static WebApplicationContextRunner contextRunner() {
        return new WebApplicationContextRunner()
                .withConfiguration(AutoConfigurations.of(
                        org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration.class,
                        org.springframework.boot.jdbc.autoconfigure.DataSourceTransactionManagerAutoConfiguration.class,
                        org.springframework.boot.transaction.autoconfigure.TransactionAutoConfiguration.class,
                        org.springframework.boot.webmvc.autoconfigure.WebMvcAutoConfiguration.class,
                        org.springframework.boot.webmvc.autoconfigure.DispatcherServletAutoConfiguration.class,
                        IdempotencyAutoConfiguration.class));
    }
}
