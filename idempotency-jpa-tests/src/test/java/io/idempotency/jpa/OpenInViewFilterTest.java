package io.idempotency.jpa;

import io.idempotency.core.Idempotent;
import io.idempotency.spring.IdempotencyFilter;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.runner.WebApplicationContextRunner;
import org.springframework.boot.web.servlet.DelegatingFilterProxyRegistrationBean;
import org.springframework.boot.web.servlet.FilterRegistrationBean;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.orm.jpa.support.OpenEntityManagerInViewFilter;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Open-in-view through Spring's {@link OpenEntityManagerInViewFilter} instead of Boot's interceptor: a filter that runs
 * inside the idempotency filter would close the EntityManager before the transaction ends, so the application does
 * not start; one that runs before it is accepted ({@link OuterOpenInViewFilterIntegrationTest} runs the whole suite
 * with one).
 */
class OpenInViewFilterTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    private final WebApplicationContextRunner contextRunner = JpaContexts.contextRunner(DATABASE)
            .withUserConfiguration(IdempotentEndpoint.class);

    @Test
    void aFilterBeanWithoutAnOrderRunsInsideAndIsRefused() {
        contextRunner.withUserConfiguration(PlainFilterBean.class).run(context -> {
            assertThat(context).hasFailed();
            assertThat(context.getStartupFailure()).hasMessageContaining("OpenEntityManagerInViewFilter runs after the IdempotencyFilter");
        });
    }

    @Test
    void aFilterRegisteredAfterTheIdempotencyFilterIsRefused() {
        contextRunner.withUserConfiguration(InnerFilterRegistration.class).run(context -> {
            assertThat(context).hasFailed();
            assertThat(context.getStartupFailure()).hasMessageContaining("OpenEntityManagerInViewFilter runs after the IdempotencyFilter");
        });
    }

    @Test
    void aFilterRegisteredBeforeTheIdempotencyFilterIsAccepted() {
        contextRunner.withUserConfiguration(OuterOpenInViewFilterIntegrationTest.OuterFilter.class)
                .run(context -> assertThat(context).hasNotFailed());
    }

    /** Boot registers the proxy, not the bean it names: the check follows the proxy to the filter and its order. */
    @Test
    void aFilterBeanRegisteredFirstThroughAProxyIsAccepted() {
        contextRunner.withUserConfiguration(OuterProxyRegistration.class)
                .run(context -> assertThat(context).hasNotFailed());
    }

    @Test
    void aFilterBeanRegisteredAfterTheIdempotencyFilterThroughAProxyIsRefused() {
        contextRunner.withUserConfiguration(InnerProxyRegistration.class).run(context -> {
            assertThat(context).hasFailed();
            assertThat(context.getStartupFailure())
                    .hasMessageContaining("OpenEntityManagerInViewFilter runs after the IdempotencyFilter");
        });
    }

    /** A disabled registration of the same bean must not hide the enabled one that runs it too late. */
    @Test
    void aLateRegistrationIsRefusedWhateverOtherDisabledRegistrationsTheFilterHas() {
        contextRunner.withUserConfiguration(InnerProxyRegistration.class, DisabledRegistration.class).run(context -> {
            assertThat(context).hasFailed();
            assertThat(context.getStartupFailure())
                    .hasMessageContaining("OpenEntityManagerInViewFilter runs after the IdempotencyFilter");
        });
    }

    @Configuration(proxyBeanMethods = false)
    static class DisabledRegistration {
        @Bean
        FilterRegistrationBean<OpenEntityManagerInViewFilter> zzDisabledOpenInView(OpenEntityManagerInViewFilter filter) {
            FilterRegistrationBean<OpenEntityManagerInViewFilter> registration = new FilterRegistrationBean<>(filter);
            registration.setEnabled(false);
            return registration;
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class OuterProxyRegistration extends PlainFilterBean {
        @Bean
        DelegatingFilterProxyRegistrationBean openInViewProxy() {
            return proxyRegistration(IdempotencyFilter.ORDER - 10);
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class InnerProxyRegistration extends PlainFilterBean {
        @Bean
        DelegatingFilterProxyRegistrationBean openInViewProxy() {
            return proxyRegistration(IdempotencyFilter.ORDER + 10);
        }
    }

    /** Registers the {@code openEntityManagerInViewFilter} bean through a proxy, at {@code order}. */
    static DelegatingFilterProxyRegistrationBean proxyRegistration(int order) {
        DelegatingFilterProxyRegistrationBean registration =
                new DelegatingFilterProxyRegistrationBean("openEntityManagerInViewFilter");
        registration.setOrder(order);
        return registration;
    }

    @RestController
    static class IdempotentEndpoint {
        @PostMapping("/things")
        @Idempotent
        public String create() {
            return "made";
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class PlainFilterBean {
        @Bean
        OpenEntityManagerInViewFilter openEntityManagerInViewFilter() {
            return new OpenEntityManagerInViewFilter();
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class InnerFilterRegistration {
        @Bean
        FilterRegistrationBean<OpenEntityManagerInViewFilter> openEntityManagerInViewFilter() {
            FilterRegistrationBean<OpenEntityManagerInViewFilter> registration =
                    new FilterRegistrationBean<>(new OpenEntityManagerInViewFilter());
            registration.setOrder(IdempotencyFilter.ORDER + 1);
            return registration;
        }
    }
}
