package io.idempotency.core;

import java.time.Duration;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.concurrent.locks.ReentrantLock;

/**
 * Completed answers kept in memory, so that a replay is answered without a database round trip. Sound because a
 * SUCCEEDED record never changes: the only thing that can happen to it is its removal after the retention, and the
 * retention is a lower bound, so replaying it from memory to its own request for at most {@code maxAge} longer is
 * allowed. A request with another fingerprint is never refused from memory: the record kept here may have been
 * removed and its key used again, on any instance, so only the database can say whether the key belongs to another
 * request or to this very one. Entries age on the monotonic clock (never the wall clock) from when they were stored,
 * the least recently used go first when there are more than {@code maxEntries} or they take more than
 * {@code maxTotalBytes}, and only answers up to {@code maxBodyBytes} are kept.
 *
 * <p>Beyond the answers it keeps, it can remember which requests completed ({@code completedKeys} of them, a few
 * bytes each): a request it remembers is answered from one read of its record, outside any transaction, rather than
 * from a claim and its rollback — provided the record read is that very request's completed one; anything else is
 * left to the claim. Thread-safe.
 */
public final class ReplayCache {

    /** A cache that keeps nothing. */
    public static final ReplayCache NONE = new ReplayCache(0, 0, 0, Duration.ZERO);

    /**
     * What an entry costs beyond the characters of its strings and its body: the map entry and its slot in the table,
     * the key, the entry and answer objects, the header list, the four strings of the key and request hash and their
     * arrays (object headers, fields and alignment, counted with 64-bit references).
     */
    private static final int ENTRY_OVERHEAD_BYTES = 512;

    /**
     * What a header costs beyond the characters of its name and value: the header object, its two strings and their
     * arrays (object headers, fields and alignment, counted with 64-bit references), and its slot in the list. A few
     * characters long, a header takes several times its characters.
     */
    private static final int HEADER_OVERHEAD_BYTES = 160;

    private record Entry(String requestHash, StoredResponse response, long cachedAtNanos, long bytes) {
    }

    private final int maxEntries;
    private final int maxBodyBytes;
    private final long maxTotalBytes;
    private final long maxAgeNanos;
    private final LinkedHashMap<ScopedKey, Entry> entries = new LinkedHashMap<>(16, 0.75f, true);
    /**
     * Guards {@link #entries} and {@link #totalBytes}. A lock, not a monitor: request threads take it, and a virtual
     * thread that waits to enter a monitor keeps its carrier thread until Java 24.
     */
    private final ReentrantLock lock = new ReentrantLock();
    private long totalBytes;
    private final CompletedKeys completed;

    /** A cache that remembers no request beyond the answers it keeps. */
    public ReplayCache(int maxEntries, int maxBodyBytes, long maxTotalBytes, Duration maxAge) {
        this(maxEntries, maxBodyBytes, maxTotalBytes, maxAge, 0);
    }

    /**
     * @param maxEntries    how many answers are kept at most; 0 keeps none
     * @param maxBodyBytes  larger answers are not kept
     * @param maxTotalBytes how much memory the kept answers may take at most, as {@link #footprint} estimates it; 0
     *                      keeps none
     * @param maxAge        how long an answer is kept after it was stored (reading it from the cache does not extend
     *                      it; reading it from the database again does); zero keeps none
     * @param completedKeys how many completed requests are remembered at least, beyond the answers kept, so that
     *                      their replays take one read instead of a claim; 0 remembers none
     */
    public ReplayCache(int maxEntries, int maxBodyBytes, long maxTotalBytes, Duration maxAge, int completedKeys) {
        this.completed = new CompletedKeys(completedKeys);
        // an answer that may not be kept for any time, or in any memory, could never be replayed: none is kept
        this.maxEntries = maxAge.isNegative() || maxAge.isZero() || maxTotalBytes <= 0 ? 0 : Math.max(0, maxEntries);
        this.maxBodyBytes = maxBodyBytes;
        this.maxTotalBytes = maxTotalBytes;
        // beyond about 292 years, nanoseconds do not fit a long: such an age is "as long as the entry stays"
        this.maxAgeNanos = maxAge.compareTo(Duration.ofNanos(Long.MAX_VALUE)) >= 0 ? Long.MAX_VALUE
                : maxAge.toNanos();
    }

