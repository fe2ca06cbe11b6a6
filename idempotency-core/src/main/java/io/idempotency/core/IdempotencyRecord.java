package io.idempotency.core;

import java.time.Instant;
import java.util.Objects;

/**
 * A row of the idempotency store as read back. Times come from the database clock.
 *
 * @param key          identity of the record
 * @param status       life-cycle state
 * @param requestHash  fingerprint of the request that claimed the key (hex SHA-256)
 * @param fencingToken token of the current claim; only its holder may complete, fail or release it
 * @param response     the stored answer; non-null exactly when {@code status} is {@link RecordStatus#SUCCEEDED}
 * @param createdAt    when the key was claimed
 * @param expiresAt    from when cleanup may delete the record (a lower bound: an existing record is honoured)
 * @param lockedUntil  end of the claim's lease, or {@code null} when the claim has no lease
 * @param leaseExpired whether the lease had run out when the record was read, judged by the database clock (never
 *                     the JVM's); false when the claim has no lease
 */
public record IdempotencyRecord(
        ScopedKey key,
        RecordStatus status,
        String requestHash,
        String fencingToken,
        StoredResponse response,
        Instant createdAt,
        Instant expiresAt,
        Instant lockedUntil,
        boolean leaseExpired) {

    public IdempotencyRecord {
        Objects.requireNonNull(key, "key");
        Objects.requireNonNull(status, "status");
        Objects.requireNonNull(requestHash, "requestHash");
        if ((status == RecordStatus.SUCCEEDED) != (response != null)) {
            throw new IllegalArgumentException("a response is stored exactly for SUCCEEDED records, status " + status);
        }
    }

    /** Without the fencing token, its holder's alone, and with the answer as {@link StoredResponse} shows it. */
    @Override
    public String toString() {
        return "IdempotencyRecord[key=" + key + ", status=" + status + ", requestHash=" + requestHash + ", response="
                + response + ", createdAt=" + createdAt + ", expiresAt=" + expiresAt + ", lockedUntil=" + lockedUntil
                + ", leaseExpired=" + leaseExpired + "]";
    }
}
