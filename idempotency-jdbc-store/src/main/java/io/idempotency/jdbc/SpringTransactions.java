package io.idempotency.jdbc;

import io.idempotency.core.Transactions;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.ConnectionHolder;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.transaction.CannotCreateTransactionException;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.transaction.TransactionDefinition;
import org.springframework.transaction.TransactionException;
import org.springframework.transaction.TransactionStatus;
import org.springframework.transaction.UnexpectedRollbackException;
import org.springframework.transaction.support.AbstractPlatformTransactionManager;
import org.springframework.transaction.support.DefaultTransactionDefinition;
import org.springframework.transaction.support.ResourceTransactionManager;
import org.springframework.transaction.support.TransactionSynchronization;
import org.springframework.transaction.support.TransactionSynchronizationManager;
import org.springframework.util.ClassUtils;

import javax.sql.DataSource;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.Map;
import java.util.Objects;
import java.util.function.Predicate;
import java.util.function.Supplier;

/**
 * {@link Transactions} on a Spring {@link PlatformTransactionManager}: the transaction is bound to the current thread,
 * so the store and the application's own {@code JdbcTemplate}, {@code JdbcClient} or Spring Data repositories all
 * use its connection. Transactions run at READ COMMITTED, which the claim protocol needs: either because the
 * connections already default to it (then nothing is set, which saves a round trip per request: asking a connection
 * for its isolation level is a query), or because it is set on each transaction. Thread-safe.
 */
public class SpringTransactions implements Transactions {

    private static final System.Logger log = System.getLogger(SpringTransactions.class.getName());

    private final PlatformTransactionManager transactionManager;
    private final TransactionDefinition definition;
    private final Predicate<Object> holdsNoConnection;
    /** Run first in each transaction, or null when the transaction manager sets the level (or none is needed). */
    private final ReadCommittedStatement readCommitted;
    /**
     * The transactions of intent-first claims beside an EntityManager kept open for the request, on the DataSource
     * that JPA's transaction manager binds its transactions' connection under; null where {@link #begin()} serves.
     */
    private final SpringTransactions claimsBeside;
    private final DataSource claimsDataSource;

    private record ReadCommittedStatement(JdbcTemplate jdbc, String sql) {
    }

    /** Sets READ COMMITTED on every transaction. */
    public SpringTransactions(PlatformTransactionManager transactionManager) {
        this(transactionManager, false);
    }

    /**
     * @param connectionsDefaultToReadCommitted true if the DataSource's connections run at READ COMMITTED unless told
     *                                          otherwise (PostgreSQL's default), so it need not be set per transaction
     */
    public SpringTransactions(PlatformTransactionManager transactionManager, boolean connectionsDefaultToReadCommitted) {
        this(transactionManager, connectionsDefaultToReadCommitted, resource -> false);
    }

    /**
     * @param holdsNoConnection whether a resource bound to the thread outside any transaction holds no connection yet
     *                          (an EntityManager kept open for the request that has not read anything), so that a
     *                          record may still be read apart ({@link #mayReadApart()}); false of anything it does not
     *                          know
     */
    public SpringTransactions(PlatformTransactionManager transactionManager, boolean connectionsDefaultToReadCommitted,
                              Predicate<Object> holdsNoConnection) {
        this(transactionManager, connectionsDefaultToReadCommitted, holdsNoConnection, null);
    }

