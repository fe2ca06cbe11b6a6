package io.idempotency.core;

/**
 * The life cycle of an idempotency record. Stored as its name, so operators can read it with SQL.
 *
 * <pre>
 *            claim                 complete
 *   (none) ─────────► PROCESSING ───────────► SUCCEEDED   (replayed on every later hit)
 *                        │   ▲
 *          fail          │   │ claim (takeover, by the same request)
 *                        ▼   │
 *                       FAILED
 *   release (or rollback of the claiming transaction): PROCESSING ──► (none)
 * </pre>
 */
public enum RecordStatus {
    /** A request holds the key and is executing. Duplicates wait, then get "in progress". */
    PROCESSING,
    /** The request finished with a storable answer. Duplicates get that answer replayed. */
    SUCCEEDED,
    /**
     * The request failed definitely. The same request may run again under the key; another request with the key is a
     * mismatch, as for any other record.
     */
    FAILED
}
