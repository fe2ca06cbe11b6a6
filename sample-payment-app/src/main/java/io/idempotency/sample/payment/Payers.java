package io.idempotency.sample.payment;

import io.idempotency.core.RequestFingerprint;
import io.idempotency.core.ScopedKey;
import io.idempotency.spring.CallerResolver;
import jakarta.servlet.http.HttpServletRequest;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.stereotype.Component;

import java.nio.ByteBuffer;

/**
 * The payer of a read ({@code GET /payments…}, {@code GET /charges…}): the same payer the writes record. A write takes
 * it from {@code IdempotencyContext.require().key().caller()}, which a read, not {@code @Idempotent}, does not have;
 * so a read asks the application's {@link CallerResolver} (the starter's, unless the application declares its own)
 * and names the caller as the starter stores it: as it is, or {@code sha256:} and a digest for a name longer than
 * 255 characters, one a text column cannot hold (a NUL, half of a surrogate pair) and one that itself begins with
 * {@code sha256:}. Comparing the resolver's name as it is would miss the rows of the first two kinds of callers, and
 * hand them to a caller named like their digest.
 */
@Component
public class Payers {

    private static final String DIGEST_PREFIX = "sha256:";

    private final CallerResolver callers;

    /** @param callers the starter's caller resolver; absent with {@code idempotency.enabled=false}: the principal */
    public Payers(ObjectProvider<CallerResolver> callers) {
        this.callers = callers.getIfAvailable(() -> CallerResolver.PRINCIPAL);
    }

    /** The payer the request comes from, as the writes record it ({@code ""} for the anonymous payer). */
    public String of(HttpServletRequest request) {
        String caller = callers.resolve(request);
        if (caller == null) {
            // as the starter refuses it: scoped as "", the request would read every anonymous payer's rows
            throw new IllegalStateException("The CallerResolver " + callers.getClass().getName()
                    + " named no caller for " + request.getMethod() + " " + request.getRequestURI());
        }
        return asStored(caller);
    }

    /** The caller's name as the starter stores it, and thus as {@code key().caller()} gives it to the writes. */
    static String asStored(String caller) {
        boolean storable = ScopedKey.storable(caller);
        if (caller.length() <= ScopedKey.MAX_LENGTH && !caller.startsWith(DIGEST_PREFIX) && storable) {
            return caller;
        }
        if (storable) {
            return DIGEST_PREFIX + RequestFingerprint.sha256Hex(caller);
        }
        // the starter digests such a name as its UTF-16 code units behind the byte 0xFF, which no UTF-8 text has
        ByteBuffer units = ByteBuffer.allocate(1 + 2 * caller.length()).put((byte) 0xFF);
        units.asCharBuffer().put(caller);
        return DIGEST_PREFIX + RequestFingerprint.sha256Hex(units.array());
    }
}