    /**
     * @param readCommittedStatement a statement that makes the transaction it begins run at READ COMMITTED, whatever
     *                               the session's default ({@link PostgresIdempotencyStore#READ_COMMITTED}), or null.
     *                               Where the connections do not default to READ COMMITTED and the transaction manager
     *                               is a {@link DataSourceTransactionManager} (whose connection is at hand), it runs
     *                               first in each transaction, instead of the level being set through JDBC, which
     *                               PostgreSQL's driver makes a session setting sent before the transaction begins:
     *                               behind a pooler in transaction mode, on another server connection than the
     *                               transaction's, where it stays for other clients. Otherwise the transaction manager
     *                               is asked for the level
     */
    public SpringTransactions(PlatformTransactionManager transactionManager, boolean connectionsDefaultToReadCommitted,
                              Predicate<Object> holdsNoConnection, String readCommittedStatement) {
        this.holdsNoConnection = Objects.requireNonNull(holdsNoConnection, "holdsNoConnection");
        this.transactionManager = Objects.requireNonNull(transactionManager, "transactionManager");
        this.readCommitted = connectionsDefaultToReadCommitted || readCommittedStatement == null
                || !(transactionManager instanceof DataSourceTransactionManager manager)
                ? null : new ReadCommittedStatement(new JdbcTemplate(manager.getDataSource()), readCommittedStatement);
        DefaultTransactionDefinition definition =
                new DefaultTransactionDefinition(TransactionDefinition.PROPAGATION_REQUIRED);
        definition.setIsolationLevel(connectionsDefaultToReadCommitted || readCommitted != null
                ? TransactionDefinition.ISOLATION_DEFAULT : TransactionDefinition.ISOLATION_READ_COMMITTED);
        definition.setName("idempotency");
        this.definition = definition;
        this.claimsDataSource = JPA_PRESENT ? EntityManagers.dataSourceOf(transactionManager) : null;
        if (claimsDataSource == null) {
            this.claimsBeside = null;
        } else {
            DataSourceTransactionManager claims = new DataSourceTransactionManager(claimsDataSource);
            if (transactionManager instanceof AbstractPlatformTransactionManager manager) {
                // bounded as the request's transactions are (spring.transaction.default-timeout), synchronized, rolled
                // back after a failed commit and listened to alike
                claims.setDefaultTimeout(manager.getDefaultTimeout());
                claims.setTransactionSynchronization(manager.getTransactionSynchronization());
                claims.setRollbackOnCommitFailure(manager.isRollbackOnCommitFailure());
                claims.setTransactionExecutionListeners(manager.getTransactionExecutionListeners());
            }
            this.claimsBeside = new SpringTransactions(claims, connectionsDefaultToReadCommitted, holdsNoConnection,
                    readCommittedStatement);
        }
    }

    /** The transaction manager the executions' transactions are run with. */
    public PlatformTransactionManager transactionManager() {
        return transactionManager;
    }

    @Override
    public void checkNoneOpen() {
        if (TransactionSynchronizationManager.isActualTransactionActive()) {
            // joining would let the outer transaction commit on its own schedule: before or after the answer
            throw alreadyActive();
        }
    }

    /**
     * The refusal of a transaction open on the thread. The hint names both callers: the startup checks catch most
     * misordered {@code @Idempotent} handlers, while a listener calling IdempotencyTemplate from a
     * {@code @Transactional} method meets this only at run time.
     */
    private static IllegalStateException alreadyActive() {
        return new Transactions.AlreadyActiveException("an idempotent execution must own its transaction, but one is"
                + " already active on this thread: call IdempotencyTemplate.execute outside any transaction (not"
                + " from a @Transactional method), and order @Idempotent outside @Transactional");
    }

    /**
     * Beside the EntityManager that open-in-view keeps open for the request, when JPA's transaction manager would run
     * the claim through it: in a transaction of the DataSource's own, on the connection that EntityManager holds
     * (Hibernate's; taken now if it holds none yet, and kept by it, as its first transaction would), bound to the
     * thread under the DataSource for the claim's statements only. JPA's transaction manager, given a pre-bound
     * EntityManager, flushes it at the commit and clears it at a rollback; this transaction does neither, and the
     * request still uses one connection. The transaction is not JPA's: a store that claimed through JPA would not
     * take part in it (the JDBC stores claim on the DataSource's connection). Anywhere else (no such EntityManager,
     * another JPA provider, a scope of Spring's bound to the thread) as {@link #begin()}, which a subclass's
     * {@code begin()} does not change for this path.
     */
    @Override
    public Transaction beginClaim() {
        checkNoneOpen();
        if (claimsBeside == null || TransactionSynchronizationManager.isSynchronizationActive()
                || TransactionSynchronizationManager.hasResource(claimsDataSource)) {
            return begin();
        }
        Connection connection;
        try {
            connection = EntityManagers.openInViewConnection(transactionManager);
        } catch (SQLException e) {
            throw new CannotCreateTransactionException("Could not get the JDBC connection of the request's"
                    + " EntityManager for the idempotency claim", e);
        }
        if (connection == null) {
            return begin();
        }
        ConnectionHolder holder = new ConnectionHolder(connection);
        TransactionSynchronizationManager.bindResource(claimsDataSource, holder);
        Transaction transaction;
        try {
            transaction = claimsBeside.begin();
        } catch (RuntimeException | Error e) {
            unbind(holder);
            throw e;
        }
        return new Transaction() {
            @Override
            public void commit(Runnable last) {
                try {
                    transaction.commit(last);
                } finally {
                    unbind(holder);
                }
            }

            @Override
            public void commit() {
                try {
                    transaction.commit();
                } finally {
                    unbind(holder);
                }
            }

            @Override
            public boolean isRollbackOnly() {
                return transaction.isRollbackOnly();
            }

            @Override
            public void rollback() {
                try {
                    transaction.rollback();
                } finally {
                    unbind(holder);
                }
            }

            @Override
            public void flush() {
                transaction.flush();
            }
        };
    }

