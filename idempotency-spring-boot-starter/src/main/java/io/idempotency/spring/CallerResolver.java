package io.idempotency.spring;

import jakarta.servlet.http.HttpServletRequest;

/**
 * Names the caller a request comes from. The name is part of every record's unique key, so two callers using the
 * same idempotency key never meet: neither can replay, block or detect the other's request. Declare a bean of this
 * type to scope keys by tenant or API key: return an identifier (the API key's id), never a credential, since the
 * name is stored in plain text and named in log messages. Implementations must be thread-safe.
 */
@FunctionalInterface
public interface CallerResolver {

    /**
     * @return the caller's namespace; {@code ""} for anonymous requests; never null (an {@code @Idempotent} request
     *         it names no caller for is refused with an {@link IllegalStateException} before anything is claimed,
     *         rather than scoped as anonymous). A name longer than 255 characters (or one the database cannot store
     *         as text) is stored as its SHA-256 digest instead
     */
    String resolve(HttpServletRequest request);

    /**
     * The default: the authenticated principal's name ({@link HttpServletRequest#getUserPrincipal()}, which Spring
     * Security fills in through its servlet API integration and leaves empty for anonymous requests; a filter chain
     * that disables that integration leaves it empty for every request, so declare a resolver there), else
     * {@code ""}. A principal without a name (a JWT without the claim its name is read from) has no namespace of its
     * own: it shares the anonymous one, and a warning says so once; declare a resolver that names such callers.
     */
    CallerResolver PRINCIPAL = new PrincipalCaller();
}
