package io.idempotency.jpa.app;

import io.idempotency.core.Idempotent;
import jakarta.persistence.EntityManager;
import jakarta.persistence.LockModeType;
import jakarta.persistence.PersistenceContext;
import jakarta.persistence.PersistenceException;
import org.springframework.context.ApplicationEventPublisher;
import org.springframework.dao.DataAccessException;
import org.springframework.http.HttpStatus;
import org.springframework.http.ResponseEntity;
import org.springframework.transaction.annotation.Transactional;
import org.springframework.transaction.event.TransactionPhase;
import org.springframework.transaction.event.TransactionalEventListener;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestMapping;
import org.springframework.web.bind.annotation.RestController;

import javax.sql.DataSource;
import java.net.URI;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/** Handlers whose writes JPA makes in ways of its own: batched, at once (identity ids), through read-only services. */
@RestController
@RequestMapping("/edge")
public class EdgeController {

    private final PurchaseRepository purchases;
    private final TicketRepository tickets;
    private final PurchaseNotes notes;
    private final ApplicationEventPublisher events;
    private final DataSource dataSource;
    /** Accounts changed concurrently once, during their first checked debit. */
    private final Set<Long> changedOnce = ConcurrentHashMap.newKeySet();

    @PersistenceContext
    private EntityManager entityManager;

    public EdgeController(PurchaseRepository purchases, TicketRepository tickets, PurchaseNotes notes,
                          ApplicationEventPublisher events, DataSource dataSource) {
        this.dataSource = dataSource;
        this.events = events;
        this.purchases = purchases;
        this.tickets = tickets;
        this.notes = notes;
    }

    /** Changes a purchase's note through a read-only service. */
    @PostMapping("/purchases/{id}/renote")
    @Idempotent
    public Map<String, Object> renote(@PathVariable long id, @RequestBody PurchaseController.PurchaseRequest request) {
        return Map.of("reference", notes.renote(id, request.note()));
    }

    /** Saves a purchase; a taken reference fails at the flush the handler makes, which it catches, answering 200. */
    @PostMapping("/purchases/caught")
    @Idempotent
    @Transactional
    public ResponseEntity<Map<String, Object>> caught(@RequestBody PurchaseController.PurchaseRequest request) {
        Purchase saved = purchases.save(new Purchase(request.reference(), request.note()));
        try {
            entityManager.flush();
        } catch (PersistenceException e) {
            return ResponseEntity.ok(Map.of("status", "already-purchased"));
        }
        return ResponseEntity.created(URI.create("/purchases/" + saved.getId())).body(Map.of("id", saved.getId()));
    }

    /**
     * As {@link #caught}, but refusing the request with 422 when the flush fails: Hibernate, not Spring, marks the
     * transaction rollback-only then, as JPA requires of a failed flush.
     */
    @PostMapping("/purchases/caught-refusal")
    @Idempotent
    @Transactional
    public ResponseEntity<Map<String, Object>> caughtRefusal(@RequestBody PurchaseController.PurchaseRequest request) {
        Purchase saved = purchases.save(new Purchase(request.reference(), request.note()));
        try {
            entityManager.flush();
        } catch (PersistenceException e) {
            return ResponseEntity.status(HttpStatus.UNPROCESSABLE_CONTENT).header("X-Refused", "taken")
                    .body(Map.of("error", "already-purchased"));
        }
        return ResponseEntity.created(URI.create("/purchases/" + saved.getId())).body(Map.of("id", saved.getId()));
    }

    /** Saves several purchases, sent in batches at the flush. */
    @PostMapping("/purchases/batch")
    @Idempotent
    @Transactional
    public ResponseEntity<Map<String, Object>> batch(@RequestBody List<PurchaseController.PurchaseRequest> requests) {
        List<Purchase> saved = purchases.saveAll(requests.stream()
                .map(request -> new Purchase(request.reference(), request.note())).toList());
        return ResponseEntity.status(HttpStatus.CREATED).body(Map.of("count", saved.size()));
    }

    /** Changes a purchase's note in the handler's transaction (the listener may refuse it at the flush). */
    @PostMapping("/purchases/{id}/renote-here")
    @Idempotent
    @Transactional
    public Map<String, Object> renoteHere(@PathVariable long id,
                                          @RequestBody PurchaseController.PurchaseRequest request) {
        purchases.findById(id).orElseThrow().setNote(request.note());
        return Map.of("id", id, "note", request.note());
    }

