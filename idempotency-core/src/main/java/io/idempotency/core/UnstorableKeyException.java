package io.idempotency.core;

/**
 * The database refused to store a claim's caller, scope or key as they are: a character its encoding lacks (a
 * PostgreSQL database not in UTF8), or more bytes than its column holds (one in {@code SQL_ASCII}, whose columns count
 * bytes). Nothing was claimed, and a claim of the same key fails alike every time: the request cannot be made
 * idempotent under that key, and retrying it will not help. Thrown by a store's claim, for its own statements only.
 */
public class UnstorableKeyException extends RuntimeException {

    private final transient ScopedKey key;
    private final String sqlState;

    /**
     * @param sqlState the SQLState of the database's refusal, as a log line may name it
     * @param cause    the database's refusal; its message may quote the key
     */
    public UnstorableKeyException(ScopedKey key, String sqlState, Throwable cause) {
        super("the database cannot store the claim's caller, scope or key as they are (is its encoding UTF8, and are"
                + " the key columns as wide as the library's script makes them?)", cause);
        this.key = key;
        this.sqlState = sqlState;
    }

    public ScopedKey key() {
        return key;
    }

    /** The SQLState of the database's refusal (22001, 22P05 or 22021 on PostgreSQL). */
    public String sqlState() {
        return sqlState;
    }
}
