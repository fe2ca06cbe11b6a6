package io.idempotency.core;

/**
 * The database refused to store a claim's caller, scope or key as they are: a character its encoding lacks (a
 * PostgreSQL database not in UTF8), or more bytes than its column holds (one in {@code SQL_ASCII}, whose columns count
 * bytes). Nothing was claimed, and a claim of the same key fails alike every time: the request cannot be made
 * idempotent under that key, and retrying it will not help. Thrown by a store's claim, for its own statements only.
 */
public class UnstorableKeyException extends RuntimeException {

    private final transient ScopedKey key;

    /** @param cause the database's refusal; its message may quote the key */
    public UnstorableKeyException(ScopedKey key, Throwable cause) {
        super("the database cannot store the claim's caller, scope or key as they are (is its encoding UTF8, and are"
                + " the key columns as wide as the library's script makes them?)", cause);
        this.key = key;
    }

    public ScopedKey key() {
        return key;
    }
}
