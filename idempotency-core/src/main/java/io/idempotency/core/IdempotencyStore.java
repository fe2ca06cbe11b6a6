package io.idempotency.core;

import java.time.Duration;
import java.util.List;
import java.util.Optional;

/**
 * Storage of idempotency records: the few atomic primitives the {@link IdempotencyEngine} is built on.
 *
 * <p>Every method runs in the transaction the caller has open on the current thread (for the JDBC store: the
 * Spring-managed connection of that transaction), so a claim, the business writes and the stored response commit
 * or roll back together. A write called with no transaction open commits in one of its own before it returns: the
 * engine takes stale claims over, records a resolver's decision, and marks FAILED or releases an intent-first claim
 * after its work's transaction has ended, and the sweeper and the cleanup run outside any transaction.
 * A fencing token holds its claim until the claim ends or a takeover replaces the token, also once its lease has run
 * out (fencing is by the token, not by the clock), and a key never gets a token it had before.
 * Times (creation, expiry, leases) are the database's, taken when each statement runs — not when its transaction
 * began (a claim made in a transaction open for a while must not start its lease in the past), and never the JVM's:
 * every instance judges a lease by the same clock. A store cuts a retention or lease too long for its columns to the
 * longest they hold. A claim's bounded wait must not outlive its statement: a lock timeout the store sets for the
 * claim is restored before the claim returns, as the handler's statements run next on the same connection.
 * Implementations must be thread-safe.
 *
 * <p>Arbitration between concurrent requests is the database's: a unique index on (caller, scope, key), or a
 * database lock taken before the look-up. Never a "select, then insert" in the application, never a lock held in
 * one JVM. The contract every implementation must pass is {@code IdempotencyStoreContract} in the test kit.
 */
public interface IdempotencyStore {

    /**
     * Takes the key, or tells who has it, in one atomic step.
     *
     * <ul>
     *   <li>No record: inserts a PROCESSING record and returns {@link ClaimResult.Claimed}.</li>
     *   <li>A FAILED record of the same request (the same request hash): takes it over (new fencing token) and
     *       returns {@link ClaimResult.Claimed} with {@code failedBefore}. A FAILED record of another request is
     *       returned as {@link ClaimResult.Existing}, like any other record: the failed attempt may have reached a
     *       third party under the key, so the key stays with its request.</li>
     *   <li>An uncommitted claim by another transaction: waits up to {@link ClaimRequest#maxWait()} for it to end.
     *       If it commits, the committed record is returned as {@link ClaimResult.Existing}; if it rolls back, the
     *       key is claimed; if the wait runs out, {@link ClaimResult.Busy} is returned.</li>
     *   <li>A committed PROCESSING or SUCCEEDED record: returns it as {@link ClaimResult.Existing}, whether or not
     *       it is past its expiry (retention is a lower bound).</li>
     * </ul>
     *
     * @return never null
     */
    ClaimResult claim(ClaimRequest request);

    /**
     * Records the answer of the claim holding {@code fencingToken}: PROCESSING → SUCCEEDED.
     * The SUCCEEDED record keeps {@code fencingToken}, by which the engine, reading it back after a commit that failed,
     * tells its own answer from another attempt's.
     *
     * @return true if the record was completed; false if the token no longer holds the key
     */
    boolean complete(ScopedKey key, String fencingToken, StoredResponse response);

    /**
     * Marks the claim holding {@code fencingToken} as definitely failed (PROCESSING → FAILED), so that the same
     * request, sent again, runs again while the record still shows what happened.
     *
     * @return true if the record was marked; false if the token no longer holds the key
     */
    boolean fail(ScopedKey key, String fencingToken);

    /**
     * Deletes the PROCESSING record of the claim holding {@code fencingToken}, as if it had never been claimed.
     *
     * @return true if a record was deleted
     */
    boolean release(ScopedKey key, String fencingToken);

    /**
     * Extends the lease of the claim holding {@code fencingToken} to the database's now plus {@code lease}. Runs in a
     * transaction of its own when none is open.
     *
     * @return true if the claim is still held by this token and was extended
     */
    boolean renew(ScopedKey key, String fencingToken, Duration lease);

    /**
     * Takes over a PROCESSING claim whose lease has run out (by the database clock), if it is still held by
     * {@code expiredToken}: the record gets a new fencing token and a new lease, so that the former holder can no
     * longer complete, fail or release it. Of several concurrent takeovers at most one succeeds. Does not wait for a
     * claim another transaction is changing at that moment — its holder recording its result in a commit that outlasts
     * the lease, a renewal, another takeover — and does not take it over: a retry waits for a claim in flight no longer
     * than it is allowed to, and a sweeper does not stop at one.
     *
     * @return the new fencing token, or empty if the claim was not taken over (renewed, finished, taken by another, or
     *         being changed by another transaction)
     */
    Optional<String> takeOver(ScopedKey key, String expiredToken, Duration lease);

    /** At most {@code limit} PROCESSING records whose lease has run out by the database clock, oldest lease first. */
    List<IdempotencyRecord> findExpiredLeases(int limit);

    /**
     * The committed record for {@code key}, if any (expired or not). The engine also calls it with no transaction open,
     * to answer a retry it remembers from the completed record: it must then read what is committed without waiting
     * for a claim another transaction holds on the key.
     */
    Optional<IdempotencyRecord> find(ScopedKey key);

    /**
     * Deletes at most {@code limit} finished (SUCCEEDED or FAILED) records whose expiry has passed by the database
     * clock, and PROCESSING records without a lease whose expiry has passed, without waiting for rows that other
     * transactions hold. A PROCESSING record under a lease (an intent-first claim) is never deleted, however old: its
     * request may still be running, or its outcome is still to be resolved. One without a lease was claimed in its
     * request's transaction, which commits it only with its answer: committed without, it is no request's any more
     * (code of the application's own committed the request's connection), and nothing else would ever free its key.
     * A transaction the store opens for it
     * should run at READ COMMITTED whatever the pool's default: at a higher level, a row another cleaner deleted after
     * the statement's snapshot fails the delete instead of being skipped.
     *
     * @return how many records were deleted
     */
    int deleteExpired(int limit);
}
