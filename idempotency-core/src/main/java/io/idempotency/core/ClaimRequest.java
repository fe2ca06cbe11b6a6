package io.idempotency.core;

import java.time.Duration;
import java.util.Objects;

/**
 * What a request asks of the store when it tries to take a key.
 *
 * @param key         the record identity
 * @param requestHash fingerprint of the request (hex SHA-256), kept to detect a key reused for another request
 * @param retention   how long the record is kept at least (its {@code expires_at} is the database's now plus this)
 * @param maxWait     how long to wait for a concurrent, uncommitted claim of the same key before answering
 *                    {@link ClaimResult.Busy}; must be positive
 * @param lease       for a claim that is committed before its work: how long it is held ({@code locked_until} is the
 *                    database's now plus this); {@code null} for a claim that commits with its work
 */
public record ClaimRequest(ScopedKey key, String requestHash, Duration retention, Duration maxWait, Duration lease) {

    /** A claim without a lease, committed together with its work. */
    public ClaimRequest(ScopedKey key, String requestHash, Duration retention, Duration maxWait) {
        this(key, requestHash, retention, maxWait, null);
    }

    public ClaimRequest {
        Objects.requireNonNull(key, "key");
        Objects.requireNonNull(requestHash, "requestHash");
        Objects.requireNonNull(retention, "retention");
        Objects.requireNonNull(maxWait, "maxWait");
        if (retention.isNegative() || retention.isZero()) {
            throw new IllegalArgumentException("retention must be positive: " + retention);
        }
        if (maxWait.isNegative() || maxWait.isZero()) {
            throw new IllegalArgumentException("maxWait must be positive: " + maxWait);
        }
        if (lease != null && (lease.isNegative() || lease.isZero())) {
            throw new IllegalArgumentException("lease must be positive: " + lease);
        }
    }
}
