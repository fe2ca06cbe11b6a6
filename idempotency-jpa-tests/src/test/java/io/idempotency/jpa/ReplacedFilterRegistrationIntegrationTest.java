package io.idempotency.jpa;

import io.idempotency.spring.IdempotencyFilter;
import io.idempotency.spring.IdempotencyProperties;
import io.idempotency.spring.IdempotentMethods;
import io.idempotency.spring.ProblemResponses;
import org.springframework.boot.web.servlet.FilterRegistrationBean;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.Import;

import java.util.HashSet;

/**
 * The whole suite with the application's own {@code idempotencyFilterRegistration} (which the starter lets it replace):
 * open-in-view's EntityManager is still kept open until the transaction has ended, as the advice arranges it.
 */
@Import(ReplacedFilterRegistrationIntegrationTest.OwnRegistration.class)
class ReplacedFilterRegistrationIntegrationTest extends JpaIdempotencyIntegrationTest {

    @Configuration(proxyBeanMethods = false)
    static class OwnRegistration {
        @Bean
        FilterRegistrationBean<IdempotencyFilter> idempotencyFilterRegistration(
                ProblemResponses problems, IdempotencyProperties properties, IdempotentMethods methods) {
            FilterRegistrationBean<IdempotencyFilter> registration = new FilterRegistrationBean<>(new IdempotencyFilter(
                    problems, 1 << 20, 1 << 20, new HashSet<>(properties.getReplayedHeaders()), methods));
            registration.setOrder(IdempotencyFilter.ORDER);
            return registration;
        }
    }
}
