package io.idempotency.jpa.app;

import org.springframework.stereotype.Service;
import org.springframework.transaction.annotation.Transactional;

/** A service of the kind an application marks read-only, though it changes the entity it loads. */
@Service
public class PurchaseNotes {

    private final PurchaseRepository purchases;

    public PurchaseNotes(PurchaseRepository purchases) {
        this.purchases = purchases;
    }

    @Transactional(readOnly = true)
    public String renote(long id, String note) {
        Purchase purchase = purchases.findById(id).orElseThrow();
        purchase.setNote(note);
        return purchase.getReference();
    }
}
