package io.idempotency.spring;

import io.idempotency.core.ScopedKey;
import jakarta.servlet.http.HttpServletRequest;
import org.springframework.util.ClassUtils;

import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.security.Principal;

/**
 * {@link CallerResolver#PRINCIPAL}: the principal's name, {@code ""} when there is no principal, and a refusal when an
 * authenticated one has no name, or is named by an object's identity.
 */
final class PrincipalCaller implements CallerResolver {

    /**
     * The public {@code getPrincipal()} of a principal's class (Spring Security's {@code Authentication}, whose name
     * is its principal object's), or null when it has none.
     */
    private static final ClassValue<Method> GET_PRINCIPAL = new ClassValue<>() {
        @Override
        protected Method computeValue(Class<?> type) {
            try {
                Method method = ClassUtils.getPubliclyAccessibleMethodIfPossible(type.getMethod("getPrincipal"), type);
                return Modifier.isPublic(method.getDeclaringClass().getModifiers()) ? method : null;
            } catch (NoSuchMethodException | RuntimeException e) {
                return null;
            }
        }
    };

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
        if (namedByIdentity(principal, name)) {
            // Spring Security names a principal object of no kind it knows (an application's own API client) by its
            // toString(): Object's names the object, not the caller — anew for every request that loads the client
            // (each retry would run again), or two clients alike whose hash codes agree (each replayed the other's
            // answers)
            throw new IllegalStateException("An authenticated request (" + request.getMethod() + " "
                    + IdempotencyFilter.loggedPath(request) + ") has a principal named by its object's identity ("
                    + ScopedKey.printable(name) + ": Object.toString(), the class and the hash code), which names"
                    + " the object, not the caller, so its idempotency key cannot be scoped to its caller;"
                    + " give the principal's class a toString() that names the caller (or make it a UserDetails or an"
                    + " AuthenticatedPrincipal), or declare a CallerResolver bean that names such callers");
        }
        return name;
    }

    /** Whether {@code name} is {@link Object#toString()} of the object the principal is named after. */
    private static boolean namedByIdentity(Principal principal, String name) {
        Method getPrincipal = GET_PRINCIPAL.get(principal.getClass());
        if (getPrincipal == null) {
            return false;
        }
        try {
            Object named = getPrincipal.invoke(principal);
            String identity = named == null ? null : named.getClass().getName() + "@";
            return identity != null && name.startsWith(identity)
                    && name.equals(identity + Integer.toHexString(named.hashCode()));
        } catch (ReflectiveOperationException | RuntimeException e) {
            return false; // a principal it cannot read: its name stands
        }
    }
}