    /**
     * Remembers the committed answer of {@code key}. An answer too large to keep still replaces what was kept for the
     * key: that came from a record which has since been removed, and its key used again.
     */
    void put(ScopedKey key, String requestHash, StoredResponse response) {
        completed.add(key, requestHash);
        if (maxEntries == 0) {
            return;
        }
        long bytes = footprint(key, requestHash, response);
        if (response.bodyLength() > maxBodyBytes || bytes > maxTotalBytes) {
            lock.lock();
            try {
                Entry superseded = entries.remove(key);
                if (superseded != null) {
                    totalBytes -= superseded.bytes();
                }
            } finally {
                lock.unlock();
            }
            return;
        }
        lock.lock();
        try {
            Entry previous = entries.put(key, new Entry(requestHash, response, System.nanoTime(), bytes));
            totalBytes += bytes - (previous == null ? 0 : previous.bytes());
            Iterator<Entry> eldestFirst = entries.values().iterator();
            while ((entries.size() > maxEntries || totalBytes > maxTotalBytes) && eldestFirst.hasNext()) {
                totalBytes -= eldestFirst.next().bytes();
                eldestFirst.remove();
            }
        } finally {
            lock.unlock();
        }
    }

    /**
     * Learnt from the database: {@code key} is held by the request with {@code requestHash}. An answer kept for another
     * request came from a record that has since been removed, its key used again: it is given up, so that its own
     * request, should it come again, is judged by the database too.
     */
    void holds(ScopedKey key, String requestHash) {
        if (maxEntries == 0) {
            return;
        }
        lock.lock();
        try {
            Entry kept = entries.get(key);
            if (kept != null && !kept.requestHash().equals(requestHash)) {
                entries.remove(key);
                totalBytes -= kept.bytes();
            }
        } finally {
            lock.unlock();
        }
    }

    /**
     * The replay for a request with {@code key} and {@code requestHash}, or null if the database must decide: nothing
     * is kept for the key, or what is kept is the answer of another request (which may no longer hold the key).
     */
    IdempotencyEngine.Replay answer(ScopedKey key, String requestHash) {
        if (maxEntries == 0) {
            return null;
        }
        Entry entry;
        lock.lock();
        try {
            entry = entries.get(key);
            if (entry != null && System.nanoTime() - entry.cachedAtNanos() > maxAgeNanos) {
                entries.remove(key);
                totalBytes -= entry.bytes();
                entry = null;
            }
        } finally {
            lock.unlock();
        }
        if (entry == null) {
            return null;
        }
        return entry.requestHash().equals(requestHash) ? new IdempotencyEngine.Replay(entry.response()) : null;
    }

    /**
     * Whether the request with {@code key} and {@code requestHash} may be one this instance saw completed: worth
     * reading its record before claiming. Often true of a request whose record has gone, now and then of one never
     * seen; false only of requests not remembered.
     */
    boolean mayHaveCompleted(ScopedKey key, String requestHash) {
        return completed.mightContain(key, requestHash);
    }

    /** How many answers are kept. */
    int size() {
        lock.lock();
        try {
            return entries.size();
        } finally {
            lock.unlock();
        }
    }

    /**
     * An upper estimate of the memory one kept answer takes: its body, its strings, the objects holding them (each
     * header's too), and a fixed overhead.
     */
    static long footprint(ScopedKey key, String requestHash, StoredResponse response) {
        long strings = key.caller().length() + key.scope().length() + key.key().length() + requestHash.length();
        for (StoredResponse.Header header : response.headers()) {
            strings += header.name().length() + header.value().length();
        }
        return ENTRY_OVERHEAD_BYTES + (long) HEADER_OVERHEAD_BYTES * response.headers().size()
                + response.bodyLength() + 2 * strings; // at most 2 bytes a char
    }
}
