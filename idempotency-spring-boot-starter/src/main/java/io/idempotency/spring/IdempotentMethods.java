package io.idempotency.spring;

import java.util.Set;

/**
 * The HTTP methods any {@code @Idempotent} endpoint of the application is idempotent for, learnt at startup from the
 * handler mappings and the {@code @Idempotent} methods that functional routes call. Requests with other methods —
 * typically every GET — skip the filter's wrappers entirely. Until it is known, every request is wrapped. Thread-safe.
 */
public final class IdempotentMethods {

    private volatile Set<String> methods;

    /** Sets the methods; called once the handler mappings exist. */
    public void learn(Set<String> methods) {
        this.methods = Set.copyOf(methods);
    }

    /**
     * Whether a request with {@code method} may reach an idempotent endpoint; a HEAD request may wherever a GET may,
     * since Spring MVC serves it with the GET's handler.
     */
    public boolean mayApplyTo(String method) {
        Set<String> known = methods;
        return known == null || IdempotentEndpoint.covers(known, method);
    }
}
