package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.aop.support.AopUtils;
import org.springframework.boot.test.context.runner.WebApplicationContextRunner;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.Primary;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.jdbc.datasource.DriverManagerDataSource;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.transaction.annotation.Propagation;
import org.springframework.transaction.annotation.Transactional;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;

import javax.sql.DataSource;

import static io.idempotency.spring.StartupFailures.assertStartFails;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * A controller declared by an interface and proxied through it ({@code spring.aop.proxy-target-class=false}), whose
 * implementing method carries {@code @Transactional} beside {@code @Idempotent}: Spring's transaction advice reads the
 * annotation on the implementation, so the startup checks must read it there too, or a handler that commits apart from
 * the claim starts unnoticed.
 */
class JdkProxiedTransactionalHandlerTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    private final WebApplicationContextRunner runner = TestDatabases.contextRunner(DATABASE)
            .withPropertyValues("spring.aop.proxy-target-class=false");

    @Test
    void aPropagationThatLeavesTheRequestsTransactionOnTheImplementingMethodIsRefused() {
        assertStartFails(runner.withBean(RequiresNewTransfers.class))
                .contains("propagation REQUIRES_NEW");
    }

    @Test
    void aTransactionManagerOfAnotherDataSourceOnTheImplementingMethodIsRefused() {
        assertStartFails(runner.withUserConfiguration(TwoTransactionManagers.class).withBean(OtherDatabaseTransfers.class))
                .contains("transaction manager 'otherTransactionManager'",
                        "does not manage the idempotency store's DataSource");
    }

    @Test
    void aPropagationThatLeavesTheRequestsTransactionOnTheImplementingClassIsRefused() {
        assertStartFails(runner.withBean(RequiresNewClassTransfers.class))
                .contains("propagation REQUIRES_NEW");
    }

    @Test
    void aHandlerThatJoinsTheRequestsTransactionStarts() {
        runner.withBean(JoiningTransfers.class).run(context -> {
            assertThat(context).hasNotFailed();
            assertThat(AopUtils.isJdkDynamicProxy(context.getBean(TransfersApi.class))).isTrue();
        });
    }

    @RestController
    public interface TransfersApi {
        @PostMapping("/jdk-proxied-transactional/transfers")
        String create();
    }

    public static class RequiresNewTransfers implements TransfersApi {
        @Override
        @Idempotent
        @Transactional(propagation = Propagation.REQUIRES_NEW)
        public String create() {
            return "committed on its own, before the answer is stored";
        }
    }

    @Transactional(propagation = Propagation.REQUIRES_NEW)
    public static class RequiresNewClassTransfers implements TransfersApi {
        @Override
        @Idempotent
        public String create() {
            return "committed on its own, before the answer is stored";
        }
    }

    public static class OtherDatabaseTransfers implements TransfersApi {
        @Override
        @Idempotent
        @Transactional(transactionManager = "otherTransactionManager")
        public String create() {
            return "written on the other database, committed before the answer is stored";
        }
    }

    public static class JoiningTransfers implements TransfersApi {
        @Override
        @Idempotent
        @Transactional
        public String create() {
            return "joins the request's transaction";
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class TwoTransactionManagers {
        @Bean
        @Primary
        PlatformTransactionManager transactionManager(DataSource dataSource) {
            return new DataSourceTransactionManager(dataSource);
        }

        @Bean
        PlatformTransactionManager otherTransactionManager() {
            return new DataSourceTransactionManager(new DriverManagerDataSource(DATABASE.url(), DATABASE.user(),
                    DATABASE.password() == null ? "" : DATABASE.password()));
        }
    }
}
