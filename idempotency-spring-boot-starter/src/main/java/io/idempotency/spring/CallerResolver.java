package io.idempotency.spring;

import io.idempotency.core.RequestFingerprint;
import io.idempotency.core.ScopedKey;
import jakarta.servlet.http.HttpServletRequest;

import java.nio.ByteBuffer;

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
     *         as text, or one that begins with {@code sha256:}) is stored as its SHA-256 digest instead: see
     *         {@link #namespace(String)}
     */
    String resolve(HttpServletRequest request);

    /**
     * The default: the authenticated principal's name ({@link HttpServletRequest#getUserPrincipal()}, which Spring
     * Security fills in through its servlet API integration and leaves empty for anonymous requests; a filter chain
     * that disables that integration leaves it empty for every request, so declare a resolver there), else
     * {@code ""}. A principal without a name (a JWT without the claim its name is read from) cannot be told from an
     * anonymous caller or another nameless one, so its {@code @Idempotent} requests are refused with an
     * {@link IllegalStateException} before anything is claimed; declare a resolver that names such callers. So is one
     * named by the identity of its principal object: Spring Security names an authentication whose principal is none
     * of the kinds it takes a name from (an application's own API client) by the object's {@code toString()}, which,
     * if it is {@link Object#toString()}, names the object (its class and hash code), not the caller.
     */
    CallerResolver PRINCIPAL = new PrincipalCaller();

    /**
     * The caller's namespace as its records are stored, and as {@code IdempotencyContext.require().key().caller()}
     * gives it to a handler: {@code caller}, the name a resolver gave, or for a name longer than the column (a long
     * token subject, say) a digest of it ({@code sha256:} and 64 hex digits), which keeps callers apart without
     * refusing them. A name that looks like such a digest is digested too, so that no caller can take another's
     * namespace by choosing that name, and so is one that a text column cannot hold as it is: a NUL character
     * (PostgreSQL refuses it) or half of a surrogate pair (the driver would send it as '?', making two such names
     * one). An application's own reads of what its idempotent writes recorded under the caller (a payment's payer)
     * name the caller this way.
     */
    static String namespace(String caller) {
        String digestPrefix = "sha256:";
        boolean storable = ScopedKey.storable(caller);
        if (caller.length() <= ScopedKey.MAX_LENGTH && !caller.startsWith(digestPrefix) && storable) {
            return caller;
        }
        if (storable) {
            return digestPrefix + RequestFingerprint.sha256Hex(caller);
        }
        // its UTF-16 code units, behind a byte that no UTF-8 text has: never the digest of another name
        ByteBuffer units = ByteBuffer.allocate(1 + 2 * caller.length()).put((byte) 0xFF);
        units.asCharBuffer().put(caller);
        return digestPrefix + RequestFingerprint.sha256Hex(units.array());
    }
}
