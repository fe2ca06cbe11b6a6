package io.idempotency.core;

/** How a request's claim relates to its work. */
public enum IdempotencyMode {

    /**
     * The default: the claim, the handler's database writes and the stored answer commit in one transaction. A crash
     * or failure before the commit leaves nothing, so a retry runs cleanly. Right whenever every effect of the
     * request lives in the application's database.
     */
    ONE_TRANSACTION,

    /**
     * For work with side effects outside the database (a payment gateway, an e-mail): the claim — the intent — is
     * committed first, with a lease on the database clock; the handler runs (renewing the lease while it runs); then
     * the answer is recorded as SUCCEEDED together with the handler's local writes, or the claim is marked FAILED if
     * the handler declares a definite failure. An unknown outcome (a timeout, a crash) leaves the claim PROCESSING
     * until its lease runs out; then a {@link StaleClaimResolver} decides, and only then may the request run again.
     * The handler should pass {@link IdempotencyContext#downstreamKey()} to the third party, so that the third party
     * deduplicates too.
     */
    INTENT_FIRST
}
