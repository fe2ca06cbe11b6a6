package io.idempotency.jpa;

import io.idempotency.testkit.TestPostgres;
import jakarta.persistence.EntityManagerFactory;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.runner.WebApplicationContextRunner;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.jdbc.datasource.DriverManagerDataSource;
import org.springframework.orm.jpa.DefaultJpaDialect;
import org.springframework.orm.jpa.JpaTransactionManager;
import org.springframework.transaction.PlatformTransactionManager;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The startup check with JPA: it accepts Boot's JPA transaction manager, and refuses one whose transactions the store
 * could not join — so that a claim never commits apart from the handler's writes.
 */
class JpaTransactionManagerCheckTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    private final WebApplicationContextRunner contextRunner = JpaContexts.contextRunner(DATABASE);

    @Test
    void bootsJpaTransactionManagerIsAccepted() {
        contextRunner.run(context -> {
            assertThat(context).hasNotFailed();
            assertThat(context.getBean(PlatformTransactionManager.class)).isInstanceOf(JpaTransactionManager.class);
        });
    }

    @Test
    void aJpaTransactionManagerWhoseDialectCannotExposeTheConnectionIsRefused() {
        contextRunner.withUserConfiguration(StandardDialect.class).run(context -> {
            assertThat(context).hasFailed();
            assertThat(context.getStartupFailure()).rootCause()
                    .hasMessageContaining("cannot expose the JDBC connection");
        });
    }

    @Test
    void aJpaTransactionManagerOnAnotherDataSourceIsRefused() {
        contextRunner.withUserConfiguration(OtherDataSource.class).run(context -> {
            assertThat(context).hasFailed();
            assertThat(context.getStartupFailure()).rootCause()
                    .hasMessageContaining("must commit in one transaction");
        });
    }

    @Configuration(proxyBeanMethods = false)
    static class StandardDialect {
        @Bean
        JpaTransactionManager transactionManager(EntityManagerFactory entityManagerFactory) {
            return new JpaTransactionManager(entityManagerFactory) {
                @Override
                public void afterPropertiesSet() {
                    super.afterPropertiesSet(); // takes Hibernate's dialect from the factory
                    setJpaDialect(new DefaultJpaDialect());
                }
            };
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class OtherDataSource {
        @Bean
        JpaTransactionManager transactionManager(EntityManagerFactory entityManagerFactory) {
            return new JpaTransactionManager(entityManagerFactory) {
                @Override
                public void afterPropertiesSet() {
                    super.afterPropertiesSet(); // takes the application's DataSource from the factory
                    setDataSource(new DriverManagerDataSource(DATABASE.url(), DATABASE.user(), DATABASE.password()));
                }
            };
        }
    }
}
