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
 * use its connection. Opened at READ COMMITTED, which the claim protocol needs. Thread-safe.
 */
public class SpringTransactions implements Transactions {

    private final PlatformTransactionManager transactionManager;
    private final TransactionDefinition definition;

    public SpringTransactions(PlatformTransactionManager transactionManager) {
        this.transactionManager = Objects.requireNonNull(transactionManager, "transactionManager");
        DefaultTransactionDefinition definition =
                new DefaultTransactionDefinition(TransactionDefinition.PROPAGATION_REQUIRED);
        definition.setIsolationLevel(TransactionDefinition.ISOLATION_READ_COMMITTED);
        definition.setName("idempotency");
        this.definition = definition;
    }

    @Override
    public Transaction begin() {
        if (TransactionSynchronizationManager.isActualTransactionActive()) {
            // joining would let the outer transaction commit on its own schedule: before or after the answer
            throw new IllegalStateException("an idempotent execution must own its transaction, but one is already"
                    + " active on this thread: is @Idempotent ordered inside @Transactional?");
        }
        TransactionStatus status = transactionManager.getTransaction(definition);
        return new Transaction() {
            @Override
            public void commit() {
                transactionManager.commit(status);
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
