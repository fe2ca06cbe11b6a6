package io.idempotency.jdbc;

import jakarta.persistence.EntityTransaction;
import org.springframework.orm.jpa.EntityManagerHolder;

/**
 * JPA's side of {@link SpringTransactions}, in a class of its own so that it is loaded only where spring-orm and the
 * JPA API are (both optional dependencies).
 */
final class EntityManagers {

    private static final System.Logger log = System.getLogger(SpringTransactions.class.getName());

    private EntityManagers() {
    }

    /** Rolls back the active transaction of the EntityManager {@code resource} holds, if it holds one. */
    static void rollBack(Object resource) {
        if (!(resource instanceof EntityManagerHolder holder) || holder.getEntityManager() == null) {
            return;
        }
        try {
            EntityTransaction transaction = holder.getEntityManager().getTransaction();
            if (transaction.isActive()) {
                transaction.rollback();
            }
        } catch (RuntimeException e) {
            log.log(System.Logger.Level.WARNING, "Rolling back the idempotent execution's JPA transaction, whose"
                    + " commit was never asked of the database, failed", e);
        }
    }
}
