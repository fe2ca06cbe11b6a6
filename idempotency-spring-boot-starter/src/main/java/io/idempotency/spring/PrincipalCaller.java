package io.idempotency.spring;

import jakarta.servlet.http.HttpServletRequest;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.concurrent.atomic.AtomicBoolean;

/** {@link CallerResolver#PRINCIPAL}: the principal's name, and a warning when an authenticated one has none. */
final class PrincipalCaller implements CallerResolver {

    private static final Logger log = LoggerFactory.getLogger(CallerResolver.class);

    private final AtomicBoolean warnedOfANamelessPrincipal = new AtomicBoolean();

    @Override
    public String resolve(HttpServletRequest request) {
        var principal = request.getUserPrincipal();
        if (principal == null) {
            return "";
        }
        String name = principal.getName();
        if (name == null || name.isEmpty()) {
            if (warnedOfANamelessPrincipal.compareAndSet(false, true)) {
                // every such caller, and every anonymous one, could replay the others' answers given their keys
                log.warn("An authenticated request ({} {}) has a principal without a name ({}): its idempotency keys"
                        + " share the namespace of anonymous callers and of every other principal without a name."
                        + " Declare a CallerResolver bean that names such callers (e.g. by a claim they all carry)."
                        + " Said once.", request.getMethod(), IdempotencyFilter.loggedPath(request),
                        principal.getClass().getName());
            }
            return "";
        }
        return name;
    }
}
