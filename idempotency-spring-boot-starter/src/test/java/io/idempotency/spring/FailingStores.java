package io.idempotency.spring;

import io.idempotency.core.IdempotencyStore;
import org.springframework.dao.DataAccessResourceFailureException;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.util.concurrent.atomic.AtomicInteger;

/** Stores whose database goes away in the middle of a run, to see what the run did before it failed. */
final class FailingStores {

    private FailingStores() {
    }

    /**
     * {@code store}, except that the {@code call}th call of its method {@code method} throws as a refused connection
     * does; every other call, that method's before and after it included, reaches {@code store}.
     */
    static IdempotencyStore connectionRefusedAt(IdempotencyStore store, String method, int call) {
        AtomicInteger calls = new AtomicInteger();
        return (IdempotencyStore) Proxy.newProxyInstance(FailingStores.class.getClassLoader(),
                new Class<?>[] {IdempotencyStore.class}, (proxy, invoked, args) -> {
                    if (invoked.getName().equals(method) && calls.incrementAndGet() == call) {
                        throw new DataAccessResourceFailureException("connection refused");
                    }
                    try {
                        return invoked.invoke(store, args);
                    } catch (InvocationTargetException e) {
                        throw e.getCause();
                    }
                });
    }
}
