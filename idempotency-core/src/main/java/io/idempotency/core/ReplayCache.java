package io.idempotency.core;

import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Completed answers kept in memory, so that a replay — or a key reused for another request — is answered without a
 * database round trip. Sound because a SUCCEEDED record never changes: the only thing that can happen to it is its
 * removal after the retention, and the retention is a lower bound, so answering from memory for at most
 * {@code maxAge} longer is allowed. Entries age on the monotonic clock (never the wall clock), the least recently used
 * go first, and only answers up to {@code maxBodyBytes} are kept. Thread-safe.
 */
public final class ReplayCache {

    /** A cache that keeps nothing. */
    public static final ReplayCache NONE = new ReplayCache(0, 0, Duration.ZERO);

    private record Entry(String requestHash, StoredResponse response, long cachedAtNanos) {
    }

    private final int maxEntries;
    private final int maxBodyBytes;
    private final long maxAgeNanos;
    private final Map<ScopedKey, Entry> entries;

    /**
     * @param maxEntries   how many answers are kept at most; 0 keeps none
     * @param maxBodyBytes larger answers are not kept
     * @param maxAge       how long an answer is kept after it was stored or read
     */
    public ReplayCache(int maxEntries, int maxBodyBytes, Duration maxAge) {
        this.maxEntries = Math.max(0, maxEntries);
        this.maxBodyBytes = maxBodyBytes;
        this.maxAgeNanos = maxAge.toNanos();
        this.entries = new LinkedHashMap<>(16, 0.75f, true) {
            @Override
            protected boolean removeEldestEntry(Map.Entry<ScopedKey, Entry> eldest) {
                return size() > ReplayCache.this.maxEntries;
            }
        };
    }

    /** Remembers the committed answer of {@code key}. */
    void put(ScopedKey key, String requestHash, StoredResponse response) {
        if (maxEntries == 0 || response.bodyLength() > maxBodyBytes) {
            return;
        }
        synchronized (entries) {
            entries.put(key, new Entry(requestHash, response, System.nanoTime()));
        }
    }

    /** The decision for a request with {@code key} and {@code requestHash}, or null if nothing is known here. */
    IdempotencyEngine.Start answer(ScopedKey key, String requestHash) {
        if (maxEntries == 0) {
            return null;
        }
        Entry entry;
        synchronized (entries) {
            entry = entries.get(key);
            if (entry != null && System.nanoTime() - entry.cachedAtNanos() > maxAgeNanos) {
                entries.remove(key);
                entry = null;
            }
        }
        if (entry == null) {
            return null;
        }
        return entry.requestHash().equals(requestHash)
                ? new IdempotencyEngine.Replay(entry.response()) : new IdempotencyEngine.Mismatch();
    }
}
