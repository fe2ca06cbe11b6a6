package io.idempotency.core;

import java.util.Objects;

/** The outcome of {@link IdempotencyStore#claim}: exactly one of three cases. */
public sealed interface ClaimResult {

    /**
     * The caller now holds the key: a PROCESSING record exists in the caller's transaction (uncommitted until the
     * caller commits), and only {@code fencingToken} can complete, fail or release it.
     *
     * @param failedBefore whether the claim took over a FAILED record of the same request: an earlier attempt may have
     *                     reached a third party under the key, so the key must not be released for any request
     */
    record Claimed(String fencingToken, boolean failedBefore) implements ClaimResult {
        public Claimed {
            Objects.requireNonNull(fencingToken, "fencingToken");
        }

        /** A claim of a key that had no record. */
        public Claimed(String fencingToken) {
            this(fencingToken, false);
        }
    }

    /** Another request holds or held the key; here is its committed record. The caller's transaction is still usable. */
    record Existing(IdempotencyRecord record) implements ClaimResult {
        public Existing {
            Objects.requireNonNull(record, "record");
        }
    }

    /**
     * Another transaction holds an uncommitted claim and did not finish within {@link ClaimRequest#maxWait()}.
     * The caller's transaction may be unusable afterwards (PostgreSQL aborts it) and must be rolled back.
     */
    record Busy() implements ClaimResult {
    }
}
