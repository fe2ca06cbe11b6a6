package io.idempotency.spring;

import org.springframework.beans.factory.config.BeanDefinition;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnNotWebApplication;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.Import;
import org.springframework.context.annotation.Role;

/**
 * Applies when {@link IdempotencyAutoConfiguration} did not set up the {@code @Idempotent} advice (no
 * {@link IdempotentAdvisor}): then every {@code @Idempotent} method would run as if it were not annotated, and a
 * retried request would run again. Instead of letting that pass silently:
 * <ul>
 *   <li>while idempotency is not switched off, an application with {@code @Idempotent} methods does not start, and
 *       the message says what the starter is missing (typically a {@code DataSource} or its transaction manager);</li>
 *   <li>with {@code idempotency.enabled=false}, the deliberate off switch, it starts and logs one warning naming the
 *       methods whose annotation has no effect.</li>
 * </ul>
 * An application that has the starter on the class path without any {@code @Idempotent} method starts as before. In
 * one that serves no requests, a call of an {@code @Idempotent} method is refused ({@link OutsideRequestsAdvisor}).
 */
@AutoConfiguration(after = IdempotencyAutoConfiguration.class)
@ConditionalOnMissingBean(IdempotentAdvisor.class)
@Role(BeanDefinition.ROLE_INFRASTRUCTURE)
public class IdempotencyInactiveAutoConfiguration {

    @Bean
    InertIdempotentCheck idempotencyInertAnnotationCheck() {
        return new InertIdempotentCheck();
    }

    /**
     * An application that serves no requests has no {@code @Idempotent} advice: a call of an annotated method (a
     * service method a listener calls) is refused there as in a web application, rather than run unprotected. Not
     * with {@code idempotency.enabled=false}, the deliberate off switch (a mistyped value stops the start:
     * {@link InertIdempotentCheck}).
     */
    @Configuration(proxyBeanMethods = false)
    @ConditionalOnNotWebApplication
    @ConditionalOnProperty(prefix = "idempotency", name = "enabled", matchIfMissing = true)
    @Import(IdempotencyAutoConfiguration.AutoProxyCreatorRegistrar.class)
    @Role(BeanDefinition.ROLE_INFRASTRUCTURE)
    static class OutsideRequests {

        @Bean
        @Role(BeanDefinition.ROLE_INFRASTRUCTURE)
        static OutsideRequestsAdvisor idempotencyOutsideRequestsAdvisor() {
            return new OutsideRequestsAdvisor();
        }
    }
}
