package io.idempotency.sample.payment;

import io.idempotency.spring.CallerResolver;
import jakarta.servlet.http.HttpServletRequest;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.stereotype.Component;

/**
 * The payer of a read ({@code GET /payments…}, {@code GET /charges…}): the same payer the writes record. A write takes
 * it from {@code IdempotencyContext.require().key().caller()}, which a read, not {@code @Idempotent}, does not have;
 * so a read asks the application's {@link CallerResolver} (the starter's, unless the application declares its own)
 * and names the caller as the starter stores it ({@link CallerResolver#namespace}): comparing the resolver's name as
 * it is would miss the rows of callers whose names the starter stores as a digest (longer than 255 characters, or not
 * storable as text), and hand them to a caller named like their digest.
 */
@Component
public class Payers {

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
        return CallerResolver.namespace(caller);
    }
}
