package io.idempotency.core;

/**
 * The {@link StaleClaimResolver}'s answer about a stale intent-first claim decides nothing the library can keep: it
 * answered {@code null}, or complete with an answer that could not be replayed as it is (a status the storage policy
 * does not store, more headers than the server sends). The work did not run, and the claim stays {@code PROCESSING}
 * under this call's lease; once that lease has run out the resolver is asked again. Not a mistake in the work or its
 * message: a message listener gives its message back for a later redelivery, rather than dead-lettering it as it
 * would for the other {@link IllegalStateException}s the engine throws before the work runs.
 */
public class StaleClaimUndecidedException extends IllegalStateException {

    public StaleClaimUndecidedException(String message) {
        super(message);
    }
}
