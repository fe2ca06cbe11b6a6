package io.idempotency.jdbc.flyway;

/** The idempotency table is not what the configuration needs; {@link #problem()} says how. */
public final class IdempotencySchemaException extends IllegalStateException {

    /** What is wrong with the table. */
    public enum Problem {
        /** It exists with the layout of the other cleanup mode (partitioned or not). */
        WRONG_LAYOUT,
        /** It exists, but lacks columns the store uses, has them of another type, or lacks the key the claim needs. */
        WRONG_SHAPE,
        /**
         * It is not in the connection's default schema, where the library creates it, but in one the search path
         * reaches later (another application's table, perhaps).
         */
        ELSEWHERE,
        /** It does not exist, and the library's migration is not the one to create it. */
        MISSING,
        /** It does not exist, although its migration history says it was created. */
        MISSING_DESPITE_HISTORY,
        /** The database is not PostgreSQL. */
        NOT_POSTGRESQL,
        /** The application's database role may not read, insert or update the table's records. */
        NOT_PERMITTED,
        /** It does not exist, and the application's database role may not create tables in its schema. */
        MAY_NOT_CREATE,
        /** Its migration gave up waiting for the lock another session holds on the migration history. */
        LOCKED
    }

    private final Problem problem;

    IdempotencySchemaException(Problem problem, String message) {
        super(message);
        this.problem = problem;
    }

    public Problem problem() {
        return problem;
    }
}
