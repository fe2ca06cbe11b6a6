package io.idempotency.core;

import java.util.Objects;

/** The outcome of {@link IdempotencyStore#claim}: exactly one of three cases. */
public sealed interface ClaimResult {

    /**
     * The caller now holds the key: a PROCESSING record exists in the caller's transaction (uncommitted until the
     * caller commits), and only {@code fencingToken} can complete, fail or release it.
     */
    record Claimed(String fencingToken) implements ClaimResult {
        public Claimed {
            Objects.requireNonNull(fencingToken, "fencingToken");
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