    /**
     * Runs {@code work} with the EntityManagers that open-in-view bound to the thread (one per EntityManagerFactory)
     * unbound, and binds them again after: JPA's transaction manager would otherwise run the transactions of
     * {@code work} in it, flushing at their commit what the request's data binding changed on an entity before the
     * handler has run (or where it never runs), and clearing it at a rollback, which leaves the handler an entity
     * argument whose changes are not written. They get EntityManagers, and pool connections, of their own, as a
     * sweeper's do: entities they return are detached once they have ended.
     */
    @Override
    public <T> T apart(Supplier<T> work) {
        return JPA_PRESENT ? EntityManagers.apart(work) : work.get();
    }

    /**
     * Unbinds the claim's {@code holder} from the thread, if it is still bound there; the connection stays the
     * EntityManager's.
     */
    private void unbind(ConnectionHolder holder) {
        if (TransactionSynchronizationManager.getResource(claimsDataSource) == holder) {
            TransactionSynchronizationManager.unbindResource(claimsDataSource);
        }
    }

    @Override
    public Transaction begin() {
        checkNoneOpen();
        TransactionStatus status = transactionManager.getTransaction(definition);
        if (!status.isNewTransaction()) {
            // a transaction the thread's flags did not show — begun by a transaction manager that keeps no
            // synchronization (SYNCHRONIZATION_NEVER), which binds its connection without marking a transaction
            // active — was joined: the claim would commit or roll back with the caller's writes, after the execution
            // had reported it committed (and kept its answer in memory). Leave it as it was, and refuse as above
            IllegalStateException refused = alreadyActive();
            try {
                transactionManager.commit(status); // of a participation: commits nothing, only ends it
            } catch (RuntimeException e) {
                refused.addSuppressed(e);
            }
            throw refused;
        }
        if (readCommitted != null) {
            try {
                readCommitted.jdbc().execute(readCommitted.sql()); // on the connection the transaction bound
            } catch (RuntimeException | Error e) {
                // an Error too: left bound, the transaction would hold its connection and refuse every later request
                // on this thread as one already active
                try {
                    transactionManager.rollback(status);
                } catch (RuntimeException rollback) {
                    e.addSuppressed(rollback);
                }
                throw e;
            }
        }
        return new Transaction() {
            @Override
            public void commit(Runnable last) {
                if (!TransactionSynchronizationManager.isSynchronizationActive()) {
                    // no callback runs before the commit of a transaction without synchronization
                    last.run();
                    commit();
                    return;
                }
                LastBeforeCommit lastBeforeCommit = new LastBeforeCommit(last, transactionManager, status);
                TransactionSynchronizationManager.registerSynchronization(lastBeforeCommit);
                try {
                    commit();
                } catch (LastBeforeCommit.Refused refused) {
                    throw refused.getCause(); // rolled back by Spring, as the work's own failure
                } catch (LastBeforeCommit.MarkedRollbackOnly marked) {
                    throw new UnexpectedRollbackException("the idempotent execution's transaction was rolled back"
                            + " instead of committed: a callback before the commit marked it rollback-only");
                }
                if (!lastBeforeCommit.ran) {
                    // Spring rolls back, without a word, a transaction its status marks rollback-only
                    throw new UnexpectedRollbackException("the idempotent execution's transaction was rolled back"
                            + " instead of committed: it was marked rollback-only");
                }
            }

            @Override
            public void commit() {
                CompletionWatch completion = CompletionWatch.register();
                try {
                    transactionManager.commit(status);
                } catch (RuntimeException | Error e) {
                    if (!completion.committed() || e instanceof VirtualMachineError) {
                        // an error of the JVM itself (no memory left) is passed on as it is, committed or not
                        throw e;
                    }
                    // the database committed; what failed is a callback the application registered for after the
                    // commit (a TransactionSynchronization's afterCommit, which Spring passes on to the caller while
                    // it considers the transaction committed). The request's effects and its answer are kept, so the
                    // answer stands: reporting a failed commit would tell the client nothing was kept. So also for an
                    // error of the callback's own (a class it needs that cannot be loaded), which would otherwise reach
                    // the container as a bare 500 for a request whose answer every retry is replayed
                    log.log(System.Logger.Level.ERROR, "A transaction callback failed after the idempotent"
                            + " execution's transaction had committed; its effects and answer are kept", e);
                }
            }

            @Override
            public void flush() {
                if (status.isRollbackOnly()) {
                    // a write failed inside (a repository call the handler caught): the commit will roll back
                    // without flushing, as Spring does; flushing now would send the failed write again and fail the
                    // handler, whose answer must be sent as it returned it
                    return;
                }
                status.flush(); // JPA: EntityManager.flush(); plain JDBC: nothing to write
            }

            @Override
            public boolean isRollbackOnly() {
                // the status asks the transaction manager too: JPA's reads the flag its provider sets on the
                // EntityTransaction when a flush fails, which marks nothing Spring bound to the thread
                return !status.isCompleted() && status.isRollbackOnly();
            }

            @Override
            public void rollback() {
                if (!status.isCompleted()) {
                    transactionManager.rollback(status);
                }
            }
        };
    }

