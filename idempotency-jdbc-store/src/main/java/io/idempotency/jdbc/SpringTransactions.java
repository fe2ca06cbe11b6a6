package io.idempotency.jdbc;

import io.idempotency.core.Transactions;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.transaction.TransactionDefinition;
import org.springframework.transaction.TransactionStatus;
import org.springframework.transaction.support.DefaultTransactionDefinition;
import org.springframework.transaction.support.TransactionSynchronizationManager;

import java.util.Objects;

/**
 * {@link Transactions} on a Spring {@link PlatformTransactionManager}: the transaction is bound to the current thread,
 * so the store and the application's own {@code JdbcTemplate}, {@code JdbcClient} or Spring Data repositories all
 * use its connection. Transactions run at READ COMMITTED, which the claim protocol needs: either because the
 * connections already default to it (then nothing is set, which saves a round trip per request: asking a connection
 * for its isolation level is a query), or because it is set on each transaction. Thread-safe.
 */
public class SpringTransactions implements Transactions {

    private final PlatformTransactionManager transactionManager;
    private final TransactionDefinition definition;

    /** Sets READ COMMITTED on every transaction. */
    public SpringTransactions(PlatformTransactionManager transactionManager) {
        this(transactionManager, false);
    }

    /**
     * @param connectionsDefaultToReadCommitted true if the DataSource's connections run at READ COMMITTED unless told
     *                                          otherwise (PostgreSQL's default), so it need not be set per transaction
     */
    public SpringTransactions(PlatformTransactionManager transactionManager, boolean connectionsDefaultToReadCommitted) {
        this.transactionManager = Objects.requireNonNull(transactionManager, "transactionManager");
        DefaultTransactionDefinition definition =
                new DefaultTransactionDefinition(TransactionDefinition.PROPAGATION_REQUIRED);
        definition.setIsolationLevel(connectionsDefaultToReadCommitted
                ? TransactionDefinition.ISOLATION_DEFAULT : TransactionDefinition.ISOLATION_READ_COMMITTED);
        definition.setName("idempotency");
        this.definition = definition;
    }

    @Override
    public Transaction begin() {
        if (TransactionSynchronizationManager.isActualTransactionActive()) {
            // joining would let the outer transaction commit on its own schedule: before or after the answer
            // the hint names both callers: the startup checks catch most misordered @Idempotent handlers, while a
            // listener calling IdempotencyTemplate from a @Transactional method meets this only at run time
            throw new IllegalStateException("an idempotent execution must own its transaction, but one is already"
                    + " active on this thread: call IdempotencyTemplate.execute outside any transaction (not from a"
                    + " @Transactional method), and order @Idempotent outside @Transactional");
        }
        TransactionStatus status = transactionManager.getTransaction(definition);
        return new Transaction() {
            @Override
            public void commit() {
                transactionManager.commit(status);
            }

            @Override
            public void flush() {
                status.flush(); // JPA: EntityManager.flush(); plain JDBC: nothing to write
            }

            @Override
            public void rollback() {
                if (!status.isCompleted()) {
                    transactionManager.rollback(status);
                }
            }
        };
    }
}
