package io.idempotency.core;

import java.time.Duration;
import java.util.Objects;
import java.util.function.IntConsumer;

/**
 * Deletes expired records in bounded batches, each in a transaction of its own, until none is left. Batches skip
 * records other transactions hold, so cleanup never makes a claim wait, and several cleaners — on several
 * application instances — can run at once without deleting a record twice or queueing behind each other.
 * Thread-safe.
 */
public final class ExpiredRecordCleaner {

    /** What one run did. */
    public record Run(long deleted, int batches, Duration took) {
    }

    private final IdempotencyStore store;
    private final int batchSize;

    /**
     * @param store     the store; {@link IdempotencyStore#deleteExpired} must run in its own short transaction when
     *                  called with no transaction open (as the JDBC store does)
     * @param batchSize most records deleted per statement; positive
     */
    public ExpiredRecordCleaner(IdempotencyStore store, int batchSize) {
        this.store = Objects.requireNonNull(store, "store");
        if (batchSize < 1) {
            throw new IllegalArgumentException("batchSize must be positive: " + batchSize);
        }
        this.batchSize = batchSize;
    }

    /** Deletes batches until one comes back short. */
    public Run run() {
        return run(removed -> { });
    }

    /**
     * Deletes batches until one comes back short, telling {@code afterBatch} how many records each batch removed as
     * soon as it has committed: a run that fails later (the database went away) has still removed those.
     */
    public Run run(IntConsumer afterBatch) {
        Objects.requireNonNull(afterBatch, "afterBatch");
        long started = System.nanoTime();
        long deleted = 0;
        int batches = 0;
        int last;
        do {
            last = store.deleteExpired(batchSize);
            afterBatch.accept(last);
            deleted += last;
            batches++;
        } while (last == batchSize && !Thread.currentThread().isInterrupted());
        return new Run(deleted, batches, Duration.ofNanos(System.nanoTime() - started));
    }
}
