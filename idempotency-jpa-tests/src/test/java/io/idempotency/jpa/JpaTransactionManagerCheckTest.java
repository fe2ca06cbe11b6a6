package io.idempotency.jpa;

import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyTemplate;
import io.idempotency.core.ScopedKey;
import io.idempotency.testkit.TestPostgres;
import jakarta.persistence.EntityManagerFactory;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.runner.WebApplicationContextRunner;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.Primary;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.jdbc.datasource.DriverManagerDataSource;
import org.springframework.orm.jpa.DefaultJpaDialect;
import org.springframework.orm.jpa.JpaTransactionManager;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.transaction.annotation.Transactional;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;

import javax.sql.DataSource;
import java.nio.charset.StandardCharsets;
import java.util.UUID;

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

    /**
     * JPA's transaction manager binds its connection without marking it as in a transaction, which only its
     * synchronization tells: without it, the store would commit the claim on that connection by itself.
     */
    @Test
    void aJpaTransactionManagerWithoutSynchronizationIsRefused() {
        contextRunner.withUserConfiguration(WithoutSynchronization.class).run(context -> {
            assertThat(context).hasFailed();
            assertThat(context.getStartupFailure()).rootCause()
                    .hasMessageContaining("keeps no transaction synchronization (SYNCHRONIZATION_NEVER)");
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

    /**
     * Connections that do not default to READ COMMITTED (MariaDB's, or a pool set to another level) make every
     * idempotent transaction ask for it, and JPA's transaction manager cannot set an isolation level when Hibernate
     * releases its connection after each transaction: every idempotent request would fail.
     */
    @Test
    void aJpaTransactionManagerThatCannotSetReadCommittedOnConnectionsWithoutItIsRefused() {
        contextRunner.withPropertyValues(
                        "spring.datasource.hikari.transaction-isolation=TRANSACTION_REPEATABLE_READ",
                        "spring.jpa.properties.hibernate.connection.handling_mode="
                                + "DELAYED_ACQUISITION_AND_RELEASE_AFTER_TRANSACTION")
                .run(context -> {
                    assertThat(context).hasFailed();
                    assertThat(context.getStartupFailure()).rootCause()
                            .hasMessageContaining("cannot run the idempotency transactions at READ COMMITTED");
                });
    }

    /** The same pool with Hibernate holding its connection (Boot's default): the level is set on each transaction. */
    @Test
    void aJpaTransactionManagerThatSetsReadCommittedOnConnectionsWithoutItIsAccepted() {
        contextRunner.withPropertyValues("spring.datasource.hikari.transaction-isolation=TRANSACTION_REPEATABLE_READ")
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    assertThat(context.getBean(IdempotencyTemplate.class).execute(
                            new ScopedKey("", "isolation", UUID.randomUUID().toString()), new byte[0],
                            () -> "done".getBytes(StandardCharsets.UTF_8)).value()).asString().isEqualTo("done");
                });
    }

    /**
     * JPA's transaction manager binds its connection for JDBC code without marking a JDBC transaction active: a JDBC
     * transaction manager on the same DataSource, named by the handler, begins a transaction of its own on that
     * connection and commits it — claim included — when the handler returns, before the answer is stored.
     */
    @Test
    void aHandlerNamingAJdbcTransactionManagerBesideJpasStopsTheStart() {
        contextRunner.withUserConfiguration(JpaAndJdbcTransactionManagers.class, JdbcTransactionalController.class)
                .run(context -> {
                    assertThat(context).hasFailed();
                    assertThat(context.getStartupFailure()).message().contains(
                            "JdbcTransactionalController.purchase()", "'jdbcTransactionManager'",
                            "does not join the request's transaction");
                });
    }

    /** The other way round: JPA's transaction manager refuses to begin inside a JDBC one (every request would fail). */
    @Test
    void aHandlerNamingJpasTransactionManagerBesideAPrimaryJdbcOneStopsTheStart() {
        contextRunner.withUserConfiguration(JdbcAndJpaTransactionManagers.class, JpaTransactionalController.class)
                .run(context -> {
                    assertThat(context).hasFailed();
                    assertThat(context.getStartupFailure()).message().contains(
                            "JpaTransactionalController.purchase()", "'jpaTransactionManager'",
                            "does not join the request's transaction");
                });
    }

    @Test
    void aHandlerNamingTheRequestsTransactionManagerBesideAnotherIsAccepted() {
        contextRunner.withUserConfiguration(JpaAndJdbcTransactionManagers.class, JpaNamingController.class)
                .run(context -> assertThat(context).hasNotFailed());
    }

    @Configuration(proxyBeanMethods = false)
    static class JpaAndJdbcTransactionManagers {
        @Bean
        @Primary
        JpaTransactionManager transactionManager(EntityManagerFactory entityManagerFactory) {
            return new JpaTransactionManager(entityManagerFactory);
        }

        @Bean
        DataSourceTransactionManager jdbcTransactionManager(DataSource dataSource) {
            return new DataSourceTransactionManager(dataSource);
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class JdbcAndJpaTransactionManagers {
        @Bean
        @Primary
        DataSourceTransactionManager transactionManager(DataSource dataSource) {
            return new DataSourceTransactionManager(dataSource);
        }

        @Bean
        JpaTransactionManager jpaTransactionManager(EntityManagerFactory entityManagerFactory) {
            return new JpaTransactionManager(entityManagerFactory);
        }
    }

    @RestController
    static class JdbcTransactionalController {
        @PostMapping("/jdbc")
        @Idempotent
        @Transactional("jdbcTransactionManager")
        public String purchase() {
            return "";
        }
    }

    @RestController
    static class JpaTransactionalController {
        @PostMapping("/jpa")
        @Idempotent
        @Transactional("jpaTransactionManager")
        public String purchase() {
            return "";
        }
    }

    @RestController
    static class JpaNamingController {
        @PostMapping("/jpa")
        @Idempotent
        @Transactional("transactionManager")
        public String purchase() {
            return "";
        }
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
    static class WithoutSynchronization {
        @Bean
        JpaTransactionManager transactionManager(EntityManagerFactory entityManagerFactory) {
            JpaTransactionManager transactionManager = new JpaTransactionManager(entityManagerFactory);
            transactionManager.setTransactionSynchronization(
                    org.springframework.transaction.support.AbstractPlatformTransactionManager.SYNCHRONIZATION_NEVER);
            return transactionManager;
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
