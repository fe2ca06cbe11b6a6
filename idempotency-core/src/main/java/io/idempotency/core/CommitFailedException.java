package io.idempotency.core;

import java.sql.SQLException;

/**
 * The transaction holding a request's effects and its stored answer failed to commit (for example a deferred
 * constraint, a serialization failure or a lost connection), or was rolled back before its answer could be written
 * (InnoDB rolls a deadlock's victim back whole, its claim with it). The answer the handler produced must not be sent:
 * the client gets a 5xx and may retry. Nothing of the request was kept — unless the connection was lost while the
 * commit itself ran, or the commit failed without saying whether the database committed and the record could not be
 * read back to tell ({@link #outcomeUnknown()}): the database may then have committed without the application
 * hearing so.
 */
public class CommitFailedException extends RuntimeException {

    private final transient ScopedKey key;
    private final boolean outcomeUnknown;

    public CommitFailedException(ScopedKey key, Throwable cause) {
        this(key, cause, false);
    }

    /**
     * @param outcomeUnknown whether the database may have committed all the same
     */
    public CommitFailedException(ScopedKey key, Throwable cause, boolean outcomeUnknown) {
        super("the transaction for " + key + (outcomeUnknown ? " may not have committed" : " failed to commit"),
                cause);
        this.key = key;
        this.outcomeUnknown = outcomeUnknown;
    }

    public ScopedKey key() {
        return key;
    }

    /**
     * Whether the database may have committed all the same: the connection was lost while the commit ran, or the
     * commit failed without saying and the record could not be read back to tell. A retry then finds either the stored
     * answer or no trace of the request.
     */
    public boolean outcomeUnknown() {
        return outcomeUnknown;
    }

    /**
     * Whether the database had aborted the transaction before its answer was written: a statement in it had failed
     * (SQLSTATE 25P02, PostgreSQL's "current transaction is aborted"), and the code that ran it — the handler, a
     * callback before the commit — caught the failure and carried on. Nothing of the request was kept.
     */
    public boolean abortedBeforeTheAnswer() {
        for (Throwable cause = getCause(); cause != null; cause = cause.getCause() == cause ? null : cause.getCause()) {
            if (cause instanceof SQLException sql && "25P02".equals(sql.getSQLState())) {
                return true;
            }
        }
        return false;
    }

    /**
     * Whether the commit that failed with {@code failure} may have happened all the same. Not when the database itself
     * refused it (a deferred constraint, a serialization failure: an SQLSTATE outside class 08, "connection
     * exception"), nor when the failure names no database error at all: the transaction manager then rolled back
     * without asking the database to commit (a transaction marked rollback-only), or the database committed and what
     * failed came after it (an ORM's after-completion callback, which may fail on a statement of its own too). The
     * engine tells these apart from the record it reads back. Otherwise — the connection was lost, or the rollback
     * after the failure failed too, which hides the commit's own exception — the outcome is unknown. So it is when the
     * server ended the session during the commit (SQLSTATE {@code 57P01}–{@code 57P05}: an administrator's
     * {@code pg_terminate_backend}, a shutdown): PostgreSQL may have committed locally by then (it was waiting for a
     * synchronous standby, say), and the record read back may not show it yet.
     */
    static boolean mayHaveCommitted(Throwable failure) {
        boolean fromTheDatabase = false;
        for (Throwable cause = failure; cause != null; cause = cause.getCause() == cause ? null : cause.getCause()) {
            if (cause instanceof SQLException sql) {
                String state = sql.getSQLState();
                if (state != null && !state.startsWith("08") && !state.startsWith("57P")) {
                    return false;
                }
                fromTheDatabase = true;
            }
        }
        return fromTheDatabase;
    }
}
