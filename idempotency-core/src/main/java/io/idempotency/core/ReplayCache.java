package io.idempotency.core;

import java.time.Duration;
import java.util.Iterator;
import java.util.LinkedHashMap;

/**
 * Completed answers kept in memory, so that a replay — or a key reused for another request — is answered without a
 * database round trip. Sound because a SUCCEEDED record never changes: the only thing that can happen to it is its
 * removal after the retention, and the retention is a lower bound, so answering from memory for at most
 * {@code maxAge} longer is allowed. Entries age on the monotonic clock (never the wall clock), the least recently used
 * go first when there are more than {@code maxEntries} or they take more than {@code maxTotalBytes}, and only answers
 * up to {@code maxBodyBytes} are kept. Thread-safe.
 */
public final class ReplayCache {

    /** A cache that keeps nothing. */
    public static final ReplayCache NONE = new ReplayCache(0, 0, 0, Duration.ZERO);

    /** What an entry costs beyond its strings and body: the map entry, the records, the lists, the arrays' headers. */
    private static final int ENTRY_OVERHEAD_BYTES = 256;

    private record Entry(String requestHash, StoredResponse response, long cachedAtNanos, long bytes) {
    }

    private final int maxEntries;
    private final int maxBodyBytes;
    private final long maxTotalBytes;
    private final long maxAgeNanos;
    private final LinkedHashMap<ScopedKey, Entry> entries = new LinkedHashMap<>(16, 0.75f, true);
    private long totalBytes;

    /**
     * @param maxEntries    how many answers are kept at most; 0 keeps none
     * @param maxBodyBytes  larger answers are not kept
     * @param maxTotalBytes how much memory the kept answers may take at most, as {@link #footprint} estimates it
     * @param maxAge        how long an answer is kept after it was stored or read
     */
    public ReplayCache(int maxEntries, int maxBodyBytes, long maxTotalBytes, Duration maxAge) {
        this.maxEntries = Math.max(0, maxEntries);
        this.maxBodyBytes = maxBodyBytes;
        this.maxTotalBytes = maxTotalBytes;
        this.maxAgeNanos = maxAge.toNanos();
    }

    /** Remembers the committed answer of {@code key}. */
    void put(ScopedKey key, String requestHash, StoredResponse response) {
        long bytes = footprint(key, requestHash, response);
        if (maxEntries == 0 || response.bodyLength() > maxBodyBytes || bytes > maxTotalBytes) {
            return;
        }
        synchronized (entries) {
            Entry previous = entries.put(key, new Entry(requestHash, response, System.nanoTime(), bytes));
            totalBytes += bytes - (previous == null ? 0 : previous.bytes());
            Iterator<Entry> eldestFirst = entries.values().iterator();
            while ((entries.size() > maxEntries || totalBytes > maxTotalBytes) && eldestFirst.hasNext()) {
                totalBytes -= eldestFirst.next().bytes();
                eldestFirst.remove();
            }
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
                totalBytes -= entry.bytes();
                entry = null;
            }
        }
        if (entry == null) {
            return null;
        }
        return entry.requestHash().equals(requestHash)
                ? new IdempotencyEngine.Replay(entry.response()) : new IdempotencyEngine.Mismatch();
    }

    /** An estimate of the memory one kept answer takes: its body, its strings, and a fixed overhead. */
    static long footprint(ScopedKey key, String requestHash, StoredResponse response) {
        long strings = key.caller().length() + key.scope().length() + key.key().length() + requestHash.length();
        for (StoredResponse.Header header : response.headers()) {
            strings += header.name().length() + header.value().length();
        }
        return ENTRY_OVERHEAD_BYTES + response.bodyLength() + 2 * strings; // at most 2 bytes a char
    }
}