    /**
     * Only with no transaction open, no transaction scope without one either, and nothing bound to the thread that
     * holds a connection: an open transaction binds its connection (or EntityManager) there, and so does open-in-view
     * its EntityManager, whose connection — once it has one — the next transaction reuses. A scope with no transaction
     * ({@code @Transactional(propagation = SUPPORTS)} or {@code NOT_SUPPORTED}) binds every connection taken in it,
     * the read's too, until it ends: the read would leave its connection held for the rest of the caller's work,
     * where the claim's transaction, which suspends the scope, leaves none.
     */
    @Override
    public boolean mayReadApart() {
        if (TransactionSynchronizationManager.isActualTransactionActive()
                || TransactionSynchronizationManager.isSynchronizationActive()) {
            return false;
        }
        Map<Object, Object> bound = TransactionSynchronizationManager.getResourceMap();
        return bound.isEmpty() || bound.values().stream().allMatch(holdsNoConnection);
    }

    /**
     * Runs its work before the commit, after every callback registered before it to run then (of the same, lowest,
     * precedence, or of a higher one): Spring's {@code BEFORE_COMMIT} listeners of the request among them.
     * <p>
     * Should the commit end before it was asked of the database — a callback before it, or this work, failed — the
     * transaction's connection is rolled back here, before Spring lets go of it. Spring rolls back after most such
     * failures, but takes a {@code TransactionException} for a failure of the commit itself, and leaves it as it is:
     * the {@code TransactionTimedOutException} of a statement made after the transaction's timeout (an outbox row's
     * in a callback before this one), say. Restoring the connection's auto-commit would then commit the claim and the
     * work's writes without the answer, while the execution reports that nothing was kept.
     * <p>
     * This work's own {@code TransactionException} is passed to Spring as another exception ({@link Refused}), which
     * Spring rolls back through the transaction manager, as after any failure before the commit: a connection rolled
     * back beside JPA's transaction manager leaves Hibernate's transaction active, and Hibernate, asked to close a
     * session whose transaction is active, waits for its completion to do so, holding the session's connection for
     * ever.
     * <p>
     * A transaction a callback before it marked rollback-only (a {@code @Transactional} service it called, which
     * failed and whose failure it caught) is rolled back before the work runs. Spring reads that mark only after the
     * callbacks and, for a JDBC transaction manager, after asking the database to commit all the same: the request's
     * effects would be kept, and its answer with them, while Spring reported a rollback.
     */
    private static final class LastBeforeCommit implements TransactionSynchronization {

        /** Thrown for Spring to roll back a transaction marked rollback-only before the work. */
        static final class MarkedRollbackOnly extends RuntimeException {

            MarkedRollbackOnly() {
                super("marked rollback-only before the commit", null, false, false);
            }
        }

