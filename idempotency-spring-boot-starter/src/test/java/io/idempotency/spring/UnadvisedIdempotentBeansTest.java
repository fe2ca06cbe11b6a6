package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.aop.framework.Advised;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.beans.factory.config.BeanPostProcessor;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.runner.WebApplicationContextRunner;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.core.Ordered;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;

import java.util.Arrays;

import static io.idempotency.spring.StartupFailures.assertStartFails;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code @Idempotent} methods the advice would not reach: the application either gets them advised or does not start,
 * never runs them unprotected.
 */
class UnadvisedIdempotentBeansTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    /**
     * Neither Spring Boot's transaction nor its AOP auto-configuration (transactions woven by AspectJ and
     * {@code spring.aop.auto=false}, say): no auto-proxy creator, unless the starter registers one.
     */
    @Test
    void anApplicationWithoutAnAutoProxyCreatorGetsItsIdempotentMethodsAdvised() {
        new WebApplicationContextRunner()
                .withConfiguration(AutoConfigurations.of(
                        org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration.class,
                        org.springframework.boot.jdbc.autoconfigure.DataSourceTransactionManagerAutoConfiguration.class,
                        org.springframework.boot.webmvc.autoconfigure.WebMvcAutoConfiguration.class,
                        org.springframework.boot.webmvc.autoconfigure.DispatcherServletAutoConfiguration.class,
                        IdempotencyAutoConfiguration.class, IdempotencyInactiveAutoConfiguration.class))
                .withPropertyValues(DATABASE.springPropertyValues().toArray(String[]::new))
                .withBean(Payments.class)
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    assertThat(advisedByTheStarter(context.getBean(Payments.class))).isTrue();
                });
    }

    /** A controller a post-processor depends on is made before the auto-proxy creator, and never proxied. */
    @Test
    void aControllerMadeBeforeTheAutoProxyCreatorStopsTheStart() {
        assertStartFails(TestDatabases.contextRunner(DATABASE).withUserConfiguration(EarlyPayments.class))
                .contains("UnadvisedIdempotentBeansTest$Payments.pay()", "is on bean 'payments'",
                        "made before Spring's auto-proxy creator could advise it");
        // made as usual, it is advised
        TestDatabases.contextRunner(DATABASE).withBean("payments", Payments.class)
                .run(context -> assertThat(advisedByTheStarter(context.getBean(Payments.class))).isTrue());
    }

    /** The proxy of a class cannot override a final method: called on the proxy, it runs unadvised. */
    @Test
    void aFinalIdempotentMethodStopsTheStart() {
        assertStartFails(TestDatabases.contextRunner(DATABASE).withBean(FinalPayments.class))
                .contains("UnadvisedIdempotentBeansTest$FinalPayments.pay()", "is final");
    }

    /**
     * A private method is overridden by no proxy: the bean's own public method calls it past the advice, while the
     * bean, proxied because the advisor matches the method, looks advised.
     */
    @Test
    void aPrivateIdempotentMethodStopsTheStart() {
        assertStartFails(TestDatabases.contextRunner(DATABASE).withBean(Payouts.class))
                .contains("UnadvisedIdempotentBeansTest$Payouts.send()", "is private");
    }

    /** A test's mock stands in for the bean past the post-processors (as @MockitoBean registers it): on purpose. */
    @Test
    void aMockStandingInForTheBeanStarts() {
        TestDatabases.contextRunner(DATABASE)
                .withInitializer(context -> context.getBeanFactory()
                        .registerSingleton("payments", org.mockito.Mockito.mock(Payments.class)))
                .run(context -> assertThat(context).hasNotFailed());
    }

    private static boolean advisedByTheStarter(Object bean) {
        return bean instanceof Advised advised
                && Arrays.stream(advised.getAdvisors()).anyMatch(IdempotentAdvisor.class::isInstance);
    }

    @Configuration(proxyBeanMethods = false)
    static class EarlyPayments {
        @Autowired
        Payments payments;

        @Bean
        static Payments payments() {
            return new Payments();
        }

        @Bean
        AuditingPostProcessor auditingPostProcessor() {
            return new AuditingPostProcessor();
        }
    }

    static class AuditingPostProcessor implements BeanPostProcessor, Ordered {
        @Override
        public int getOrder() {
            return 0;
        }
    }

    @RestController
    static class Payments {
        @PostMapping("/unadvised/payments")
        @Idempotent
        public String pay() {
            return "paid";
        }
    }

    @org.springframework.stereotype.Service
    static class Payouts {
        public String payout() {
            return send();
        }

        @Idempotent
        private String send() {
            return "sent";
        }
    }

    @RestController
    static class FinalPayments {
        @PostMapping("/unadvised/final-payments")
        @Idempotent
        public final String pay() {
            return "paid";
        }
    }
}
