package io.idempotency.jdbc;

import jakarta.persistence.EntityManager;
import jakarta.persistence.EntityManagerFactory;
import jakarta.persistence.EntityTransaction;
import jakarta.persistence.PersistenceException;
import org.springframework.orm.jpa.EntityManagerFactoryUtils;
import org.springframework.orm.jpa.EntityManagerHolder;
import org.springframework.orm.jpa.JpaDialect;
import org.springframework.orm.jpa.JpaTransactionManager;
import org.springframework.transaction.CannotCreateTransactionException;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.transaction.support.TransactionSynchronizationManager;

import javax.sql.DataSource;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.function.Supplier;

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

    /**
     * The DataSource whose connection JPA's transaction manager {@code transactionManager} binds to the thread beside
     * its EntityManager in its transactions, or null when it is not JPA's or exposes none.
     */
    static DataSource dataSourceOf(PlatformTransactionManager transactionManager) {
        return transactionManager instanceof JpaTransactionManager jpa ? jpa.getDataSource() : null;
    }

    /**
     * The JDBC connection of the EntityManager bound to the thread outside any transaction for JPA's transaction
     * manager {@code transactionManager} (open-in-view's), or null when none is bound or its provider is not
     * Hibernate (the only one whose connection is known to be handed out, and held, outside a transaction). Hibernate
     * acquires it now if the EntityManager holds none yet, and keeps it as its connection handling keeps it (in
     * Spring's set-up, until the EntityManager closes, as from its first transaction on): the claim takes no second
     * connection. Hibernate reports a pool that gives none with a runtime exception of its own.
     */
    static Connection openInViewConnection(PlatformTransactionManager transactionManager) throws SQLException {
        if (!(transactionManager instanceof JpaTransactionManager jpa) || jpa.getEntityManagerFactory() == null
                || !isHibernates(jpa.getJpaDialect())
                || !(TransactionSynchronizationManager.getResource(jpa.getEntityManagerFactory())
                        instanceof EntityManagerHolder holder)
                || holder.isSynchronizedWithTransaction() || holder.getEntityManager() == null) {
            return null;
        }
        EntityManager entityManager = holder.getEntityManager();
        if (!entityManager.isOpen()) {
            return null;
        }
        try {
            var handle = jpa.getJpaDialect().getJdbcConnection(entityManager, false);
            return handle == null ? null : handle.getConnection();
        } catch (PersistenceException e) { // Hibernate's JDBCException: the pool gave no connection, say
            throw new CannotCreateTransactionException("Could not get the JDBC connection of the request's"
                    + " EntityManager for the idempotency claim", e);
        }
    }

    /**
     * Runs {@code work} with the EntityManagers bound to the thread outside any transaction (open-in-view's, one per
     * EntityManagerFactory) unbound, and binds them again after. Should {@code work} leave another EntityManager bound
     * in the place of one, outside a transaction, that one is closed (and logged): the request's own is the one
     * open-in-view closes when the request ends.
     */
    static <T> T apart(Supplier<T> work) {
        Map<Object, EntityManagerHolder> unbound = new LinkedHashMap<>();
        for (Map.Entry<Object, Object> bound : TransactionSynchronizationManager.getResourceMap().entrySet()) {
            if (bound.getKey() instanceof EntityManagerFactory && bound.getValue() instanceof EntityManagerHolder holder
                    && !holder.isSynchronizedWithTransaction()) {
                unbound.put(bound.getKey(), holder);
            }
        }
        unbound.keySet().forEach(TransactionSynchronizationManager::unbindResource);
        try {
            return work.get();
        } finally {
            unbound.forEach((factory, holder) -> {
                Object left = TransactionSynchronizationManager.unbindResourceIfPossible(factory);
                if (left instanceof EntityManagerHolder leftHolder && !leftHolder.isSynchronizedWithTransaction()) {
                    log.log(System.Logger.Level.WARNING, "The stale claim resolver left an EntityManager bound to"
                            + " the thread; it was closed, and the request's own bound again");
                    EntityManagerFactoryUtils.closeEntityManager(leftHolder.getEntityManager());
                } else if (left != null) {
                    log.log(System.Logger.Level.ERROR, "The stale claim resolver left a transaction's resource bound"
                            + " to the thread (" + left.getClass().getName() + "); the request's EntityManager was"
                            + " bound again in its place");
                }
                TransactionSynchronizationManager.bindResource(factory, holder);
            });
        }
    }

    /** Whether {@code dialect} is Spring's for Hibernate, told by name: Hibernate may be absent from the class path. */
    private static boolean isHibernates(JpaDialect dialect) {
        for (Class<?> type = dialect.getClass(); type != null; type = type.getSuperclass()) {
            if (type.getName().equals("org.springframework.orm.jpa.vendor.HibernateJpaDialect")) {
                return true;
            }
        }
        return false;
    }
}
