package io.idempotency.jpa;

import io.idempotency.spring.IdempotencyFilter;
import org.springframework.boot.web.servlet.FilterRegistrationBean;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.Import;
import org.springframework.orm.jpa.support.OpenEntityManagerInViewFilter;

/**
 * The whole suite with open-in-view through Spring's {@link OpenEntityManagerInViewFilter}, registered before the
 * idempotency filter (Boot's interceptor then backs off): the EntityManager outlives the transaction.
 */
@Import(OuterOpenInViewFilterIntegrationTest.OuterFilter.class)
class OuterOpenInViewFilterIntegrationTest extends JpaIdempotencyIntegrationTest {

    @Configuration(proxyBeanMethods = false)
    static class OuterFilter {
        @Bean
        FilterRegistrationBean<OpenEntityManagerInViewFilter> openEntityManagerInViewFilter() {
            FilterRegistrationBean<OpenEntityManagerInViewFilter> registration =
                    new FilterRegistrationBean<>(new OpenEntityManagerInViewFilter());
            registration.setOrder(IdempotencyFilter.ORDER - 1);
            return registration;
        }
    }
}
