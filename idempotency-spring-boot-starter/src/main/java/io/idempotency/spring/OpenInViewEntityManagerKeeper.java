package io.idempotency.spring;

import jakarta.persistence.EntityManager;
import jakarta.persistence.EntityManagerFactory;
import org.springframework.orm.jpa.EntityManagerFactoryUtils;
import org.springframework.orm.jpa.EntityManagerHolder;
import org.springframework.orm.jpa.support.OpenEntityManagerInViewInterceptor;
import org.springframework.transaction.support.TransactionSynchronizationManager;

import java.util.Map;

/**
 * JPA's open-in-view (Spring Boot's default) with {@code @Idempotent}: Boot's {@link OpenEntityManagerInViewInterceptor}
 * closes the request's EntityManager when the dispatcher finishes, but the transaction that EntityManager runs in ends
 * later, in {@link IdempotencyFilter}, after the answer has been captured. A rollback on a closed EntityManager fails.
 * So the filter opens the EntityManager itself, as Spring's {@code OpenEntityManagerInViewFilter} would, and closes
 * it after the transaction: the interceptor then finds one bound and only takes part in it, as it is built to.
 */
final class OpenEntityManagerAroundTransaction implements IdempotencyFilter.RequestScope {

    private final OpenEntityManagerInViewInterceptor interceptor;

    OpenEntityManagerAroundTransaction(OpenEntityManagerInViewInterceptor interceptor) {
        this.interceptor = interceptor;
    }

    @Override
    public Runnable open() {
        EntityManagerFactory factory = interceptor.getEntityManagerFactory();
        if (factory == null || TransactionSynchronizationManager.hasResource(factory)) {
            return () -> { }; // no factory known yet, or one is already open around this request
        }
        Map<String, Object> properties = interceptor.getJpaPropertyMap();
        EntityManager entityManager = properties.isEmpty()
                ? factory.createEntityManager() : factory.createEntityManager(properties);
        TransactionSynchronizationManager.bindResource(factory, new EntityManagerHolder(entityManager));
        return () -> {
            TransactionSynchronizationManager.unbindResourceIfPossible(factory);
            EntityManagerFactoryUtils.closeEntityManager(entityManager);
        };
    }
}
