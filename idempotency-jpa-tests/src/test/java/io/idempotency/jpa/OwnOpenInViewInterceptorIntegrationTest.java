package io.idempotency.jpa;

import jakarta.persistence.EntityManagerFactory;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.Import;
import org.springframework.orm.jpa.support.OpenEntityManagerInViewInterceptor;
import org.springframework.test.context.TestPropertySource;
import org.springframework.web.servlet.config.annotation.InterceptorRegistry;
import org.springframework.web.servlet.config.annotation.WebMvcConfigurer;

/**
 * The whole suite with open-in-view through an {@link OpenEntityManagerInViewInterceptor} the application registers
 * itself, as Spring's reference shows it (not a bean; Boot's is switched off): its EntityManager must outlive the
 * transaction as Boot's does.
 */
@TestPropertySource(properties = "spring.jpa.open-in-view=false")
@Import(OwnOpenInViewInterceptorIntegrationTest.OwnInterceptor.class)
class OwnOpenInViewInterceptorIntegrationTest extends JpaIdempotencyIntegrationTest {

    @Configuration(proxyBeanMethods = false)
    static class OwnInterceptor implements WebMvcConfigurer {

        private final EntityManagerFactory entityManagerFactory;

        OwnInterceptor(EntityManagerFactory entityManagerFactory) {
            this.entityManagerFactory = entityManagerFactory;
        }

        @Override
        public void addInterceptors(InterceptorRegistry registry) {
            OpenEntityManagerInViewInterceptor interceptor = new OpenEntityManagerInViewInterceptor();
            interceptor.setEntityManagerFactory(entityManagerFactory);
            registry.addWebRequestInterceptor(interceptor);
        }
    }
}
