package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.boot.LazyInitializationBeanFactoryPostProcessor;
import org.springframework.boot.test.context.runner.WebApplicationContextRunner;
import org.springframework.context.annotation.Lazy;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.context.annotation.RequestScope;

import static io.idempotency.spring.StartupFailures.assertStartFails;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * A final {@code @Idempotent} method on a bean that is not made at startup ({@code spring.main.lazy-initialization},
 * {@code @Lazy}): the bean is proxied by its class when the first request asks for it, and that proxy cannot intercept
 * a final method, which then runs without idempotency, every retry again. As for a bean made at startup, the
 * application must not start.
 */
class LazyFinalIdempotentMethodsTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    /** What SpringApplication adds when spring.main.lazy-initialization is true. */
    private static WebApplicationContextRunner lazy() {
        return TestDatabases.contextRunner(DATABASE).withInitializer(context -> context.addBeanFactoryPostProcessor(
                new LazyInitializationBeanFactoryPostProcessor()));
    }

    @Test
    void aFinalIdempotentMethodStopsTheStartUnderLazyInitialization() {
        assertStartFails(lazy().withBean(FinalPayments.class))
                .contains("LazyFinalIdempotentMethodsTest$FinalPayments.pay()", "is final");
    }

    @Test
    void aFinalIdempotentMethodOfALazyBeanStopsTheStart() {
        assertStartFails(TestDatabases.contextRunner(DATABASE).withUserConfiguration(LazyFinalPayments.class))
                .contains("LazyFinalIdempotentMethodsTest$LazyFinalPayments.pay()", "is final");
    }

    /**
     * A request-scoped controller: its scoped proxy, made by its class, cannot pass a final method on to the bean of
     * the request, and the bean's own proxy, made per request, cannot intercept it either.
     */
    @Test
    void aFinalIdempotentMethodOfARequestScopedBeanStopsTheStart() {
        assertStartFails(TestDatabases.contextRunner(DATABASE).withUserConfiguration(RequestScopedFinalPayments.class))
                .contains("LazyFinalIdempotentMethodsTest$RequestScopedFinalPayments.pay()", "is final");
        TestDatabases.contextRunner(DATABASE).withUserConfiguration(RequestScopedPayments.class)
                .run(context -> assertThat(context).as("without final").hasNotFailed());
    }

    /** Lazy beans without final methods start, and stay unmade until asked for. */
    @Test
    void lazyBeansWithoutFinalIdempotentMethodsStartUnmade() {
        lazy().withBean(Payments.class).run(context -> {
            assertThat(context).hasNotFailed();
            assertThat(context.getBeanFactory().containsSingleton(Payments.class.getName())).isFalse();
        });
    }

    /**
     * Proxied through its interface ({@code spring.aop.proxy-target-class=false}), a bean's final method is reached
     * through the interface's, which the proxy intercepts: such a bean starts, as it does when made at startup.
     */
    @Test
    void aFinalMethodReachedThroughAnInterfaceProxyStarts() {
        lazy().withPropertyValues("spring.aop.proxy-target-class=false").withBean(InterfacePayments.class)
                .run(context -> assertThat(context).hasNotFailed());
        TestDatabases.contextRunner(DATABASE).withPropertyValues("spring.aop.proxy-target-class=false")
                .withBean(InterfacePayments.class).run(context -> assertThat(context).hasNotFailed());
    }

    @RestController
    static class Payments {
        @PostMapping("/lazy/payments")
        @Idempotent
        public String pay() {
            return "paid";
        }
    }

    @RestController
    static class FinalPayments {
        @PostMapping("/lazy/final-payments")
        @Idempotent
        public final String pay() {
            return "paid";
        }
    }

    @RestController
    @Lazy
    static class LazyFinalPayments {
        @PostMapping("/lazy/lazy-final-payments")
        @Idempotent
        public final String pay() {
            return "paid";
        }
    }

    @RestController
    @RequestScope
    static class RequestScopedFinalPayments {
        @PostMapping("/lazy/request-scoped-final-payments")
        @Idempotent
        public final String pay() {
            return "paid";
        }
    }

    @RestController
    @RequestScope
    static class RequestScopedPayments {
        @PostMapping("/lazy/request-scoped-payments")
        @Idempotent
        public String pay() {
            return "paid";
        }
    }

    interface PaymentsApi {
        @PostMapping("/lazy/interface-payments")
        @Idempotent
        String pay();
    }

    @RestController
    static class InterfacePayments implements PaymentsApi {
        @Override
        public final String pay() {
            return "paid";
        }
    }
}
