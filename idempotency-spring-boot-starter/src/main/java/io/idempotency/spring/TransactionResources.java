package io.idempotency.spring;

import jakarta.servlet.http.HttpServletRequest;

/**
 * What must stay open until {@link IdempotencyFilter} has ended an idempotent request's transaction, although something
 * inside the dispatcher would close it earlier: JPA's EntityManager under Boot's open-in-view interceptor
 * ({@link OpenInViewEntityManagerKeeper}). The advice asks once the request has claimed its key.
 */
@FunctionalInterface
interface TransactionResources {

    TransactionResources NONE = request -> () -> { };

    /**
     * Called once a request has claimed its key and its handler's transaction is open.
     *
     * @return what closes them, run by the filter after the transaction has ended
     */
    Runnable keepOpen(HttpServletRequest request);
}
