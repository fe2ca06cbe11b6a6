package io.idempotency.core;

import java.util.function.Supplier;

/**
 * Opens the database transaction in which a claim, the handler's writes and the stored response commit together.
 * The Spring Boot starter implements it with the application's transaction manager, so the store and the business
 * code share one connection. Implementations open transactions at READ COMMITTED (see {@link IdempotencyEngine}).
 */
public interface Transactions {

    /**
     * The refusal of {@link #begin()} or {@link #checkNoneOpen()}: a transaction is already active on the current
     * thread, and an idempotent execution must own its transaction. Thrown so that callers can tell it from other
     * refusals and say what usually causes it.
     */
    class AlreadyActiveException extends IllegalStateException {

        private static final long serialVersionUID = 1L;

        public AlreadyActiveException(String message) {
            super(message);
        }
    }

    /** Opens a new transaction bound to the current thread. Fails if one is already active there. */
    Transaction begin();

    /**
     * Opens the transaction of an intent-first claim, which commits on its own (or, finding the key taken, is rolled
     * back) before the work's transaction begins, and holds nothing but the claim. Fails as {@link #begin()} does.
     * By default {@link #begin()}. An implementation whose transactions run inside a unit of work that stays open
     * across them — JPA's EntityManager kept open for the request — runs this one beside that unit, on its
     * connection, and leaves the unit as it found it: committed through it, the claim would also write what the unit
     * holds before the work has run (an entity the request's data binding changed); rolled back through it, it would
     * clear the unit, and an entity loaded for the request's arguments, no longer managed, would have the work's
     * changes to it never written.
     */
    default Transaction beginClaim() {
        return begin();
    }

    /**
     * Runs {@code work} — the stale claim resolver a retry asks, on the request's thread, before its request may run —
     * apart from a unit of work the request keeps open across its transactions (JPA's EntityManager kept open for the
     * request), so that the transactions {@code work} runs (its local writes) get units of their own, and neither
     * write what the request's unit holds (an entity its data binding changed) nor clear it. Called with no
     * transaction open. By default runs {@code work} as it is: an implementation of the application's own, or one
     * that wraps another, implements or passes it on where the request keeps such a unit open.
     */
    default <T> T apart(Supplier<T> work) {
        return work.get();
    }

    /**
     * Refuses, as {@link #begin()} does, when a transaction is open on the current thread. The engine calls it before
     * anything else, so that such a call is refused the same way whether its answer is kept in memory or not. Does
     * nothing by default ({@link #begin()} still refuses).
     */
    default void checkNoneOpen() {
    }

    /**
     * Whether a record may be read on a connection of its own, with no transaction (before the claim, and after a
     * commit that failed): not while a
     * transaction is open on the current thread (the read would run in it, where {@link #begin()} refuses to start),
     * nor while the thread holds what the next transaction would run on, such as an EntityManager kept open for the
     * request with its connection (the read would take a second connection where the claim takes none), nor where
     * the connection the read takes would stay bound to the thread after it (a transaction scope without a
     * transaction, whose claim would suspend it and leave nothing held). True by default.
     */
    default boolean mayReadApart() {
        return true;
    }

    /** One open transaction. Each method may be called once; {@link #rollback()} after completion does nothing. */
    interface Transaction {

        /** Commits; if the commit fails the transaction is rolled back and the failure is thrown. */
        void commit();

        /**
         * Runs {@code last} in the transaction, after everything else that runs before its commit — callbacks the
         * application registered for that moment (Spring's {@code BEFORE_COMMIT} listeners) included — then commits.
         * A statement such a callback made that failed, and whose failure it swallowed, leaves a PostgreSQL
         * transaction aborted, whose commit then rolls back without an error: the statements of {@code last} fail on
         * it instead, so that the commit is not taken for done. If {@code last} throws, its exception is thrown and
         * the transaction is not committed (the caller rolls it back, if it has not been). By default runs
         * {@code last}, then {@link #commit()}: right for transactions that run nothing of their own before their
         * commit.
         */
        default void commit(Runnable last) {
            last.run();
            commit();
        }

        /**
         * Whether the transaction can only roll back now: a write in it failed and whoever saw the failure marked it
         * so (Spring, as a {@code @Transactional} method that joined it threw; a JPA provider, as a flush failed). Its
         * commit would roll back. False by default.
         */
        default boolean isRollbackOnly() {
            return false;
        }

        /** Rolls back, unless the transaction has already ended. */
        void rollback();

        /**
         * Writes what the transaction holds back to the database now, not at the commit: an ORM's pending inserts
         * and updates (JPA flushes them at commit by default). Called when the handler returns, so that the errors
         * of its writes, such as a unique constraint, surface as the handler's errors. Does nothing by default.
         */
        default void flush() {
        }
    }
}
