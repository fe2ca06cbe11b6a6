package io.idempotency.testkit;

import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.IdempotencyRecord;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.core.RecordStatus;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StoredResponse;
import io.idempotency.core.Transactions;
import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Optional;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Everything an {@link IdempotencyStore} must do. A store's test extends this class and only says how to build
 * the store and its transactions, on a fresh, migrated database whose connection pool has at least
 * {@value #MIN_POOL_SIZE} connections, and whose text columns hold any Unicode character (UTF-8).
 */
public abstract class IdempotencyStoreContract {

    /** The concurrency tests hold this many transactions open at once. */
    public static final int MIN_POOL_SIZE = 20;

    private static final Duration DAY = Duration.ofDays(1);
    private static final Duration LONG_WAIT = Duration.ofSeconds(20);
    /**
     * A lease that must still be live when the test has claimed, committed and read it back (which a loaded machine
     * can take hundreds of milliseconds for), or made a second claim after it, and that then runs out while the test
     * waits for it.
     */
    private static final Duration SHORT_LEASE = Duration.ofMillis(1_500);
    private static final String HASH_A = "a".repeat(64);
    private static final String HASH_B = "b".repeat(64);

    /** The store under test; the same instance for every call of one test. */
    protected abstract IdempotencyStore store();

    /** Transactions on the connection the store uses. */
    protected abstract Transactions transactions();

    /**
     * Returns once a claim running on another thread is blocked by the claim this thread's transaction holds. This
     * default only gives it 200 ms; stores whose database shows lock waits should wait until it shows one, so that
     * a slow machine cannot turn the test into one where the duplicate arrives after the holder ended.
     */
    protected void awaitBlockedClaim() throws InterruptedException {
        Thread.sleep(200);
    }

    // ---------------------------------------------------------------- claim, complete, replay

    @Test
    void claimsAFreeKeyAsProcessing() {
        ScopedKey key = newKey();
        ClaimResult result = claimCommitted(key, HASH_A, DAY);

        assertThat(result).isInstanceOf(ClaimResult.Claimed.class);
        IdempotencyRecord record = store().find(key).orElseThrow();
        assertThat(record.status()).isEqualTo(RecordStatus.PROCESSING);
        assertThat(record.requestHash()).isEqualTo(HASH_A);
        assertThat(record.fencingToken()).isEqualTo(((ClaimResult.Claimed) result).fencingToken());
        assertThat(((ClaimResult.Claimed) result).failedBefore()).as("no earlier attempt").isFalse();
        assertThat(record.response()).isNull();
        assertThat(Duration.between(record.createdAt(), record.expiresAt())).isEqualTo(DAY);
    }

    @Test
    void aCompletedRecordIsReturnedByteForByte() {
        ScopedKey key = newKey();
        byte[] body = new byte[256];
        for (int i = 0; i < body.length; i++) {
            body[i] = (byte) i;
        }
        StoredResponse response = new StoredResponse(201, List.of(
                new StoredResponse.Header("Content-Type", "application/json;charset=UTF-8"),
                new StoredResponse.Header("Location", "/payments/42?x=a:b"),
                new StoredResponse.Header("ETag", "\"v1\"")), body);
        inTransaction(store -> store.complete(key, claimed(store.claim(claim(key, HASH_A, DAY))), response));

        ClaimResult again = claimCommitted(key, HASH_A, DAY);

        assertThat(again).isInstanceOf(ClaimResult.Existing.class);
        IdempotencyRecord record = ((ClaimResult.Existing) again).record();
        assertThat(record.status()).isEqualTo(RecordStatus.SUCCEEDED);
        assertThat(record.response()).isEqualTo(response);
        assertThat(record.response().body()).containsExactly(body);
        assertThat(store().find(key).orElseThrow().response()).isEqualTo(response);
    }

    @Test
    void aCommittedClaimIsReportedWithItsFingerprint() {
        ScopedKey key = newKey();
        claimCommitted(key, HASH_A, DAY);

        ClaimResult other = claimCommitted(key, HASH_B, DAY);

        assertThat(other).isInstanceOf(ClaimResult.Existing.class);
        IdempotencyRecord record = ((ClaimResult.Existing) other).record();
        assertThat(record.status()).isEqualTo(RecordStatus.PROCESSING);
        assertThat(record.requestHash()).isEqualTo(HASH_A);
    }

    @Test
    void keysAreSeparatedByCallerAndScope() {
        String key = UUID.randomUUID().toString();
        List<ScopedKey> keys = List.of(new ScopedKey("", "POST /a", key), new ScopedKey("alice", "POST /a", key),
                new ScopedKey("bob", "POST /a", key), new ScopedKey("alice", "POST /b", key));
        for (ScopedKey scoped : keys) {
            assertThat(claimCommitted(scoped, HASH_A, DAY))
                    .as("claim of %s", scoped).isInstanceOf(ClaimResult.Claimed.class);
        }
    }

    /**
     * A look-up finds the record of its own caller and scope only: the engine answers a retry, and the sweeper judges
     * a stale claim, with what it finds, and a record of another caller or operation under the same key is not theirs.
     */
    @Test
    void findTellsRecordsApartByCallerAndScope() {
        String key = UUID.randomUUID().toString();
        List<ScopedKey> keys = List.of(new ScopedKey("alice", "POST /a", key), new ScopedKey("bob", "POST /a", key),
                new ScopedKey("alice", "POST /b", key));
        List<String> tokens = new ArrayList<>();
        for (ScopedKey scoped : keys) {
            tokens.add(claimed(claimCommitted(scoped, HASH_A, DAY)));
        }

        for (int i = 0; i < keys.size(); i++) {
            assertThat(store().find(keys.get(i)).orElseThrow().fencingToken()).as("the record of %s", keys.get(i))
                    .isEqualTo(tokens.get(i));
        }
        assertThat(store().find(new ScopedKey("bob", "POST /b", key))).as("no record of bob's POST /b").isEmpty();
    }

    /**
     * Callers, scopes and keys compare byte for byte: ones that differ only in case or in trailing spaces belong to
     * other callers, other operations and other requests.
     */
    @Test
    void callersScopesAndKeysCompareExactly() {
        ScopedKey key = newKey();
        assertThat(claimCommitted(key, HASH_A, DAY)).isInstanceOf(ClaimResult.Claimed.class);
        for (ScopedKey other : List.of(new ScopedKey(key.caller().toUpperCase(), key.scope(), key.key()),
                new ScopedKey(key.caller() + " ", key.scope(), key.key()),
                new ScopedKey(key.caller(), key.scope().toLowerCase(), key.key()),
                new ScopedKey(key.caller(), key.scope() + " ", key.key()),
                new ScopedKey(key.caller(), key.scope(), key.key().toUpperCase()),
                new ScopedKey(key.caller(), key.scope(), key.key() + " "))) {
            assertThat(claimCommitted(other, HASH_A, DAY)).as("claim of %s", other)
                    .isInstanceOf(ClaimResult.Claimed.class);
        }
    }

    /**
     * Callers, scopes and keys that only look alike, or that a collation folding accents or letter forms would weigh
     * alike, are others too: an accented letter and its bare one, a letter composed in one character and the same with
     * a combining accent, "ß" and "ss", and two emoji, which a collation may weigh alike as characters beyond the Basic
     * Multilingual Plane.
     */
    @Test
    void callersScopesAndKeysThatOnlyLookAlikeAreOthers() {
        String key = UUID.randomUUID().toString();
        List<String> lookAlikes = List.of("e", "\u00e9", "e\u0301", "ss", "\u00df", "\ud83d\ude00", "\ud83d\ude01");
        for (String text : lookAlikes) {
            for (ScopedKey scoped : List.of(new ScopedKey("caller-" + text, "POST /a", key),
                    new ScopedKey("alice", "POST /" + text, key), new ScopedKey("alice", "POST /a", key + text))) {
                assertThat(claimCommitted(scoped, HASH_A, DAY)).as("claim of %s", scoped)
                        .isInstanceOf(ClaimResult.Claimed.class);
            }
        }
    }

    /**
     * Callers, scopes and keys of the longest length (255 characters, as Java counts them: an emoji counts as two), in
     * characters of two, three and four bytes in UTF-8, are kept whole, and so is an answer with a header given twice
     * (a page's {@code Link} headers) and one outside Latin-1 (a file name): each value in its order. A key that
     * differs from another in its last character only is another key, and the records come back, from a claim, a
     * look-up and the sweeper's look-up alike, under the very key they were claimed with.
     */
    @Test
    void theLongestCallersScopesAndKeysInAnyCharactersAndRepeatedHeadersAreKeptWhole() throws InterruptedException {
        String emoji = "\ud83d\ude00";
        String caller = "\u20ac".repeat(ScopedKey.MAX_LENGTH - 2) + emoji;
        String scope = "POST /" + "\u00e9".repeat(ScopedKey.MAX_LENGTH - 8) + emoji;
        String prefix = UUID.randomUUID() + "-" + emoji + "\u00fc".repeat(ScopedKey.MAX_LENGTH - 40);
        ScopedKey key = new ScopedKey(caller, scope, prefix + "a");
        ScopedKey twin = new ScopedKey(caller, scope, prefix + "b");
        for (String part : List.of(key.caller(), key.scope(), key.key(), twin.key())) {
            assertThat(part.length()).as("a part of the longest length").isEqualTo(ScopedKey.MAX_LENGTH);
        }
        StoredResponse response = new StoredResponse(200, List.of(
                new StoredResponse.Header("Link", "</payments?page=3>; rel=\"next\""),
                new StoredResponse.Header("Content-Type", "application/json"),
                new StoredResponse.Header("Link", "</payments?page=1>; rel=\"prev\""),
                new StoredResponse.Header("Content-Disposition", "attachment; filename=\"re\u00e7u-\u20ac-" + emoji
                        + ".json\"")), "[]".getBytes(StandardCharsets.UTF_8));

        inTransaction(store -> store.complete(key, claimed(store.claim(claim(key, HASH_A, DAY))), response));
        String twinToken = claimedWithLease(twin, Duration.ofMillis(1));
        Thread.sleep(50); // past the twin's lease

        ClaimResult again = claimCommitted(key, HASH_A, DAY);
        assertThat(again).isInstanceOf(ClaimResult.Existing.class);
        IdempotencyRecord replayed = ((ClaimResult.Existing) again).record();
        assertThat(replayed.key()).as("the key of the record a claim returns").isEqualTo(key);
        assertThat(replayed.response()).as("the headers in their order, each value whole").isEqualTo(response);
        IdempotencyRecord found = store().find(key).orElseThrow();
        assertThat(found.key()).as("the key of the record a look-up returns").isEqualTo(key);
        assertThat(found.response()).isEqualTo(response);
        IdempotencyRecord other = store().find(twin).orElseThrow();
        assertThat(other.status()).as("the key that differs in its last character").isEqualTo(RecordStatus.PROCESSING);
        assertThat(other.fencingToken()).isEqualTo(twinToken);
        assertThat(store().findExpiredLeases(1000)).as("the sweeper's look-up").extracting(IdempotencyRecord::key)
                .contains(twin);
    }

    /**
     * A completed record keeps the fencing token of the claim that completed it: after a commit that failed, the engine
     * reads the record back and takes the answer for its own only when its token is there, as another attempt may have
     * completed the key meanwhile. So also for a claim a takeover completed, whose token is the takeover's.
     */
    @Test
    void aCompletedRecordKeepsTheFencingTokenThatCompletedIt() throws InterruptedException {
        ScopedKey key = newKey();
        String token = claimed(claimCommitted(key, HASH_A, DAY));
        StoredResponse response = new StoredResponse(201, List.of(), "paid".getBytes(StandardCharsets.UTF_8));
        assertThat(holds(store -> store.complete(key, token, response))).isTrue();

        assertThat(store().find(key).orElseThrow().fencingToken()).as("the token of the completing claim")
                .isEqualTo(token);
        ClaimResult retry = claimCommitted(key, HASH_A, DAY);
        assertThat(retry).isInstanceOf(ClaimResult.Existing.class);
        assertThat(((ClaimResult.Existing) retry).record().fencingToken()).as("as a claim sees the record")
                .isEqualTo(token);

        ScopedKey stale = newKey();
        String former = claimedWithLease(stale, Duration.ofMillis(1));
        Thread.sleep(50); // past the lease
        Optional<String> takeover = store().takeOver(stale, former, Duration.ofSeconds(30));
        assertThat(takeover).isPresent();
        assertThat(holds(store -> store.complete(stale, takeover.get(), response))).isTrue();
        assertThat(store().find(stale).orElseThrow().fencingToken()).as("the token of the takeover that completed it")
                .isEqualTo(takeover.get());
    }

    // ---------------------------------------------------------------- release, rollback, fencing

    @Test
    void aRolledBackClaimLeavesNothing() {
        ScopedKey key = newKey();
        Transactions.Transaction transaction = transactions().begin();
        assertThat(store().claim(claim(key, HASH_A, DAY))).isInstanceOf(ClaimResult.Claimed.class);
        transaction.rollback();

        assertThat(store().find(key)).isEmpty();
        assertThat(claimCommitted(key, HASH_B, DAY)).isInstanceOf(ClaimResult.Claimed.class);
    }

    @Test
    void releaseFreesTheKey() {
        ScopedKey key = newKey();
        String token = claimed(claimCommitted(key, HASH_A, DAY));

        assertThat(holds(store -> store.release(key, token))).isTrue();

        assertThat(store().find(key)).isEmpty();
        assertThat(claimCommitted(key, HASH_B, DAY)).isInstanceOf(ClaimResult.Claimed.class);
    }

    @Test
    void onlyTheHolderOfTheFencingTokenMayFinishAClaim() {
        ScopedKey key = newKey();
        String token = claimed(claimCommitted(key, HASH_A, DAY));
        String stranger = UUID.randomUUID().toString();
        StoredResponse response = new StoredResponse(200, List.of(), "late".getBytes(StandardCharsets.UTF_8));

        assertThat(holds(store -> store.complete(key, stranger, response))).isFalse();
        assertThat(holds(store -> store.fail(key, stranger))).isFalse();
        assertThat(holds(store -> store.release(key, stranger))).isFalse();
        IdempotencyRecord record = store().find(key).orElseThrow();
        assertThat(record.status()).isEqualTo(RecordStatus.PROCESSING);
        assertThat(record.fencingToken()).isEqualTo(token);

        assertThat(holds(store -> store.complete(key, token, response))).isTrue();
        assertThat(holds(store -> store.complete(key, token, response)))
                .as("a completed record cannot be completed again").isFalse();
        assertThat(holds(store -> store.release(key, token)))
                .as("a completed record cannot be released").isFalse();
        assertThat(store().find(key).orElseThrow().status()).isEqualTo(RecordStatus.SUCCEEDED);
    }

    /**
     * A completed record is never marked FAILED, even by its own holder's token: the stored answer would be lost, and
     * the request's retry (a FAILED record of its request is taken over) would run the request a second time.
     */
    @Test
    void aCompletedRecordCannotBeFailed() {
        ScopedKey key = newKey();
        String token = claimed(claimCommitted(key, HASH_A, DAY));
        StoredResponse response = new StoredResponse(201, List.of(), "paid".getBytes(StandardCharsets.UTF_8));
        assertThat(holds(store -> store.complete(key, token, response))).isTrue();

        assertThat(holds(store -> store.fail(key, token))).as("a completed record cannot be failed").isFalse();

        IdempotencyRecord record = store().find(key).orElseThrow();
        assertThat(record.status()).isEqualTo(RecordStatus.SUCCEEDED);
        assertThat(record.response()).isEqualTo(response);
        ClaimResult retry = claimCommitted(key, HASH_A, DAY);
        assertThat(retry).as("the retry is answered with the stored answer").isInstanceOf(ClaimResult.Existing.class);
        assertThat(((ClaimResult.Existing) retry).record().response()).isEqualTo(response);
    }

    @Test
    void aFailedRecordIsTakenOverByItsRequestSentAgain() {
        ScopedKey key = newKey();
        String first = claimed(claimCommitted(key, HASH_A, DAY));
        assertThat(holds(store -> store.fail(key, first))).isTrue();
        assertThat(store().find(key).orElseThrow().status()).isEqualTo(RecordStatus.FAILED);

        ClaimResult retry = claimCommitted(key, HASH_A, DAY);

        String second = claimed(retry);
        assertThat(second).isNotEqualTo(first);
        // the engine must know: the failed attempt may have reached a third party, so the key is never released
        assertThat(((ClaimResult.Claimed) retry).failedBefore()).as("a claim that took a FAILED record over says so")
                .isTrue();
        IdempotencyRecord record = store().find(key).orElseThrow();
        assertThat(record.status()).isEqualTo(RecordStatus.PROCESSING);
        assertThat(record.requestHash()).isEqualTo(HASH_A);
        assertThat(holds(store -> store.complete(key, first, new StoredResponse(200, List.of(), null))))
                .as("the old token lost the key").isFalse();
    }

    @Test
    void aFailedRecordIsNotTakenOverByAnotherRequest() {
        // the failed attempt may have reached a third party under the key: another request must not run under it
        ScopedKey key = newKey();
        String first = claimed(claimCommitted(key, HASH_A, DAY));
        assertThat(holds(store -> store.fail(key, first))).isTrue();

        ClaimResult other = claimCommitted(key, HASH_B, DAY);

        assertThat(other).isInstanceOf(ClaimResult.Existing.class);
        IdempotencyRecord seen = ((ClaimResult.Existing) other).record();
        assertThat(seen.status()).isEqualTo(RecordStatus.FAILED);
        assertThat(seen.requestHash()).isEqualTo(HASH_A);
        IdempotencyRecord record = store().find(key).orElseThrow();
        assertThat(record.status()).isEqualTo(RecordStatus.FAILED);
        assertThat(record.requestHash()).isEqualTo(HASH_A);
        assertThat(record.fencingToken()).isEqualTo(first);
    }

    /**
     * A key never gets a fencing token it had before: not after its claim was released, rolled back, taken over when
     * stale, or taken over when FAILED, nor after such a takeover was rolled back. The engine tells its own claim by
     * its token (a commit that failed, read back), and a token given again would make another attempt's answer look
     * like its own, or let a former holder finish a later claim.
     */
    @Test
    void aKeyNeverGetsAFencingTokenItHadBefore() throws InterruptedException {
        ScopedKey key = newKey();
        List<String> tokens = new ArrayList<>();
        String released = claimed(claimCommitted(key, HASH_A, DAY));
        tokens.add(released);
        assertThat(holds(store -> store.release(key, released))).isTrue();

        tokens.add(claimedAndRolledBack(key)); // the key was free

        String stale = claimedWithLease(key, Duration.ofMillis(1));
        tokens.add(stale);
        Thread.sleep(50); // past the lease
        Optional<String> takeover = store().takeOver(key, stale, Duration.ofSeconds(30));
        assertThat(takeover).as("the stale claim taken over").isPresent();
        tokens.add(takeover.get());
        assertThat(holds(store -> store.fail(key, takeover.get()))).isTrue();

        tokens.add(claimedAndRolledBack(key)); // took the FAILED record over

        ClaimResult retry = claimCommitted(key, HASH_A, DAY);
        tokens.add(claimed(retry));
        assertThat(((ClaimResult.Claimed) retry).failedBefore()).as("took the FAILED record over").isTrue();
        assertThat(store().find(key).orElseThrow().fencingToken()).isEqualTo(tokens.get(tokens.size() - 1));

        assertThat(tokens).as("the tokens the key got, one after the other").doesNotHaveDuplicates();
    }

    /**
     * Completing, failing and releasing a claim with no transaction open commit on their own before they return: the
     * engine records a resolver's decision, and marks FAILED or releases an intent-first claim, after its work's
     * transaction has ended. Seen from another connection, and by the claims that follow.
     */
    @Test
    void completeFailAndReleaseWithNoTransactionOpenCommitOnTheirOwn() throws Exception {
        ScopedKey completed = newKey();
        String completing = claimedWithLease(completed, Duration.ofSeconds(30));
        ScopedKey failed = newKey();
        String failing = claimedWithLease(failed, Duration.ofSeconds(30));
        ScopedKey released = newKey();
        String releasing = claimedWithLease(released, Duration.ofSeconds(30));
        StoredResponse response = new StoredResponse(201, List.of(), "decided".getBytes(StandardCharsets.UTF_8));

        assertThat(store().complete(completed, completing, response)).isTrue();
        assertThat(store().fail(failed, failing)).isTrue();
        assertThat(store().release(released, releasing)).isTrue();

        IdempotencyRecord seen = readWithNoTransaction(completed).orElseThrow();
        assertThat(seen.status()).as("completed, seen from another connection").isEqualTo(RecordStatus.SUCCEEDED);
        assertThat(seen.response()).isEqualTo(response);
        assertThat(readWithNoTransaction(failed).orElseThrow().status()).as("failed, seen from another connection")
                .isEqualTo(RecordStatus.FAILED);
        assertThat(readWithNoTransaction(released)).as("released, seen from another connection").isEmpty();

        ClaimResult replay = claimCommitted(completed, HASH_A, DAY);
        assertThat(replay).isInstanceOf(ClaimResult.Existing.class);
        assertThat(((ClaimResult.Existing) replay).record().response()).isEqualTo(response);
        ClaimResult rerun = claimCommitted(failed, HASH_A, DAY);
        claimed(rerun);
        assertThat(((ClaimResult.Claimed) rerun).failedBefore()).as("the FAILED mark was kept").isTrue();
        ClaimResult fresh = claimCommitted(released, HASH_B, DAY);
        claimed(fresh);
        assertThat(((ClaimResult.Claimed) fresh).failedBefore()).as("a key freed by the release").isFalse();
    }

    // ---------------------------------------------------------------- expiry

    @Test
    void anExpiredRecordIsHonouredUntilItIsDeleted() throws InterruptedException {
        ScopedKey key = newKey();
        StoredResponse response = new StoredResponse(201, List.of(), "done".getBytes(StandardCharsets.UTF_8));
        inTransaction(store -> store.complete(key,
                claimed(store.claim(claim(key, HASH_A, Duration.ofMillis(1)))), response));
        Thread.sleep(50);

        ClaimResult again = claimCommitted(key, HASH_A, DAY);

        assertThat(again).isInstanceOf(ClaimResult.Existing.class);
        assertThat(((ClaimResult.Existing) again).record().response()).isEqualTo(response);
    }

    /**
     * Expiry lets cleanup delete a record, and does nothing else: until then a record past it, whatever its status, is
     * its own request's and is never handed to a request with another fingerprint (not a claim without a lease, not one
     * whose lease ran out too), and a FAILED one past it is still taken over by its request sent again, which is told
     * that an attempt ran before (it may have reached a third party under the key, which is then never released).
     */
    @Test
    void anExpiredRecordIsStillItsRequestsAndAFailedOneIsTakenOverAsFailed() throws InterruptedException {
        Duration instant = Duration.ofMillis(1);
        StoredResponse response = new StoredResponse(201, List.of(), "done".getBytes(StandardCharsets.UTF_8));
        ScopedKey succeeded = newKey();
        inTransaction(store -> store.complete(succeeded, claimed(store.claim(claim(succeeded, HASH_A, instant))),
                response));
        ScopedKey failed = newKey();
        inTransaction(store -> store.fail(failed, claimed(store.claim(claim(failed, HASH_A, instant)))));
        ScopedKey processing = newKey();
        claimed(claimCommitted(processing, HASH_A, instant));
        ScopedKey leaseOver = newKey();
        claimed(inTransaction(store -> store.claim(new ClaimRequest(leaseOver, HASH_A, instant, LONG_WAIT, instant))));
        List<ScopedKey> keys = List.of(succeeded, failed, processing, leaseOver);
        List<IdempotencyRecord> before = new ArrayList<>();
        for (ScopedKey key : keys) {
            before.add(store().find(key).orElseThrow());
        }
        Thread.sleep(50); // past the retention of a millisecond, and the lease

        for (int i = 0; i < keys.size(); i++) {
            IdempotencyRecord record = before.get(i);
            ClaimResult other = claimCommitted(keys.get(i), HASH_B, DAY);
            assertThat(other).as("another request with the expired %s record's key", record.status())
                    .isInstanceOf(ClaimResult.Existing.class);
            assertThat(((ClaimResult.Existing) other).record().requestHash()).isEqualTo(HASH_A);
            IdempotencyRecord after = store().find(keys.get(i)).orElseThrow();
            assertThat(after.status()).as("the expired %s record, unchanged", record.status())
                    .isEqualTo(record.status());
            assertThat(after.requestHash()).isEqualTo(HASH_A);
            assertThat(after.fencingToken()).isEqualTo(record.fencingToken());
            assertThat(after.expiresAt()).isEqualTo(record.expiresAt());
        }

        ClaimResult retry = claimCommitted(failed, HASH_A, DAY);
        assertThat(claimed(retry)).isNotEqualTo(before.get(1).fencingToken());
        assertThat(((ClaimResult.Claimed) retry).failedBefore()).as("an expired FAILED record taken over says so")
                .isTrue();
    }

    /**
     * Cleanup removes finished records past their expiry, and claims without a lease past theirs: such a claim is made
     * with its work's transaction and seen by others only once committed with its answer, so one committed without
     * (its connection committed by the application's own code) is no request's any more, and no resolver decides it.
     * A claim with a lease (intent-first) is left to its resolver, its lease over or not.
     */
    @Test
    void deleteExpiredRemovesFinishedRecordsAndClaimsWithoutALeasePastTheirExpiryOnly() throws InterruptedException {
        while (inTransaction(store -> store.deleteExpired(1000)) > 0) {
            // start from a table without expired records left by other tests
        }
        StoredResponse response = new StoredResponse(200, List.of(), null);
        List<ScopedKey> expired = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            ScopedKey key = newKey();
            expired.add(key);
            inTransaction(store -> store.complete(key,
                    claimed(store.claim(claim(key, HASH_A, Duration.ofMillis(1)))), response));
        }
        ScopedKey failed = newKey();
        inTransaction(store -> store.fail(failed, claimed(store.claim(claim(failed, HASH_A, Duration.ofMillis(1))))));
        ScopedKey leaseless = newKey();
        inTransaction(store -> store.claim(claim(leaseless, HASH_A, Duration.ofMillis(1))));
        ScopedKey leaseOver = newKey();
        inTransaction(store -> store.claim(new ClaimRequest(leaseOver, HASH_A, Duration.ofMillis(1), LONG_WAIT,
                Duration.ofMillis(1))));
        ScopedKey leaseLive = newKey();
        inTransaction(store -> store.claim(new ClaimRequest(leaseLive, HASH_A, Duration.ofMillis(1), LONG_WAIT, DAY)));
        ScopedKey live = newKey();
        inTransaction(store -> store.complete(live, claimed(store.claim(claim(live, HASH_A, DAY))), response));
        Thread.sleep(50);

        int firstBatch = inTransaction(store -> store.deleteExpired(2));
        int rest = inTransaction(store -> store.deleteExpired(100));

        assertThat(firstBatch).as("the batch limit holds").isEqualTo(2);
        assertThat(rest).as("the other expired SUCCEEDED and FAILED records, and the claim without a lease")
                .isEqualTo(3);
        for (ScopedKey key : expired) {
            assertThat(store().find(key)).isEmpty();
        }
        assertThat(store().find(failed)).isEmpty();
        assertThat(store().find(leaseless)).as("a claim committed without a lease or an answer").isEmpty();
        assertThat(store().find(leaseOver)).as("a claim whose lease ran out is its resolver's").isPresent();
        assertThat(store().find(leaseLive)).as("a claim under a live lease is its holder's").isPresent();
        assertThat(store().find(live)).as("a record within its retention stays").isPresent();
    }

    /**
     * Cleanup deletes an expired record only, not the records of other callers or operations that share its key: those
     * may be within their retention, or still being worked on.
     */
    @Test
    void deleteExpiredLeavesTheRecordsOfOtherCallersAndScopesUnderTheSameKey() throws InterruptedException {
        String key = UUID.randomUUID().toString();
        ScopedKey expired = new ScopedKey("alice", "POST /a", key);
        ScopedKey otherScope = new ScopedKey("alice", "POST /b", key);
        ScopedKey otherCaller = new ScopedKey("bob", "POST /a", key);
        ScopedKey processing = new ScopedKey("alice", "POST /c", key);
        StoredResponse response = new StoredResponse(200, List.of(), null);
        inTransaction(store -> store.complete(expired,
                claimed(store.claim(claim(expired, HASH_A, Duration.ofMillis(1)))), response));
        for (ScopedKey live : List.of(otherScope, otherCaller)) {
            inTransaction(store -> store.complete(live, claimed(store.claim(claim(live, HASH_A, DAY))), response));
        }
        claimed(claimCommitted(processing, HASH_A, DAY));
        Thread.sleep(50); // past the retention of a millisecond

        while (inTransaction(store -> store.deleteExpired(1000)) > 0) {
            // every expired record, this test's and those other tests left
        }

        assertThat(store().find(expired)).as("the expired record").isEmpty();
        assertThat(store().find(otherScope)).as("another operation's record under the key").isPresent();
        assertThat(store().find(otherCaller)).as("another caller's record under the key").isPresent();
        assertThat(store().find(processing)).as("a claim being worked on under the key").isPresent();
    }

    /**
     * A batch of one, the smallest a cleaner may run with, deletes one expired record at a time, and an expired claim
     * still PROCESSING (older than the others here) never takes a place in a batch: a batch filled with such claims
     * would delete nothing, and the cleaner, taking the short batch for the end, would stop with finished records
     * left. A batch of none is refused, as it would never delete anything.
     */
    @Test
    void deleteExpiredInBatchesOfOneDeletesOneRecordAtATime() throws InterruptedException {
        while (inTransaction(store -> store.deleteExpired(1000)) > 0) {
            // start from a table without expired records left by other tests
        }
        ScopedKey processing = newKey();
        // claimed first, with the same retention: it expires before the finished records below (and its lease too)
        inTransaction(store -> store.claim(new ClaimRequest(processing, HASH_A, Duration.ofMillis(1), LONG_WAIT,
                Duration.ofMillis(1))));
        StoredResponse response = new StoredResponse(200, List.of(), null);
        List<ScopedKey> expired = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            ScopedKey key = newKey();
            expired.add(key);
            inTransaction(store -> store.complete(key,
                    claimed(store.claim(claim(key, HASH_A, Duration.ofMillis(1)))), response));
        }
        Thread.sleep(50); // past the retention of a millisecond

        int first = inTransaction(store -> store.deleteExpired(1));
        int second = inTransaction(store -> store.deleteExpired(1));
        int third = inTransaction(store -> store.deleteExpired(1));

        assertThat(first).as("the first batch of one").isEqualTo(1);
        assertThat(second).as("the second batch of one").isEqualTo(1);
        assertThat(third).as("nothing expired is left").isZero();
        for (ScopedKey key : expired) {
            assertThat(store().find(key)).isEmpty();
        }
        assertThat(store().find(processing)).as("an unfinished claim with a lease is its resolver's").isPresent();
        assertThatThrownBy(() -> store().deleteExpired(0)).isInstanceOf(IllegalArgumentException.class);
    }

    /**
     * Cleanup skips an expired record another transaction holds (here a retry taking a FAILED record over) instead of
     * waiting for it: several cleaners, and a cleaner and the claims, never queue behind each other.
     */
    @Test
    void deleteExpiredSkipsARecordAnotherTransactionHolds() throws Exception {
        ScopedKey held = newKey();
        inTransaction(store -> store.fail(held, claimed(store.claim(claim(held, HASH_A, Duration.ofMillis(1))))));
        ScopedKey free = newKey();
        inTransaction(store -> store.fail(free, claimed(store.claim(claim(free, HASH_A, Duration.ofMillis(1))))));
        Thread.sleep(50);
        Transactions.Transaction holder = transactions().begin();
        claimed(store().claim(claim(held, HASH_A, DAY))); // takes the expired FAILED record over, not yet committed
        try {
            int deleted = Async.supply(() -> store().deleteExpired(1000))
                    .get(10, TimeUnit.SECONDS);
            assertThat(deleted).isPositive();
            assertThat(store().find(free)).as("the expired record no one holds is deleted").isEmpty();
        } finally {
            holder.rollback();
        }
        assertThat(store().find(held)).as("the held record was skipped").isPresent();
    }

    /**
     * A retry of a failed request whose expired record a cleanup batch is deleting at that moment waits for the batch
     * (it would otherwise take over a record that is going away), then finds the key free and claims it afresh.
     */
    @Test
    void aRetryOfARecordBeingDeletedClaimsTheKeyOnceTheBatchHasCommitted() throws Exception {
        ScopedKey key = newKey();
        inTransaction(store -> store.fail(key, claimed(store.claim(claim(key, HASH_A, Duration.ofMillis(1))))));
        Thread.sleep(50);
        Transactions.Transaction batch = transactions().begin();
        ExecutorService executor = Executors.newSingleThreadExecutor();
        try {
            assertThat(store().deleteExpired(1000)).as("the batch deletes the expired record").isPositive();
            Future<ClaimResult> retry = executor.submit(() -> claimCommitted(key, HASH_A, DAY));
            awaitBlockedClaim();
            assertThat(retry).as("the retry waits while the delete is uncommitted").isNotDone();
            batch.commit();

            ClaimResult result = retry.get(30, TimeUnit.SECONDS);
            assertThat(result).isInstanceOf(ClaimResult.Claimed.class);
            assertThat(((ClaimResult.Claimed) result).failedBefore()).as("a new claim, not a takeover").isFalse();
            IdempotencyRecord record = store().find(key).orElseThrow();
            assertThat(record.status()).isEqualTo(RecordStatus.PROCESSING);
            assertThat(record.expiresAt()).as("the new claim's own retention").isAfter(record.createdAt()
                    .plus(DAY).minusSeconds(1));
        } finally {
            batch.rollback();
            executor.shutdownNow();
        }
    }

    // ---------------------------------------------------------------- leases (claims committed before their work)

    @Test
    void aClaimWithALeaseIsHeldUntilTheLeaseRunsOutByTheDatabaseClock() throws InterruptedException {
        ScopedKey key = newKey();
        String token = claimedWithLease(key, SHORT_LEASE);

        IdempotencyRecord held = store().find(key).orElseThrow();
        assertThat(held.status()).isEqualTo(RecordStatus.PROCESSING);
        assertThat(held.lockedUntil()).isEqualTo(held.createdAt().plus(SHORT_LEASE));
        assertThat(held.leaseExpired()).isFalse();
        ClaimResult duplicate = claimCommitted(key, HASH_A, DAY);
        assertThat(duplicate).isInstanceOf(ClaimResult.Existing.class);
        assertThat(((ClaimResult.Existing) duplicate).record().leaseExpired()).isFalse();
        assertThat(store().takeOver(key, token, Duration.ofSeconds(10))).as("a live lease is not taken over").isEmpty();

        awaitLeaseRunOut(key);

        assertThat(store().findExpiredLeases(1000)).extracting(IdempotencyRecord::key).contains(key);
    }

    @Test
    void aFailedRecordTakenOverWithALeaseHoldsThatLease() throws InterruptedException {
        ScopedKey key = newKey();
        String first = claimedWithLease(key, SHORT_LEASE);
        assertThat(holds(store -> store.fail(key, first))).isTrue();

        String second = claimedWithLease(key, SHORT_LEASE);

        IdempotencyRecord held = store().find(key).orElseThrow();
        assertThat(held.fencingToken()).isEqualTo(second);
        assertThat(held.lockedUntil()).as("a lease, or a crash now would block the key for good").isNotNull();
        assertThat(held.lockedUntil()).as("the takeover's own lease").isEqualTo(held.createdAt().plus(SHORT_LEASE));
        assertThat(held.leaseExpired()).isFalse();
        awaitLeaseRunOut(key);
        assertThat(store().findExpiredLeases(1000)).extracting(IdempotencyRecord::key).contains(key);
    }

    /**
     * A record keeps the expiry it was claimed with: a retry that takes a FAILED record over claims the key afresh,
     * with the retention it asks for, while a stale claim taken over (by a retry or a sweeper) is the same claim and
     * keeps its creation time and expiry. An operator who raised the retention relies on both.
     */
    @Test
    void aFailedRecordTakenOverGetsTheRetentionOfItsNewClaimWhileAStaleClaimTakenOverKeepsItsOwn()
            throws InterruptedException {
        ScopedKey failedKey = newKey();
        String failedToken = claimed(claimCommitted(failedKey, HASH_A, DAY));
        assertThat(holds(store -> store.fail(failedKey, failedToken))).isTrue();
        IdempotencyRecord failed = store().find(failedKey).orElseThrow();
        Thread.sleep(20);

        claimed(claimCommitted(failedKey, HASH_A, DAY.multipliedBy(3)));

        IdempotencyRecord retried = store().find(failedKey).orElseThrow();
        assertThat(retried.createdAt()).as("claimed afresh").isAfter(failed.createdAt());
        assertThat(Duration.between(retried.createdAt(), retried.expiresAt())).isEqualTo(DAY.multipliedBy(3));

        ScopedKey staleKey = newKey();
        String staleToken = claimedWithLease(staleKey, Duration.ofMillis(1));
        IdempotencyRecord stale = store().find(staleKey).orElseThrow();
        Thread.sleep(20);

        assertThat(store().takeOver(staleKey, staleToken, Duration.ofSeconds(30))).isPresent();

        IdempotencyRecord takenOver = store().find(staleKey).orElseThrow();
        assertThat(takenOver.createdAt()).isEqualTo(stale.createdAt());
        assertThat(takenOver.expiresAt()).isEqualTo(stale.expiresAt());
    }

    @Test
    void onlyTheHolderRenewsItsLease() throws InterruptedException {
        ScopedKey key = newKey();
        String token = claimedWithLease(key, Duration.ofMillis(300));

        assertThat(store().renew(key, UUID.randomUUID().toString(), Duration.ofSeconds(10))).isFalse();
        assertThat(store().renew(key, token, Duration.ofSeconds(10))).isTrue();
        Thread.sleep(400);

        assertThat(store().find(key).orElseThrow().leaseExpired()).as("renewed past its first end").isFalse();
        assertThat(store().findExpiredLeases(1000)).extracting(IdempotencyRecord::key).doesNotContain(key);
    }

    /**
     * A renewal gives the lease from when it is made, also when it comes late, after the lease had run out: counted
     * from the lapsed end, its holder would get less than it asked for, or none at all, and the sweeper would take the
     * claim over while its holder still works on it.
     */
    @Test
    void aLateRenewalGivesTheWholeLeaseFromWhenItIsMade() throws InterruptedException {
        ScopedKey key = newKey();
        String token = claimedWithLease(key, Duration.ofMillis(1));
        IdempotencyRecord claimed = store().find(key).orElseThrow();
        Thread.sleep(300); // the lease of a millisecond has run out

        assertThat(store().renew(key, token, Duration.ofSeconds(30))).isTrue();

        IdempotencyRecord renewed = store().find(key).orElseThrow();
        assertThat(renewed.lockedUntil()).as("30 s from the renewal, made 300 ms or more after the claim")
                .isAfter(claimed.createdAt().plusMillis(30_200));
        assertThat(renewed.leaseExpired()).isFalse();
    }

    /**
     * The sweeper is given the claims whose lease ran out longest ago first, and no more than it asked for, so that
     * none is left waiting behind newer ones.
     */
    @Test
    void expiredLeasesComeOldestFirstAndUpToTheLimit() throws InterruptedException {
        List<ScopedKey> keys = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            ScopedKey key = newKey();
            keys.add(key);
            claimedWithLease(key, Duration.ofMillis(1));
        }
        Thread.sleep(50);

        List<IdempotencyRecord> all = store().findExpiredLeases(1000);
        assertThat(all).extracting(IdempotencyRecord::lockedUntil).isSortedAccordingTo(Comparator.naturalOrder());
        assertThat(all).extracting(IdempotencyRecord::key).containsSubsequence(keys);
        List<IdempotencyRecord> first = store().findExpiredLeases(1);
        assertThat(first).hasSize(1);
        assertThat(first.get(0).lockedUntil()).isEqualTo(all.get(0).lockedUntil());
    }

    /**
     * Expired leases come in the order their leases ran out, not the order the keys were claimed in: a claim given a
     * longer lease before another's short one ran out is handed to the sweeper after it.
     */
    @Test
    void expiredLeasesComeInTheOrderTheyRanOutNotTheOrderTheyWereClaimed() throws InterruptedException {
        ScopedKey longer = newKey();
        claimedWithLease(longer, SHORT_LEASE);
        ScopedKey shorter = newKey();
        claimedWithLease(shorter, Duration.ofMillis(1));
        // the order holds unless the second claim came SHORT_LEASE after the first; a stalled machine shows up here
        IdempotencyRecord first = store().find(longer).orElseThrow();
        IdempotencyRecord second = store().find(shorter).orElseThrow();
        assertThat(second.lockedUntil()).as("the later claim's lease runs out first").isBefore(first.lockedUntil());
        awaitLeaseRunOut(longer); // and the shorter one's before it

        assertThat(store().findExpiredLeases(1000)).extracting(IdempotencyRecord::key)
                .containsSubsequence(shorter, longer);
    }

    /** A lease renewal that comes after its claim was completed or failed holds nothing, and says so. */
    @Test
    void aFinishedClaimIsNotRenewed() {
        ScopedKey completed = newKey();
        String first = claimedWithLease(completed, Duration.ofSeconds(30));
        assertThat(holds(store -> store.complete(completed, first, new StoredResponse(200, List.of(), null)))).isTrue();
        ScopedKey failed = newKey();
        String second = claimedWithLease(failed, Duration.ofSeconds(30));
        assertThat(holds(store -> store.fail(failed, second))).isTrue();

        assertThat(store().renew(completed, first, Duration.ofSeconds(30))).as("a completed claim").isFalse();
        assertThat(store().renew(failed, second, Duration.ofSeconds(30))).as("a failed claim").isFalse();
        assertThat(store().find(completed).orElseThrow().lockedUntil()).isNull();
        assertThat(store().find(failed).orElseThrow().lockedUntil()).isNull();
    }

    @Test
    void anExpiredClaimIsTakenOverOnceAndItsFormerHolderIsFencedOut() throws Exception {
        ScopedKey key = newKey();
        String former = claimedWithLease(key, Duration.ofMillis(100));
        Thread.sleep(200);

        ExecutorService executor = Executors.newFixedThreadPool(4);
        List<Future<Optional<String>>> takeovers = new ArrayList<>();
        CyclicBarrier together = new CyclicBarrier(4);
        for (int i = 0; i < 4; i++) {
            takeovers.add(executor.submit(() -> {
                together.await();
                return store().takeOver(key, former, Duration.ofSeconds(30));
            }));
        }
        List<String> winners = new ArrayList<>();
        for (Future<Optional<String>> takeover : takeovers) {
            takeover.get(30, TimeUnit.SECONDS).ifPresent(winners::add);
        }
        executor.shutdownNow();

        assertThat(winners).as("takeovers that won").hasSize(1);
        StoredResponse late = new StoredResponse(201, List.of(), "late".getBytes(StandardCharsets.UTF_8));
        StoredResponse current = new StoredResponse(201, List.of(), "current".getBytes(StandardCharsets.UTF_8));
        assertThat(holds(store -> store.complete(key, former, late))).as("the former holder is fenced out").isFalse();
        assertThat(holds(store -> store.fail(key, former))).isFalse();
        assertThat(store().renew(key, former, Duration.ofSeconds(30))).isFalse();
        assertThat(holds(store -> store.complete(key, winners.get(0), current))).isTrue();
        assertThat(store().find(key).orElseThrow().response()).isEqualTo(current);
    }

    /**
     * A claim that finds a committed claim whose lease has run out returns it saying so, as a look-up does, with the
     * token that holds it: a retry takes a stale claim over on that word, and told the lease is live it would wait,
     * then answer "in progress", until a sweeper came by. Whether the retry claims with a lease or without, and
     * whichever request it is.
     */
    @Test
    void aClaimThatFindsAClaimWhoseLeaseRanOutSaysSo() throws InterruptedException {
        ScopedKey key = newKey();
        String token = claimedWithLease(key, Duration.ofMillis(1));
        Thread.sleep(50); // past the lease

        List<ClaimRequest> retries = List.of(new ClaimRequest(key, HASH_A, DAY, LONG_WAIT, Duration.ofSeconds(30)),
                claim(key, HASH_A, DAY), claim(key, HASH_B, DAY));
        for (ClaimRequest retry : retries) {
            ClaimResult result = inTransaction(store -> store.claim(retry));
            assertThat(result).as("a claim of %s, lease %s", retry.requestHash(), retry.lease())
                    .isInstanceOf(ClaimResult.Existing.class);
            IdempotencyRecord seen = ((ClaimResult.Existing) result).record();
            assertThat(seen.status()).isEqualTo(RecordStatus.PROCESSING);
            assertThat(seen.leaseExpired()).as("the record a claim of %s, lease %s, returns says the lease ran out",
                    retry.requestHash(), retry.lease()).isTrue();
            assertThat(seen.fencingToken()).as("the token holding the claim").isEqualTo(token);
        }
        assertThat(store().takeOver(key, token, Duration.ofSeconds(30))).as("taken over with the token it returned")
                .isPresent();
    }

    /**
     * A takeover names the token it found holding the claim: with a token a takeover has replaced, or a stranger's,
     * it takes nothing and changes nothing, though the lease has run out — otherwise two retries or sweepers that
     * found the claim stale one after the other would both take it, and both run its request. The token of a record
     * the sweeper's look-up returns is the one that holds the claim: the sweeper takes over what it found.
     */
    @Test
    void aTakeoverNeedsTheTokenThatHoldsTheClaim() throws InterruptedException {
        ScopedKey key = newKey();
        String former = claimedWithLease(key, Duration.ofMillis(1));
        Thread.sleep(50); // past the lease
        Optional<String> first = store().takeOver(key, former, Duration.ofMillis(1));
        assertThat(first).isPresent();
        Thread.sleep(50); // past the takeover's lease too
        IdempotencyRecord stale = store().find(key).orElseThrow();
        assertThat(stale.leaseExpired()).isTrue();

        assertThat(store().takeOver(key, former, Duration.ofSeconds(30))).as("with the token a takeover replaced")
                .isEmpty();
        assertThat(store().takeOver(key, UUID.randomUUID().toString(), Duration.ofSeconds(30)))
                .as("with a stranger's token").isEmpty();

        IdempotencyRecord unchanged = store().find(key).orElseThrow();
        assertThat(unchanged.status()).isEqualTo(RecordStatus.PROCESSING);
        assertThat(unchanged.fencingToken()).as("still held by the first takeover").isEqualTo(first.get());
        assertThat(unchanged.lockedUntil()).as("its lease not extended").isEqualTo(stale.lockedUntil());
        assertThat(unchanged.leaseExpired()).isTrue();

        IdempotencyRecord found = store().findExpiredLeases(1000).stream()
                .filter(record -> record.key().equals(key)).findFirst().orElseThrow();
        assertThat(found.fencingToken()).as("the token the sweeper's look-up gives").isEqualTo(first.get());
        Optional<String> swept = store().takeOver(found.key(), found.fencingToken(), Duration.ofSeconds(30));
        assertThat(swept).as("taken over as the sweeper does, with what it found").isPresent();
        IdempotencyRecord taken = store().find(key).orElseThrow();
        assertThat(taken.fencingToken()).isEqualTo(swept.get());
        assertThat(taken.leaseExpired()).isFalse();
    }

    /**
     * A claim's token holds it until a takeover replaces it, also once its lease has run out: a holder that stalled
     * past its lease, and whose claim nobody took over meanwhile, still completes it (the engine reports a lost lease
     * only when the claim was taken over), marks it FAILED or releases it (a mark or release the database did not take
     * is tried again until the lease has run out, and the last try comes after). Fencing is by the token, not by the
     * clock.
     */
    @Test
    void aHolderWhoseLeaseRanOutFinishesItsClaimWhileNobodyTookItOver() throws InterruptedException {
        ScopedKey completed = newKey();
        String completing = claimedWithLease(completed, Duration.ofMillis(1));
        ScopedKey failed = newKey();
        String failing = claimedWithLease(failed, Duration.ofMillis(1));
        ScopedKey released = newKey();
        String releasing = claimedWithLease(released, Duration.ofMillis(1));
        StoredResponse response = new StoredResponse(201, List.of(), "late".getBytes(StandardCharsets.UTF_8));
        Thread.sleep(50); // past the leases
        assertThat(store().find(completed).orElseThrow().leaseExpired()).isTrue();

        assertThat(holds(store -> store.complete(completed, completing, response)))
                .as("completed by its holder after its lease ran out").isTrue();
        assertThat(holds(store -> store.fail(failed, failing)))
                .as("marked FAILED by its holder after its lease ran out").isTrue();
        assertThat(holds(store -> store.release(released, releasing)))
                .as("released by its holder after its lease ran out").isTrue();

        IdempotencyRecord record = store().find(completed).orElseThrow();
        assertThat(record.status()).isEqualTo(RecordStatus.SUCCEEDED);
        assertThat(record.response()).isEqualTo(response);
        assertThat(store().find(failed).orElseThrow().status()).isEqualTo(RecordStatus.FAILED);
        assertThat(store().find(released)).isEmpty();
    }

    /**
     * A claim whose holder is recording its result while the lease runs out (its answer written, its transaction not
     * yet committed: a slow commit, a pause, a partition) is not waited for by a takeover, which would otherwise hold
     * a retry past its bounded wait and a sweeper for as long as the holder takes: the takeover does not happen, and
     * the holder's result, once committed, stands.
     */
    @Test
    void aTakeoverDoesNotWaitForAClaimBeingFinished() throws Exception {
        ScopedKey key = newKey();
        String holder = claimedWithLease(key, Duration.ofMillis(100));
        StoredResponse answer = new StoredResponse(201, List.of(), "charged".getBytes(StandardCharsets.UTF_8));
        Transactions.Transaction finishing = transactions().begin();
        ExecutorService executor = Executors.newSingleThreadExecutor();
        try {
            assertThat(store().complete(key, holder, answer)).isTrue(); // not committed yet
            Thread.sleep(200);

            Future<Optional<String>> takeover = executor.submit(() -> store().takeOver(key, holder,
                    Duration.ofSeconds(30)));
            assertThat(takeover.get(5, TimeUnit.SECONDS)).as("a claim being finished is not taken over").isEmpty();
            finishing.commit();
        } finally {
            finishing.rollback();
            executor.shutdownNow();
        }
        IdempotencyRecord record = store().find(key).orElseThrow();
        assertThat(record.status()).isEqualTo(RecordStatus.SUCCEEDED);
        assertThat(record.response()).isEqualTo(answer);
    }

    // ---------------------------------------------------------------- concurrency

    @Test
    void aDuplicateWaitsForTheClaimHolderAndThenSeesItsAnswer() throws Exception {
        ScopedKey key = newKey();
        StoredResponse response = new StoredResponse(201, List.of(), "first".getBytes(StandardCharsets.UTF_8));
        Transactions.Transaction holder = transactions().begin();
        String token = claimed(store().claim(claim(key, HASH_A, DAY)));

        ExecutorService executor = Executors.newSingleThreadExecutor();
        try {
            CountDownLatch waiting = new CountDownLatch(1);
            Future<ClaimResult> duplicate = executor.submit(() -> {
                waiting.countDown();
                return claimCommitted(key, HASH_A, DAY);
            });
            waiting.await();
            awaitBlockedClaim();
            assertThat(duplicate).as("the duplicate waits while the claim is uncommitted").isNotDone();
            assertThat(store().complete(key, token, response)).isTrue();
            holder.commit();

            ClaimResult result = duplicate.get(30, TimeUnit.SECONDS);
            assertThat(result).isInstanceOf(ClaimResult.Existing.class);
            assertThat(((ClaimResult.Existing) result).record().response()).isEqualTo(response);
        } finally {
            holder.rollback();
            executor.shutdownNow();
        }
    }

    @Test
    void aDuplicateTakesTheKeyWhenTheHolderRollsBack() throws Exception {
        ScopedKey key = newKey();
        Transactions.Transaction holder = transactions().begin();
        claimed(store().claim(claim(key, HASH_A, DAY)));

        ExecutorService executor = Executors.newSingleThreadExecutor();
        try {
            Future<ClaimResult> duplicate = executor.submit(
                    () -> claimCommitted(key, HASH_A, DAY));
            awaitBlockedClaim();
            assertThat(duplicate).as("the duplicate waits while the claim is uncommitted").isNotDone();
            holder.rollback();

            assertThat(duplicate.get(30, TimeUnit.SECONDS)).isInstanceOf(ClaimResult.Claimed.class);
        } finally {
            holder.rollback();
            executor.shutdownNow();
        }
    }

    @Test
    void theWaitForAnUncommittedClaimIsBounded() throws Exception {
        ScopedKey key = newKey();
        Transactions.Transaction holder = transactions().begin();
        claimed(store().claim(claim(key, HASH_A, DAY)));
        try {
            assertThat(claimWhileHeld(key)).isInstanceOf(ClaimResult.Busy.class);
        } finally {
            holder.rollback();
        }
    }

    /** A wait shorter than a millisecond, the unit databases count lock waits in, still ends. */
    @Test
    void aWaitUnderAMillisecondIsBoundedToo() throws Exception {
        ScopedKey key = newKey();
        Transactions.Transaction holder = transactions().begin();
        claimed(store().claim(claim(key, HASH_A, DAY)));
        try {
            assertThat(claimWhileHeld(key, Duration.ofNanos(500_000))).isInstanceOf(ClaimResult.Busy.class);
        } finally {
            holder.rollback();
        }
    }

    @Test
    void theWaitForAFailedRecordBeingTakenOverIsBounded() throws Exception {
        ScopedKey key = newKey();
        String failed = claimed(claimCommitted(key, HASH_A, DAY));
        assertThat(holds(store -> store.fail(key, failed))).isTrue();
        Transactions.Transaction holder = transactions().begin();
        claimed(store().claim(claim(key, HASH_A, DAY))); // takes the FAILED record over, not yet committed
        try {
            assertThat(claimWhileHeld(key)).isInstanceOf(ClaimResult.Busy.class);
        } finally {
            holder.rollback();
        }
    }

    /**
     * Two retries of a failed request at once: the one that waited while the other took the FAILED record over sees
     * that claim, and does not run as well.
     */
    @Test
    void aRetryThatWaitedForAFailedRecordsTakeoverSeesTheClaimThatTookItOver() throws Exception {
        ScopedKey key = newKey();
        String failed = claimed(claimCommitted(key, HASH_A, DAY));
        assertThat(holds(store -> store.fail(key, failed))).isTrue();
        Transactions.Transaction holder = transactions().begin();
        String winner = claimed(store().claim(claim(key, HASH_A, DAY))); // takes the FAILED record over

        ExecutorService executor = Executors.newSingleThreadExecutor();
        try {
            Future<ClaimResult> retry = executor.submit(() -> claimCommitted(key, HASH_A, DAY));
            awaitBlockedClaim();
            assertThat(retry).as("the retry waits while the takeover is uncommitted").isNotDone();
            holder.commit();

            ClaimResult result = retry.get(30, TimeUnit.SECONDS);
            assertThat(result).as("the retry that waited").isInstanceOf(ClaimResult.Existing.class);
            IdempotencyRecord seen = ((ClaimResult.Existing) result).record();
            assertThat(seen.status()).isEqualTo(RecordStatus.PROCESSING);
            assertThat(seen.fencingToken()).isEqualTo(winner);
        } finally {
            holder.rollback();
            executor.shutdownNow();
        }
    }

    @Test
    void anUncommittedClaimKeepsNoOtherKeyWaiting() throws Exception {
        String key = UUID.randomUUID().toString();
        Transactions.Transaction holder = transactions().begin();
        claimed(store().claim(claim(new ScopedKey("ab", "POST /c", key), HASH_A, DAY)));
        try {
            // another key of the same caller and scope, another caller, another scope, and a caller and scope that
            // run together into the same text
            for (ScopedKey other : List.of(new ScopedKey("ab", "POST /c", key + "-other"),
                    new ScopedKey("alice", "POST /c", key), new ScopedKey("ab", "POST /d", key),
                    new ScopedKey("a", "bPOST /c", key))) {
                assertThat(claimWhileHeld(other)).as("claim of %s", other).isInstanceOf(ClaimResult.Claimed.class);
            }
        } finally {
            holder.rollback();
        }
    }

    /**
     * The engine reads a completed record with no transaction open before it claims (a retry of a request it
     * remembers): the read returns what is committed, the stored answer byte for byte, and never waits for a claim
     * another transaction holds on the key.
     */
    @Test
    void aReadWithNoTransactionOpenReturnsTheCommittedRecordWithoutWaiting() throws Exception {
        ScopedKey key = new ScopedKey("", "POST /c", UUID.randomUUID().toString());
        StoredResponse response = new StoredResponse(201, List.of(new StoredResponse.Header("Location", "/c/1")),
                new byte[]{0, 1, 2, (byte) 0xff});
        Transactions.Transaction first = transactions().begin();
        String token = claimed(store().claim(claim(key, HASH_A, DAY)));
        assertThat(store().complete(key, token, response)).isTrue();
        first.commit();

        IdempotencyRecord record = readWithNoTransaction(key).orElseThrow();
        assertThat(record.status()).isEqualTo(RecordStatus.SUCCEEDED);
        assertThat(record.requestHash()).isEqualTo(HASH_A);
        assertThat(record.response()).isEqualTo(response);

        ScopedKey held = new ScopedKey("", "POST /c", UUID.randomUUID().toString());
        Transactions.Transaction holder = transactions().begin();
        claimed(store().claim(claim(held, HASH_A, DAY)));
        try {
            long started = System.nanoTime();
            assertThat(readWithNoTransaction(held)).as("an uncommitted claim is not there yet").isEmpty();
            assertThat(Duration.ofNanos(System.nanoTime() - started)).as("read without waiting for its holder")
                    .isLessThan(Duration.ofSeconds(10));
        } finally {
            holder.rollback();
        }
    }

    private Optional<IdempotencyRecord> readWithNoTransaction(ScopedKey key) throws Exception {
        return Async.supply(() -> store().find(key)).get(30, TimeUnit.SECONDS);
    }

    /**
     * Claims {@code key} on another thread, allowing a 200 ms wait, while this thread's transaction holds it: the
     * holder does not end before this returns, so only the bounded wait can end the claim.
     */
    private ClaimResult claimWhileHeld(ScopedKey key) throws Exception {
        return claimWhileHeld(key, Duration.ofMillis(200));
    }

    /** Like {@link #claimWhileHeld(ScopedKey)}, allowing a wait of {@code maxWait}. */
    private ClaimResult claimWhileHeld(ScopedKey key, Duration maxWait) throws Exception {
        return Async.supply(() -> {
            Transactions.Transaction transaction = transactions().begin();
            try {
                return store().claim(new ClaimRequest(key, HASH_A, DAY, maxWait));
            } finally {
                transaction.rollback();
            }
        }).get(30, TimeUnit.SECONDS);
    }

    @Test
    void concurrentClaimsOfOneKeyHaveExactlyOneWinner() throws Exception {
        int threads = 16;
        ExecutorService executor = Executors.newFixedThreadPool(threads);
        try {
            for (int round = 0; round < 5; round++) {
                ScopedKey key = newKey();
                StoredResponse answer = new StoredResponse(201, List.of(),
                        ("round " + round).getBytes(StandardCharsets.UTF_8));
                CyclicBarrier start = new CyclicBarrier(threads);
                List<Future<ClaimResult>> results = new ArrayList<>();
                for (int i = 0; i < threads; i++) {
                    results.add(executor.submit(() -> {
                        start.await();
                        Transactions.Transaction transaction = transactions().begin();
                        try {
                            ClaimResult result = store().claim(claim(key, HASH_A, LONG_WAIT));
                            if (result instanceof ClaimResult.Claimed claimed) {
                                Thread.sleep(50); // the others pile up behind the uncommitted claim
                                assertThat(store().complete(key, claimed.fencingToken(), answer)).isTrue();
                                transaction.commit();
                            }
                            return result;
                        } finally {
                            transaction.rollback();
                        }
                    }));
                }
                int winners = 0;
                for (Future<ClaimResult> future : results) {
                    ClaimResult result = future.get(60, TimeUnit.SECONDS);
                    if (result instanceof ClaimResult.Claimed) {
                        winners++;
                    } else {
                        assertThat(result).isInstanceOf(ClaimResult.Existing.class);
                        assertThat(((ClaimResult.Existing) result).record().response()).isEqualTo(answer);
                    }
                }
                assertThat(winners).as("claims that won round %d", round).isEqualTo(1);
            }
        } finally {
            executor.shutdownNow();
        }
    }

    // ---------------------------------------------------------------- helpers

    /** Runs {@code work} in a transaction that commits when it returns and rolls back when it throws. */
    protected <T> T inTransaction(Function<IdempotencyStore, T> work) {
        Transactions.Transaction transaction = transactions().begin();
        try {
            T result = work.apply(store());
            transaction.commit();
            return result;
        } finally {
            transaction.rollback();
        }
    }

    /** Like {@link #inTransaction} for the store's "true if it happened" operations. */
    protected boolean holds(Function<IdempotencyStore, Boolean> work) {
        return inTransaction(work);
    }

    /** Claims in a transaction of its own, which commits. */
    protected ClaimResult claimCommitted(ScopedKey key, String hash, Duration retention) {
        return inTransaction(store -> store.claim(claim(key, hash, retention)));
    }

    protected static ScopedKey newKey() {
        return new ScopedKey("tester", "POST /contract", UUID.randomUUID().toString());
    }

    private static ClaimRequest claim(ScopedKey key, String hash, Duration retention) {
        return new ClaimRequest(key, hash, retention, LONG_WAIT);
    }

    /** Claims {@code key} with a lease (intent-first) in a transaction of its own, which commits; returns its token. */
    private String claimedWithLease(ScopedKey key, Duration lease) {
        return claimed(inTransaction(store -> store.claim(new ClaimRequest(key, HASH_A, DAY, LONG_WAIT, lease))));
    }

    /**
     * Waits until the lease on {@code key} has run out by the database's clock, failing if it is still live well after
     * {@link #SHORT_LEASE}.
     */
    private void awaitLeaseRunOut(ScopedKey key) throws InterruptedException {
        Await.until("the lease runs out", SHORT_LEASE.plusSeconds(10),
                () -> store().find(key).orElseThrow().leaseExpired());
    }

    /** Claims the free or FAILED {@code key} in a transaction that rolls back; returns the claim's token. */
    private String claimedAndRolledBack(ScopedKey key) {
        Transactions.Transaction transaction = transactions().begin();
        try {
            return claimed(store().claim(claim(key, HASH_A, DAY)));
        } finally {
            transaction.rollback();
        }
    }

    private static String claimed(ClaimResult result) {
        assertThat(result).isInstanceOf(ClaimResult.Claimed.class);
        return ((ClaimResult.Claimed) result).fencingToken();
    }
}
