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
    public synchronized void learn(Set<String> methods) {
        this.methods = Set.copyOf(methods);
    }

    /**
     * Adds {@code more} to the methods learnt: those of the endpoints of a child context (a DispatcherServlet's own),
     * made after the application's. Before the methods are learnt, every request is wrapped anyway.
     */
    public synchronized void learnAlso(Set<String> more) {
        Set<String> known = methods;
        if (known != null && !known.containsAll(more)) {
            Set<String> all = new java.util.HashSet<>(known);
            all.addAll(more);
            this.methods = Set.copyOf(all);
        }
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