        /** The work's {@code TransactionException}, which Spring would not roll back after. */
        static final class Refused extends RuntimeException {

            Refused(TransactionException cause) {
                super(cause.getMessage(), cause, false, false);
            }

            @Override
            public synchronized TransactionException getCause() {
                return (TransactionException) super.getCause();
            }
        }

        private final Runnable work;
        private final PlatformTransactionManager transactionManager;
        private final TransactionStatus status;
        private boolean ran;
        /** Whether the work returned: only the commit itself comes after it. */
        private boolean done;

        LastBeforeCommit(Runnable work, PlatformTransactionManager transactionManager, TransactionStatus status) {
            this.work = work;
            this.transactionManager = transactionManager;
            this.status = status;
        }

        @Override
        public int getOrder() {
            return LOWEST_PRECEDENCE;
        }

        @Override
        public void beforeCommit(boolean readOnly) {
            ran = true;
            if (status.isRollbackOnly()) {
                throw new MarkedRollbackOnly();
            }
            try {
                work.run();
            } catch (TransactionException e) { // the TransactionTimedOutException of the answer's write, say
                throw new Refused(e);
            }
            done = true;
        }

        @Override
        public void afterCompletion(int status) {
            if (!done && status != STATUS_COMMITTED) {
                rollBackConnection();
            }
        }

        /**
         * Rolls back the transaction's connection, still bound to the thread: that of the transaction manager's
         * DataSource, or, for one that binds something else (JPA's EntityManager, Hibernate's Session), the connection
         * it binds beside it under its DataSource. No other connection bound to the thread is touched. A rollback
         * Spring has already made leaves nothing to roll back. The transaction of JPA's EntityManager (Hibernate's
         * Session) is rolled back through it first: left active, Hibernate would defer closing the session until a
         * completion that never comes, holding its connection for ever.
         */
        private void rollBackConnection() {
            Object own = transactionManager instanceof ResourceTransactionManager resources
                    ? TransactionSynchronizationManager.getResource(resources.getResourceFactory()) : null;
            if (JPA_PRESENT) {
                EntityManagers.rollBack(own);
            }
            if (!(own instanceof ConnectionHolder)) {
                DataSource dataSource = dataSourceBeside(transactionManager);
                own = dataSource == null ? null : TransactionSynchronizationManager.getResource(dataSource);
            }
            if (!(own instanceof ConnectionHolder holder)) {
                return;
            }
            try {
                Connection connection = holder.getConnection();
                if (!connection.getAutoCommit()) {
                    connection.rollback();
                }
            } catch (SQLException | RuntimeException e) {
                // a lost connection: the database ends its transaction with the session, and the pool does not
                // reuse it
                log.log(System.Logger.Level.WARNING, "Rolling back the idempotent execution's transaction, whose"
                        + " commit was never asked of the database, failed", e);
            }
        }

        /**
         * The DataSource of a transaction manager whose own resource is not a connection but which exposes the
         * connection of its transactions under its DataSource ({@code getDataSource()} of JPA's and Hibernate's), or
         * null.
         */
        private static DataSource dataSourceBeside(PlatformTransactionManager transactionManager) {
            try {
                return transactionManager.getClass().getMethod("getDataSource")
                        .invoke(transactionManager) instanceof DataSource dataSource ? dataSource : null;
            } catch (ReflectiveOperationException | RuntimeException e) {
                return null;
            }
        }
    }

    private static final boolean JPA_PRESENT = ClassUtils.isPresent("org.springframework.orm.jpa.EntityManagerHolder",
            SpringTransactions.class.getClassLoader()) && ClassUtils.isPresent("jakarta.persistence.EntityManager",
            SpringTransactions.class.getClassLoader());

    /** Learns how the transaction completed, from the callback Spring runs after every other one of its commit. */
    private static final class CompletionWatch implements TransactionSynchronization {

        private volatile boolean committed;

        static CompletionWatch register() {
            CompletionWatch watch = new CompletionWatch();
            if (TransactionSynchronizationManager.isSynchronizationActive()) {
                TransactionSynchronizationManager.registerSynchronization(watch);
            }
            // without synchronization no callback runs, so a failed commit is a commit that failed
            return watch;
        }

        @Override
        public void afterCompletion(int status) {
            committed = status == STATUS_COMMITTED;
        }

        boolean committed() {
            return committed;
        }
    }
}
