package io.idempotency.core;

import java.time.Instant;
import java.util.Objects;

/**
 * Decides what became of a claim committed before its work ({@link IdempotencyMode#INTENT_FIRST}) whose lease ran
 * out while it was still PROCESSING: its holder crashed, hung or lost its connection, and nobody knows whether the
 * side effect happened. A stale claim is never left hanging: it is resolved when a retry of the request arrives, or
 * by the background sweeper when none does. The resolver is called by whoever has just taken the claim over, so it
 * is consulted once per stale claim, even with several instances. Implementations must be thread-safe; they may
 * call the third party (e.g. look the charge up by {@link StaleClaim#downstreamKey()}).
 */
@FunctionalInterface
public interface StaleClaimResolver {

    /**
     * What to do with the stale claim. Must not return null: a null answer is taken as a failure of the resolver, like
     * an exception (the claim stays PROCESSING, and is resolved again once the lease of whoever asked has run out).
     */
    Resolution resolve(StaleClaim claim);

    /**
     * The default: run the request again. Safe when the handler passes {@link IdempotencyContext#downstreamKey()} to
     * a third party that deduplicates on it, because the rerun then gets the first attempt's result from it.
     */
    StaleClaimResolver RERUN = claim -> Resolution.rerun();

    /**
     * A claim whose lease ran out.
     *
     * @param key             the record's identity
     * @param downstreamKey   the key the handler was given for calls to third parties
     * @param requestHash     fingerprint of the request that made the claim
     * @param createdAt       when the claim was made (database clock)
     * @param lockedUntil     when its lease ran out (database clock)
     * @param retryWaiting    true if a retry of the request is waiting for the decision, false for the sweeper
     */
    record StaleClaim(ScopedKey key, String downstreamKey, String requestHash, Instant createdAt, Instant lockedUntil,
                      boolean retryWaiting) {

        /** Without the downstream key, which is never logged: a resolver that logs the claim shows the rest. */
        @Override
        public String toString() {
            return "StaleClaim[key=" + key + ", requestHash=" + requestHash + ", createdAt=" + createdAt
                    + ", lockedUntil=" + lockedUntil + ", retryWaiting=" + retryWaiting + "]";
        }
    }

    /** A decision about a stale claim. */
    sealed interface Resolution {

        /** The work did not happen, or may safely happen again: the retry runs the request (the sweeper marks FAILED). */
        static Resolution rerun() {
            return new Rerun();
        }

        /** The work definitely failed: the claim is marked FAILED, after which its request, sent again, runs again. */
        static Resolution fail() {
            return new Fail();
        }

        /**
         * The work happened, with this answer: it is stored as SUCCEEDED and replayed. Its status must be one the
         * storage policy stores (by default not 5xx, 401, 407, 408, 409, 425, 429, 304 or 1xx): such an answer says
         * nothing final of the work, and is taken as a failure of the resolver (the claim stays PROCESSING, and is
         * resolved again once the lease of whoever asked has run out).
         */
        static Resolution complete(StoredResponse response) {
            return new Complete(Objects.requireNonNull(response, "response"));
        }
    }

    /** See {@link Resolution#rerun()}. */
    record Rerun() implements Resolution {
    }

    /** See {@link Resolution#fail()}. */
    record Fail() implements Resolution {
    }

    /** See {@link Resolution#complete(StoredResponse)}. */
    record Complete(StoredResponse response) implements Resolution {
    }
}
