package io.idempotency.jpa.app;

import io.idempotency.core.IdempotencyContext;
import jakarta.persistence.PreUpdate;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * An entity listener of the kind an application audits its writes with: for each purchase Hibernate updates, it
 * notes the idempotency key the write was made under ("-" when none). Hibernate calls it at the flush.
 */
public class PurchaseUpdates {

    /** "reference key" for each update, in order. */
    public static final List<String> SEEN = new CopyOnWriteArrayList<>();

    @PreUpdate
    void updating(Purchase purchase) {
        if ("refused-by-listener".equals(purchase.getNote())) {
            throw new IllegalStateException("the audit refused the note of " + purchase.getReference());
        }
        SEEN.add(purchase.getReference() + " "
                + IdempotencyContext.current().map(context -> context.key().key()).orElse("-"));
    }
}
