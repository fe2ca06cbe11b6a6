package io.idempotency.spring;

import jakarta.persistence.EntityManagerFactory;
import jakarta.servlet.http.HttpServletRequest;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.orm.jpa.EntityManagerFactoryUtils;
import org.springframework.orm.jpa.EntityManagerHolder;
import org.springframework.orm.jpa.support.OpenEntityManagerInViewInterceptor;
import org.springframework.transaction.support.TransactionSynchronizationManager;
import org.springframework.web.context.request.async.WebAsyncManager;
import org.springframework.web.context.request.async.WebAsyncUtils;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * JPA's open-in-view (Spring Boot's default) with {@code @Idempotent}: an {@link OpenEntityManagerInViewInterceptor}
 * (Boot's, or one the application registers itself) closes the request's EntityManager when the dispatcher finishes,
 * but the transaction that EntityManager runs in ends later, in {@link IdempotencyFilter}, after the answer has been
 * captured; rolling back on a closed EntityManager fails. So once a request has claimed its key, each interceptor that
 * opened an EntityManager for it is told it only takes part in it (the request attribute it keeps for that purpose),
 * and the filter closes it after the transaction. Requests that claim nothing, and any async processing, are left to
 * the interceptors as they are.
 */
final class OpenInViewEntityManagerKeeper implements TransactionResources {

    private static final Logger log = LoggerFactory.getLogger(OpenInViewEntityManagerKeeper.class);

    @Override
    public Runnable keepOpen(HttpServletRequest request) {
        if (!(request.getAttribute(WebAsyncUtils.WEB_ASYNC_MANAGER_ATTRIBUTE) instanceof WebAsyncManager asyncManager)) {
            return () -> { }; // no interceptor opened anything for this request
        }
        Runnable close = () -> { };
        for (Map.Entry<Object, Object> bound : TransactionSynchronizationManager.getResourceMap().entrySet()) {
            if (!(bound.getKey() instanceof EntityManagerFactory factory)
                    || !(bound.getValue() instanceof EntityManagerHolder entityManagerHolder)) {
                continue;
            }
            // the name OpenEntityManagerInViewInterceptor gives this attribute (getParticipateAttributeName()), and the
            // key it registers its async interceptor under when it opens the EntityManager itself
            String participating = factory + OpenEntityManagerInViewInterceptor.PARTICIPATE_SUFFIX;
            if (asyncManager.getCallableInterceptor(participating) == null) {
                // no interceptor opened it (the transaction did, or a filter before this one, which closes it after
                // this filter): nothing here closes it early
                continue;
            }
            // one more taking part (others may already, a second interceptor for the same factory): at the end of the
            // dispatch the interceptor that opened it finds a mark left, and only takes it away
            Object count = request.getAttribute(participating);
            request.setAttribute(participating, count instanceof Integer taking ? taking + 1 : 1);
            Runnable earlier = close;
            close = () -> {
                try {
                    if (TransactionSynchronizationManager.getResource(factory) == entityManagerHolder) {
                        TransactionSynchronizationManager.unbindResource(factory);
                    }
                    EntityManagerFactoryUtils.closeEntityManager(entityManagerHolder.getEntityManager());
                } finally {
                    earlier.run();
                }
            };
        }
        return close;
    }

    /**
     * Clears each EntityManager bound to the thread outside a transaction (open-in-view's): an intent-first claim runs
     * beside it and leaves it as it was, and the claim of the default mode, rolled back, has cleared it already.
     */
    @Override
    public void discardPending() {
        for (EntityManagerHolder holder : openInView()) {
            try {
                holder.getEntityManager().clear();
            } catch (RuntimeException e) {
                // the library's answer, or the failure it passes on, is still what the request gets
                log.warn("The request's EntityManager could not be cleared after the request was answered without"
                        + " its handler", e);
            }
        }
    }

    /** The EntityManagers bound to the thread outside a transaction, as open-in-view binds them. */
    private static List<EntityManagerHolder> openInView() {
        List<EntityManagerHolder> holders = new ArrayList<>();
        for (Map.Entry<Object, Object> bound : TransactionSynchronizationManager.getResourceMap().entrySet()) {
            if (bound.getKey() instanceof EntityManagerFactory
                    && bound.getValue() instanceof EntityManagerHolder holder && !holder.isSynchronizedWithTransaction()
                    && holder.getEntityManager() != null && holder.getEntityManager().isOpen()) {
                holders.add(holder);
            }
        }
        return holders;
    }
}
