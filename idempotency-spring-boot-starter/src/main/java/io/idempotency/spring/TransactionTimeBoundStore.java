package io.idempotency.spring;

import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.IdempotencyRecord;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StoredResponse;
import org.springframework.transaction.support.ResourceHolderSupport;
import org.springframework.transaction.support.TransactionSynchronizationManager;

import java.time.Duration;
import java.util.Date;
import java.util.List;
import java.util.Objects;
import java.util.Optional;

/**
 * The store as the engine claims with it: a claim's wait for a key another transaction holds ends with half of its own
 * transaction's time left, when that transaction has a timeout ({@code spring.transaction.default-timeout}) that the
 * in-flight wait would outlast. The claim runs in the request's transaction, whose timeout cancels a statement that
 * outlives it: the wait would end in that cancellation, a failure of the store (503), where the client is owed
 * 409 {@code idempotency-request-in-progress}. A claim that gets the key after its wait leaves its handler at least as
 * long as it waited, rather than a moment in which it can only time out. Everything else is passed on as it is.
 */
final class TransactionTimeBoundStore implements IdempotencyStore {

    private static final Duration SHORTEST_WAIT = Duration.ofMillis(1);

    private final IdempotencyStore store;

    TransactionTimeBoundStore(IdempotencyStore store) {
        this.store = Objects.requireNonNull(store, "store");
    }

    @Override
    public ClaimResult claim(ClaimRequest request) {
        Duration left = transactionTimeLeft();
        if (left == null) {
            return store.claim(request);
        }
        Duration wait = left.dividedBy(2);
        if (wait.compareTo(request.maxWait()) >= 0) {
            return store.claim(request);
        }
        if (wait.compareTo(SHORTEST_WAIT) < 0) {
            wait = SHORTEST_WAIT; // a free key is still claimed; a held one is "in progress" at once
        }
        return store.claim(new ClaimRequest(request.key(), request.requestHash(), request.retention(), wait,
                request.lease()));
    }

    /**
     * What is left of the timeout of the transaction open on this thread, or null when it has none. The transaction
     * manager keeps its deadline on what it binds to the thread (the connection, an EntityManager); read without
     * {@code getTimeToLiveInMillis()}, which marks the transaction rollback-only once the deadline has passed.
     */
    private static Duration transactionTimeLeft() {
        if (!TransactionSynchronizationManager.isActualTransactionActive()) {
            return null;
        }
        Long earliest = null;
        for (Object resource : TransactionSynchronizationManager.getResourceMap().values()) {
            if (resource instanceof ResourceHolderSupport holder && holder.hasTimeout()) {
                Date deadline = holder.getDeadline();
                if (deadline != null && (earliest == null || deadline.getTime() < earliest)) {
                    earliest = deadline.getTime();
                }
            }
        }
        return earliest == null ? null : Duration.ofMillis(Math.max(0, earliest - System.currentTimeMillis()));
    }

    @Override
    public boolean complete(ScopedKey key, String fencingToken, StoredResponse response) {
        return store.complete(key, fencingToken, response);
    }

    @Override
    public boolean fail(ScopedKey key, String fencingToken) {
        return store.fail(key, fencingToken);
    }

    @Override
    public boolean release(ScopedKey key, String fencingToken) {
        return store.release(key, fencingToken);
    }

    @Override
    public boolean renew(ScopedKey key, String fencingToken, Duration lease) {
        return store.renew(key, fencingToken, lease);
    }

    @Override
    public Optional<String> takeOver(ScopedKey key, String expiredToken, Duration lease) {
        return store.takeOver(key, expiredToken, lease);
    }

    @Override
    public List<IdempotencyRecord> findExpiredLeases(int limit) {
        return store.findExpiredLeases(limit);
    }

    @Override
    public Optional<IdempotencyRecord> find(ScopedKey key) {
        return store.find(key);
    }

    @Override
    public int deleteExpired(int limit) {
        return store.deleteExpired(limit);
    }
}
