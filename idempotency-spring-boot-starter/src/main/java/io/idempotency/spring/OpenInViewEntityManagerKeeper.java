package io.idempotency.spring;

import jakarta.persistence.EntityManagerFactory;
import jakarta.servlet.http.HttpServletRequest;
import org.springframework.orm.jpa.EntityManagerFactoryUtils;
import org.springframework.orm.jpa.EntityManagerHolder;
import org.springframework.orm.jpa.support.OpenEntityManagerInViewInterceptor;
import org.springframework.transaction.support.TransactionSynchronizationManager;

/**
 * JPA's open-in-view (Spring Boot's default) with {@code @Idempotent}: Boot's {@link OpenEntityManagerInViewInterceptor}
 * closes the request's EntityManager when the dispatcher finishes, but the transaction that EntityManager runs in ends
 * later, in {@link IdempotencyFilter}, after the answer has been captured; rolling back on a closed EntityManager
 * fails. So once a request has claimed its key, the interceptor is told it only takes part in the EntityManager (the
 * request attribute it keeps for that purpose), and the filter closes it after the transaction. Requests that claim
 * nothing, and any async processing, are left to the interceptor as they are.
 */
final class OpenInViewEntityManagerKeeper implements TransactionResources {

    private final OpenEntityManagerInViewInterceptor interceptor;

    OpenInViewEntityManagerKeeper(OpenEntityManagerInViewInterceptor interceptor) {
        this.interceptor = interceptor;
    }

    @Override
    public Runnable keepOpen(HttpServletRequest request) {
        EntityManagerFactory factory = interceptor.getEntityManagerFactory();
        if (factory == null) {
            return () -> { };
        }
        // the name OpenEntityManagerInViewInterceptor gives this attribute (getParticipateAttributeName())
        String participating = factory + OpenEntityManagerInViewInterceptor.PARTICIPATE_SUFFIX;
        Object holder = TransactionSynchronizationManager.getResource(factory);
        if (!(holder instanceof EntityManagerHolder entityManagerHolder) || request.getAttribute(participating) != null) {
            // the interceptor did not open one, or only takes part in one opened outside the dispatcher (by a filter
            // before this one, which closes it after this filter): nothing here closes it early
            return () -> { };
        }
        request.setAttribute(participating, 1); // at the end of the dispatch, the interceptor just removes this mark
        return () -> {
            if (TransactionSynchronizationManager.getResource(factory) == entityManagerHolder) {
                TransactionSynchronizationManager.unbindResource(factory);
            }
            EntityManagerFactoryUtils.closeEntityManager(entityManagerHolder.getEntityManager());
        };
    }
}
