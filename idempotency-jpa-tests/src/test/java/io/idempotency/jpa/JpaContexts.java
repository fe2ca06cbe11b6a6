package io.idempotency.jpa;

import io.idempotency.spring.IdempotencyAutoConfiguration;
import io.idempotency.testkit.TestPostgres;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.runner.WebApplicationContextRunner;
import org.springframework.test.context.DynamicPropertyRegistry;

/** The tests' database with the purchases table, and contexts for the startup checks. */
final class JpaContexts {

    private JpaContexts() {
    }

    /** A fresh database with the test application's business table (ids from a sequence). */
    static TestPostgres.Database withPurchases() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        database.queryString("create sequence purchases_seq");
        database.queryString("create table purchases (id bigint primary key, reference text not null unique,"
                + " note text not null)");
        // a check PostgreSQL makes only at COMMIT, after every flush: a purchase noted "fails-at-commit" is refused
        database.queryString("create function purchases_refused_at_commit() returns trigger language plpgsql as $$"
                + " begin if new.note = 'fails-at-commit' then raise exception 'purchase % refused at commit',"
                + " new.reference using errcode = '23514'; end if; return null; end $$");
        database.queryString("create constraint trigger purchases_checked_at_commit after insert or update on"
                + " purchases deferrable initially deferred for each row execute function purchases_refused_at_commit()");
        database.queryString("create table accounts (id bigint primary key, balance bigint not null,"
                + " version bigint not null)");
        return database;
    }

    /** Points a {@code @SpringBootTest} at {@code database}. */
    static void register(DynamicPropertyRegistry registry, TestPostgres.Database database) {
        database.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    /** Boot's JPA, web MVC and the starter, on {@code database}. */
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
