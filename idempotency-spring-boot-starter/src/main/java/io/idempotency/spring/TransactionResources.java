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

    /**
     * Called when the library answers the request instead of its handler (a refusal, a replay, "in progress", a claim
     * the database failed), or the claim failed otherwise (the stale claim resolver a retry asked threw): what the
     * request's unit of work holds for the handler — an entity its data binding changed — is dropped, as the rollback
     * of the handler's transaction would drop it, so that nothing run later in the request writes it. Does nothing by
     * default.
     */
    default void discardPending() {
    }
}
