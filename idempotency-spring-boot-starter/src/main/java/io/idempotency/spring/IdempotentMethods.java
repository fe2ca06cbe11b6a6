package io.idempotency.spring;

import java.util.Set;

/**
 * The HTTP methods any {@code @Idempotent} endpoint of the application is idempotent for, learnt at startup from the
 * handler mappings and the {@code @Idempotent} methods that functional routes call. Requests with other methods —
 * typically every GET — skip the filter's wrappers entirely. Until it is known, every request is wrapped. Thread-safe.
 */
public final class IdempotentMethods {

    private volatile Set<String> methods;
    /** What {@link #learnAlso} was told before {@link #learn}, kept for it. */
    private final Set<String> learntEarlier = new java.util.HashSet<>();

    /** Sets the methods; called once the handler mappings exist. */
    public synchronized void learn(Set<String> methods) {
        Set<String> all = new java.util.HashSet<>(methods);
        all.addAll(learntEarlier);
        this.methods = Set.copyOf(all);
    }

    /**
     * Adds {@code more} to the methods learnt: those of the endpoints of a child context (a DispatcherServlet's own),
     * usually made after the application's. Told before the methods are learnt (every request is wrapped until then),
     * they are added to them when they are.
     */
    public synchronized void learnAlso(Set<String> more) {
        Set<String> known = methods;
        if (known == null) {
            learntEarlier.addAll(more);
        } else if (!known.containsAll(more)) {
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
