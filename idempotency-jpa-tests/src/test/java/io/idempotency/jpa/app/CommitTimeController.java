package io.idempotency.jpa.app;

import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyContext;
import jakarta.persistence.EntityManager;
import jakarta.persistence.PersistenceContext;
import org.springframework.context.ApplicationEventPublisher;
import org.springframework.dao.OptimisticLockingFailureException;
import org.springframework.http.HttpStatus;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.transaction.annotation.Transactional;
import org.springframework.transaction.event.TransactionPhase;
import org.springframework.transaction.event.TransactionalEventListener;
import org.springframework.transaction.support.TransactionSynchronization;
import org.springframework.transaction.support.TransactionSynchronizationManager;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestMapping;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.RestController;

import javax.sql.DataSource;
import java.net.URI;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;

/** Handlers whose transaction fails, or runs callbacks, only at the commit the filter makes after the answer. */
@RestController
@RequestMapping("/commit-time")
public class CommitTimeController {

    /** A purchase was made: published by the handler, heard by the listeners below. */
    public record Purchased(String reference) {
    }

    /** "phase reference" for each event a transactional listener heard, in order. */
    public static final List<String> HEARD = new CopyOnWriteArrayList<>();

    private final PurchaseRepository purchases;
    private final ApplicationEventPublisher events;
    private final JdbcClient jdbc;
    private final DataSource dataSource;

    @PersistenceContext
    private EntityManager entityManager;

    public CommitTimeController(PurchaseRepository purchases, ApplicationEventPublisher events, JdbcClient jdbc,
                                DataSource dataSource) {
        this.purchases = purchases;
        this.events = events;
        this.jdbc = jdbc;
        this.dataSource = dataSource;
    }

    /**
     * Saves a purchase and publishes {@link Purchased}. A note "fails-at-commit" breaks a deferred constraint, which
     * PostgreSQL checks at the COMMIT, after every flush.
     */
    @PostMapping("/purchases")
    @Idempotent
    @Transactional
    public ResponseEntity<Map<String, Object>> purchase(@RequestBody PurchaseController.PurchaseRequest request) {
        Purchase saved = purchases.save(new Purchase(request.reference(), request.note()));
        events.publishEvent(new Purchased(request.reference()));
        return ResponseEntity.created(URI.create("/purchases/" + saved.getId()))
                .body(Map.of("id", saved.getId(), "reference", saved.getReference()));
    }

    /**
     * Saves a purchase and writes it at once, then takes {@code millis} (a slow call to a third party) and answers
     * without another statement: a transaction timeout that runs out meanwhile is met by the stored answer's write.
     */
    @PostMapping("/purchases/slow")
    @Idempotent
    @Transactional
    public ResponseEntity<Map<String, Object>> slow(@RequestParam long millis,
                                                    @RequestParam(defaultValue = "false") boolean outbox,
                                                    @RequestBody PurchaseController.PurchaseRequest request)
            throws InterruptedException {
        Purchase saved = purchases.saveAndFlush(new Purchase(request.reference(), request.note()));
        Thread.sleep(millis);
        if (outbox) {
            events.publishEvent(new Outboxed(request.reference()));
        }
        return ResponseEntity.created(URI.create("/purchases/" + saved.getId()))
                .body(Map.of("id", saved.getId(), "reference", saved.getReference()));
    }

    /**
     * Saves a purchase and registers a callback for after the commit (a message sent once the purchase is kept) that
     * fails: the purchase and the answer are committed all the same.
     */
    @PostMapping("/purchases/announced")
    @Idempotent
    @Transactional
    public ResponseEntity<Map<String, Object>> announced(@RequestBody PurchaseController.PurchaseRequest request) {
        Purchase saved = purchases.save(new Purchase(request.reference(), request.note()));
        TransactionSynchronizationManager.registerSynchronization(new TransactionSynchronization() {
            @Override
            public void afterCommit() {
                throw new IllegalStateException("the broker is down: purchase " + request.reference()
                        + " was not announced");
            }
        });
        return ResponseEntity.created(URI.create("/purchases/" + saved.getId()))
                .body(Map.of("id", saved.getId(), "reference", saved.getReference()));
    }

    /**
     * Debits an account. Before the handler returns, another transaction changes the account: Hibernate's versioned
     * UPDATE, held back until the flush, then finds nothing to update.
     */
    @PostMapping("/accounts/{id}/debit")
    @Idempotent
    @Transactional
    public Map<String, Object> debit(@PathVariable long id, @RequestBody Map<String, Long> request) {
        Account account = entityManager.find(Account.class, id);
        account.setBalance(account.getBalance() - request.get("amount"));
        if (request.containsKey("concurrent")) {
            try (Connection other = dataSource.getConnection(); Statement statement = other.createStatement()) {
                statement.executeUpdate("update accounts set balance = balance - " + request.get("concurrent")
                        + ", version = version + 1 where id = " + id);
            } catch (SQLException e) {
                throw new IllegalStateException(e);
            }
        }
        return Map.of("id", id, "balance", account.getBalance());
    }

    /** What {@link #lazyNote} answers: the purchase is read only when the answer is serialized. */
    public static final class LazyNote {

        private final Purchase purchase;

        LazyNote(Purchase purchase) {
            this.purchase = purchase;
        }

        public String getNote() {
            return purchase.getNote();
        }
    }

    /** Answers with a purchase Hibernate loads only when the answer is serialized, after the handler returned. */
    @PostMapping("/purchases/{id}/lazy-note")
    @Idempotent
    public LazyNote lazyNote(@PathVariable long id) {
        return new LazyNote(entityManager.getReference(Purchase.class, id));
    }

    @ExceptionHandler(OptimisticLockingFailureException.class)
    ResponseEntity<Map<String, Object>> changedMeanwhile(OptimisticLockingFailureException e) {
        // reads the database, as exception handlers do: not in the transaction the failed flush aborted
        return ResponseEntity.status(HttpStatus.CONFLICT).body(Map.of("error", "changed-meanwhile",
                "accounts", jdbc.sql("select count(*) from accounts").query(Long.class).single()));
    }

    @TransactionalEventListener(phase = TransactionPhase.BEFORE_COMMIT)
    void beforeCommit(Purchased event) {
        HEARD.add("before-commit " + event.reference() + " "
                + IdempotencyContext.current().map(context -> context.key().key()).orElse("-"));
    }

    public record Outboxed(String reference) {
    }

    @TransactionalEventListener(phase = TransactionPhase.BEFORE_COMMIT)
    void outbox(Outboxed event) {
        jdbc.sql("select count(*) from purchases where reference = ?").param(event.reference()).query(Long.class)
                .single();
    }

    @TransactionalEventListener(phase = TransactionPhase.AFTER_COMMIT)
    void afterCommit(Purchased event) {
        HEARD.add("after-commit " + event.reference());
    }

    @TransactionalEventListener(phase = TransactionPhase.AFTER_ROLLBACK)
    void afterRollback(Purchased event) {
        HEARD.add("after-rollback " + event.reference());
    }
}
