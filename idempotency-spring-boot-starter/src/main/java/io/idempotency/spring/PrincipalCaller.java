package io.idempotency.spring;

import jakarta.servlet.http.HttpServletRequest;

/**
 * {@link CallerResolver#PRINCIPAL}: the principal's name, {@code ""} when there is no principal, and a refusal when an
 * authenticated one has no name.
 */
final class PrincipalCaller implements CallerResolver {

    @Override
    public String resolve(HttpServletRequest request) {
        var principal = request.getUserPrincipal();
        if (principal == null) {
            return "";
        }
        String name = principal.getName();
        if (name == null || name.isEmpty()) {
            // scoped as "", such a caller would be replayed every anonymous client's answers and every other
            // nameless principal's, and theirs to it: refused before anything is claimed, as a resolver naming none
            throw new IllegalStateException("An authenticated request (" + request.getMethod() + " "
                    + IdempotencyFilter.loggedPath(request) + ") has a principal without a name ("
                    + principal.getClass().getName() + "), so its idempotency key cannot be scoped to its caller;"
                    + " declare a CallerResolver bean that names such callers (e.g. by a claim they all carry)");
        }
        return name;
    }
}
