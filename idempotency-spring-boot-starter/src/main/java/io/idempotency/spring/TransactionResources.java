package io.idempotency.spring;

import jakarta.servlet.http.HttpServletRequest;

import java.util.ArrayDeque;
import java.util.Deque;
import java.util.List;

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

    /** All of {@code resources}, closed in the reverse order of opening. */
    static TransactionResources allOf(List<TransactionResources> resources) {
        if (resources.isEmpty()) {
            return NONE;
        }
        if (resources.size() == 1) {
            return resources.get(0);
        }
        return request -> {
            Deque<Runnable> closers = new ArrayDeque<>();
            try {
                resources.forEach(resource -> closers.push(resource.keepOpen(request)));
            } catch (RuntimeException e) {
                runAll(closers);
                throw e;
            }
            return () -> runAll(closers);
        };
    }

    /** Runs every action, even when one throws; the first failure is thrown, the others added to it. */
    private static void runAll(Iterable<Runnable> actions) {
        RuntimeException failure = null;
        for (Runnable action : actions) {
            try {
                action.run();
            } catch (RuntimeException e) {
                if (failure == null) {
                    failure = e;
                } else {
                    failure.addSuppressed(e);
                }
            }
        }
        if (failure != null) {
            throw failure;
        }
    }
}
