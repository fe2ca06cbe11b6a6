package io.idempotency.jpa.app;

import jakarta.persistence.Column;
import jakarta.persistence.Entity;
import jakarta.persistence.EntityListeners;
import jakarta.persistence.GeneratedValue;
import jakarta.persistence.GenerationType;
import jakarta.persistence.Id;
import jakarta.persistence.SequenceGenerator;
import jakarta.persistence.Table;

/**
 * A business row. Its id comes from a sequence, so Hibernate holds the INSERT back until the flush, which JPA makes at
 * the commit unless asked earlier.
 */
@Entity
@Table(name = "purchases")
@EntityListeners(PurchaseUpdates.class)
public class Purchase {

    @Id
    @GeneratedValue(strategy = GenerationType.SEQUENCE, generator = "purchases")
    @SequenceGenerator(name = "purchases", sequenceName = "purchases_seq", allocationSize = 1)
    private Long id;

    @Column(nullable = false, unique = true)
    private String reference;

    @Column(nullable = false)
    private String note;

    protected Purchase() {
    }

    public Purchase(String reference, String note) {
        this.reference = reference;
        this.note = note;
    }

    public Long getId() {
        return id;
    }

    public String getReference() {
        return reference;
    }

    public String getNote() {
        return note;
    }

    public void setNote(String note) {
        this.note = note;
    }
}