    /** Saves a ticket: with an identity id, the INSERT runs at the save. */
    @PostMapping("/tickets")
    @Idempotent
    @Transactional
    public ResponseEntity<Map<String, Object>> ticket(@RequestBody PurchaseController.PurchaseRequest request) {
        Ticket saved = tickets.save(new Ticket(request.reference()));
        return ResponseEntity.status(HttpStatus.CREATED).body(Map.of("id", saved.getId()));
    }

    /** What {@link #outboxed} publishes: the outbox row is written by a listener before the commit. */
    public record Outboxed(String reference) {
    }

    /** Saves a purchase; a listener before the commit saves its outbox row, whose INSERT waits for the commit. */
    @PostMapping("/purchases/outboxed")
    @Idempotent
    @Transactional
    public ResponseEntity<Map<String, Object>> outboxed(@RequestBody PurchaseController.PurchaseRequest request) {
        Purchase saved = purchases.save(new Purchase(request.reference(), request.note()));
        events.publishEvent(new Outboxed(request.note()));
        return ResponseEntity.status(HttpStatus.CREATED).body(Map.of("id", saved.getId()));
    }

    @TransactionalEventListener(phase = TransactionPhase.BEFORE_COMMIT)
    void writeOutbox(Outboxed event) {
        purchases.save(new Purchase(event.reference(), "outbox"));
    }

    /**
     * Marks an account as touched by this request: its version is raised by Hibernate as the transaction commits
     * ({@code OPTIMISTIC_FORCE_INCREMENT}), however the handler leaves the account; the answer is the account.
     */
    @PostMapping("/accounts/{id}/touch")
    @Idempotent
    @Transactional
    public Account touch(@PathVariable long id) {
        return entityManager.find(Account.class, id, LockModeType.OPTIMISTIC_FORCE_INCREMENT);
    }

    /** As {@link #touch}, with {@code PESSIMISTIC_FORCE_INCREMENT}: the version is raised at once, by the lock. */
    @PostMapping("/accounts/{id}/touch-at-once")
    @Idempotent
    @Transactional
    public Account touchAtOnce(@PathVariable long id) {
        return entityManager.find(Account.class, id, LockModeType.PESSIMISTIC_FORCE_INCREMENT);
    }

    /**
     * Debits an account read under {@code LockModeType.OPTIMISTIC}: Hibernate checks, before the commit, that its
     * version is still the one read. During the first debit of an account another transaction changes it before the
     * handler returns.
     */
    @PostMapping("/accounts/{id}/checked-debit")
    @Idempotent
    @Transactional
    public Map<String, Object> checkedDebit(@PathVariable long id, @RequestBody Map<String, Long> request) {
        Account account = entityManager.find(Account.class, id, LockModeType.OPTIMISTIC);
        purchases.save(new Purchase("debit-" + id, "debited " + request.get("amount")));
        if (changedOnce.add(id)) {
            try (Connection other = dataSource.getConnection(); Statement statement = other.createStatement()) {
                statement.executeUpdate("update accounts set balance = balance - 5, version = version + 1"
                        + " where id = " + id);
            } catch (SQLException e) {
                throw new IllegalStateException(e);
            }
        }
        return Map.of("id", id, "debited", request.get("amount"));
    }

    /** Cancels a purchase: it is deleted. */
    @PostMapping("/purchases/{id}/cancel")
    @Idempotent
    @Transactional
    public Map<String, Object> cancel(@PathVariable long id) {
        Purchase purchase = purchases.findById(id).orElseThrow();
        purchases.delete(purchase);
        return Map.of("cancelled", purchase.getReference());
    }

    /** As {@link #cancel}, with the purchase Spring Data's web support loads from the path, if it finds it. */
    @PostMapping("/purchases/{id}/cancel-found")
    @Idempotent
    @Transactional
    public Map<String, Object> cancelFound(@PathVariable("id") Optional<Purchase> found) {
        Purchase purchase = found.orElseThrow();
        purchases.delete(purchase);
        return Map.of("cancelled", purchase.getReference());
    }

    @ExceptionHandler(DataAccessException.class)
    ResponseEntity<Map<String, Object>> refused(DataAccessException e) {
        return ResponseEntity.status(HttpStatus.CONFLICT).body(Map.of("error", "refused",
                "type", e.getClass().getSimpleName(), "purchases", purchases.count()));
    }
}
