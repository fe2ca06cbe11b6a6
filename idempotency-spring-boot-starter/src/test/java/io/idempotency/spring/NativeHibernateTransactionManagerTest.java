package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyTemplate;
import io.idempotency.core.ScopedKey;
import io.idempotency.testkit.TestPostgres;
import org.hibernate.SessionFactory;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.runner.WebApplicationContextRunner;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.orm.jpa.hibernate.HibernateTransactionManager;
import org.springframework.orm.jpa.hibernate.LocalSessionFactoryBean;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;

import java.nio.charset.StandardCharsets;
import java.util.UUID;
import javax.sql.DataSource;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Spring's transaction manager for native Hibernate ({@code LocalSessionFactoryBean} and
 * {@code HibernateTransactionManager}, which Spring Framework 7 keeps in
 * {@code org.springframework.orm.jpa.hibernate}): given the DataSource of its SessionFactory (found by itself, by
 * default), it binds the connection of its transactions to that DataSource for JDBC code, as JPA's does. The
 * store's claim then runs in the transaction of the handler's writes, and the application starts.
 */
class NativeHibernateTransactionManagerTest {

    private static final TestPostgres.Database DATABASE = TestDatabases.withOrders();

    private final WebApplicationContextRunner runner = TestDatabases.contextRunner(DATABASE)
            .withUserConfiguration(NativeHibernate.class, OrdersController.class);

    @Test
    void anApplicationOnHibernatesTransactionManagerStarts() {
        runner.run(context -> assertThat(context).hasNotFailed());
    }

    @Test
    void theClaimAndTheWorksWritesCommitAndRollBackTogether() {
        runner.run(context -> {
            assertThat(context).hasNotFailed();
            IdempotencyTemplate template = context.getBean(IdempotencyTemplate.class);
            JdbcTemplate jdbc = new JdbcTemplate(context.getBean(DataSource.class));
            byte[] input = "{}".getBytes(StandardCharsets.UTF_8);

            String failed = UUID.randomUUID().toString();
            assertThatThrownBy(() -> template.execute(new ScopedKey("", "orders", failed), input, () -> {
                jdbc.update("insert into orders (note) values (?)", failed);
                throw new IllegalStateException("fails after its write");
            })).hasMessageContaining("fails after its write");
            assertThat(TestDatabases.rows(DATABASE, failed)).as("the work's write, rolled back").isZero();
            assertThat(TestDatabases.keyRows(DATABASE, failed)).as("the claim, rolled back").isZero();

            String done = UUID.randomUUID().toString();
            template.execute(new ScopedKey("", "orders", done), input, () -> {
                jdbc.update("insert into orders (note) values (?)", done);
                return input;
            });
            assertThat(TestDatabases.rows(DATABASE, done)).isEqualTo(1);
            assertThat(TestDatabases.keyRows(DATABASE, done)).isEqualTo(1);
        });
    }

    @Configuration(proxyBeanMethods = false)
    static class NativeHibernate {

        @Bean
        LocalSessionFactoryBean sessionFactory(DataSource dataSource) {
            LocalSessionFactoryBean factory = new LocalSessionFactoryBean();
            factory.setDataSource(dataSource);
            return factory;
        }

        @Bean
        HibernateTransactionManager transactionManager(SessionFactory sessionFactory) {
            return new HibernateTransactionManager(sessionFactory);
        }
    }

    @RestController
    static class OrdersController {

        @Idempotent
        @PostMapping("/orders")
        public String create() {
            return "{}";
        }
    }
}
