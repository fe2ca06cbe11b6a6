package io.idempotency.jpa.app;

import io.idempotency.core.DefiniteFailureException;
import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyMode;
import jakarta.persistence.EntityManager;
import jakarta.persistence.PersistenceContext;
import org.springframework.dao.DataIntegrityViolationException;
import org.springframework.http.HttpStatus;
import org.springframework.http.ResponseEntity;
import org.springframework.transaction.annotation.Transactional;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestHeader;
import org.springframework.web.bind.annotation.RequestMapping;
import org.springframework.web.bind.annotation.RestController;

import java.net.URI;
import java.util.Map;
import java.util.concurrent.Callable;

@RestController
@RequestMapping("/purchases")
public class PurchaseController {

    public record PurchaseRequest(String reference, String note) {
    }

    private final PurchaseRepository purchases;

    @PersistenceContext
    private EntityManager entityManager;

    public PurchaseController(PurchaseRepository purchases) {
        this.purchases = purchases;
    }

    /** Saves through the repository; the INSERT waits for the flush. */
    @PostMapping
    @Idempotent
    @Transactional
    public ResponseEntity<Map<String, Object>> create(@RequestBody PurchaseRequest request) {
        Purchase saved = purchases.save(new Purchase(request.reference(), request.note()));
        return ResponseEntity.created(URI.create("/purchases/" + saved.getId()))
                .body(Map.of("id", saved.getId(), "reference", saved.getReference(), "note", saved.getNote()));
    }

    /** Saves, then fails: the purchase and the claim must both roll back. */
    @PostMapping("/failing")
    @Idempotent
    @Transactional
    public ResponseEntity<Map<String, Object>> createThenFail(@RequestBody PurchaseRequest request) {
        purchases.save(new Purchase(request.reference(), request.note()));
        entityManager.flush(); // the INSERT has run: only the rollback can undo it
        throw new IllegalStateException("the gateway said no after the purchase was written");
    }

    /**
     * Saves, then answers 503 without throwing: an answer that is not stored, so the filter rolls the purchase back
     * after the dispatcher has finished.
     */
    @PostMapping("/unavailable")
    @Idempotent
    @Transactional
    public ResponseEntity<Map<String, Object>> createThenAnswerUnavailable(@RequestBody PurchaseRequest request) {
        purchases.save(new Purchase(request.reference(), request.note()));
        entityManager.flush();
        return ResponseEntity.status(HttpStatus.SERVICE_UNAVAILABLE).body(Map.of("error", "try-later"));
    }

    /**
     * Intent-first: the claim commits before the handler runs. A reference starting with "declined" is saved, then
     * declined definitely: the purchase rolls back and the claim is marked FAILED, so a retry runs at once.
     */
    @PostMapping("/intent")
    @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "30s")
    @Transactional
    public ResponseEntity<Map<String, Object>> createIntentFirst(@RequestBody PurchaseRequest request) {
        Purchase saved = purchases.save(new Purchase(request.reference(), request.note()));
        if (request.reference().startsWith("declined")) {
            entityManager.flush();
            throw new DefiniteFailureException("the gateway declined " + request.reference());
        }
        return ResponseEntity.created(URI.create("/purchases/" + saved.getId()))
                .body(Map.of("id", saved.getId(), "reference", saved.getReference()));
    }

    /**
     * Not {@code @Transactional}: saves through the repository's own transaction, flushed at once, and answers a taken
     * reference itself with 409 (an answer that is not stored), as it would without {@code @Idempotent}.
     */
    @PostMapping("/or-conflict")
    @Idempotent
    public ResponseEntity<Map<String, Object>> createOrConflict(@RequestBody PurchaseRequest request) {
        Purchase saved;
        try {
            saved = purchases.saveAndFlush(new Purchase(request.reference(), request.note()));
        } catch (DataIntegrityViolationException e) {
            return ResponseEntity.status(HttpStatus.CONFLICT).body(Map.of("error", "reference-taken"));
        }
        return ResponseEntity.created(URI.create("/purchases/" + saved.getId()))
                .body(Map.of("id", saved.getId(), "reference", saved.getReference()));
    }

    /** Changes a purchase's note: Hibernate writes the UPDATE at the flush (see {@link PurchaseUpdates}). */
    @PostMapping("/{id}/renote")
    @Idempotent
    @Transactional
    public Map<String, Object> renote(@PathVariable long id, @RequestBody PurchaseRequest request) {
        purchases.findById(id).orElseThrow().setNote(request.note());
        return Map.of("id", id, "note", request.note());
    }

    @ExceptionHandler(DefiniteFailureException.class)
    ResponseEntity<Map<String, Object>> declined(DefiniteFailureException e) {
        return ResponseEntity.status(HttpStatus.PAYMENT_REQUIRED)
                .body(Map.of("error", "declined", "purchases", purchases.count()));
    }

    /**
     * Which transaction wrote this request's claim, as seen through JPA's own connection: true when it is the
     * transaction the handler runs in (the claim row's xmin is this transaction's id).
     */
    @PostMapping("/claim-transaction")
    @Idempotent
    public Map<String, Object> claimTransaction(@RequestHeader("Idempotency-Key") String key) {
        Object sameTransaction = entityManager.createNativeQuery("select coalesce(bool_and(xmin = xid(pg_current_xact_id())),"
                        + " false) from idempotency_keys where idempotency_key = :key and status = 'PROCESSING'")
                .setParameter("key", key).getSingleResult();
        return Map.of("claimWrittenInThisTransaction", sameTransaction);
    }

    /**
     * A request without a key and without {@code @Idempotent}, answered on another thread: open-in-view must still
     * give that thread the request's EntityManager, so the lazily loaded purchase can be read there.
     */
    @PostMapping("/{id}/note")
    public Callable<String> noteLater(@PathVariable long id) {
        Purchase purchase = entityManager.getReference(Purchase.class, id); // loaded on first use
        return purchase::getNote;
    }

    /** Reads the database, as exception handlers do: it must not run in the aborted transaction of the handler. */
    @ExceptionHandler(DataIntegrityViolationException.class)
    ResponseEntity<Map<String, Object>> duplicateReference(DataIntegrityViolationException e) {
        return ResponseEntity.status(HttpStatus.CONFLICT)
                .body(Map.of("error", "duplicate-reference", "purchases", purchases.count()));
    }
}
