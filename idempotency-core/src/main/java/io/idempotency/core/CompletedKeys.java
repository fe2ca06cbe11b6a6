package io.idempotency.core;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.Arrays;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.ReentrantLock;

/**
 * Which requests this instance has seen completed — a (key, fingerprint) pair each — long after their answers have
 * left the {@link ReplayCache}: a Bloom filter in two generations of {@code capacity} requests each. When the newer
 * generation is full, the older one is cleared and becomes the newer one, so the last {@code capacity} to
 * {@code 2 × capacity} requests are remembered, in about 2.5 bytes each: both generations are allocated at once, and
 * a new generation reuses the memory of the one it replaces, so the filter never takes more than that, and a size the
 * heap cannot hold fails where it is made rather than at a renewal, on the way of a request.
 *
 * <p>It only says which requests are worth looking up before claiming: {@link #mightContain} may answer true for a
 * request never seen (1–2 % of them: up to 0.8 % in each of the two generations), and a request it remembers may
 * have had its record removed since. Neither matters to what a request is answered — the record read decides, and
 * anything but that very request's completed record leads to the usual claim — only to its cost (one look-up more).
 *
 * <p>Thread-safe, without locks on the way of a request (a new generation is made under one).
 */
final class CompletedKeys {

    /** Bits per request and probes per look-up: about 0.8 % false positives in a full generation. */
    private static final int BITS_PER_ENTRY = 10;
    private static final int PROBES = 7;

    private static final VarHandle WORDS = MethodHandles.arrayElementVarHandle(long[].class);

    private record Generations(Generation current, Generation previous) {
    }

    private static final class Generation {
        final long[] words;
        final long bits;
        final AtomicInteger added = new AtomicInteger();

        Generation(int capacity) {
            this(new long[words(capacity)]);
        }

        /** A generation over {@code words}, which must be all zero. */
        Generation(long[] words) {
            this.words = words;
            this.bits = (long) words.length * 64;
        }

        static int words(int capacity) {
            long wanted = Math.max(64L, (long) capacity * BITS_PER_ENTRY);
            return (int) Math.min(Integer.MAX_VALUE - 8, (wanted + 63) / 64);
        }

        /** Sets the request's bits; false if all were set already (it was there, or looks as if it were). */
        boolean add(long first, long step) {
            boolean changed = false;
            for (int i = 0; i < PROBES; i++) {
                long bit = Math.floorMod(first + i * step, bits);
                long mask = 1L << bit; // a shift uses the low 6 bits: the bit within its word
                int word = (int) (bit >>> 6);
                if (((long) WORDS.getOpaque(words, word) & mask) == 0) {
                    changed |= ((long) WORDS.getAndBitwiseOr(words, word, mask) & mask) == 0;
                }
            }
            return changed;
        }

        boolean mightContain(long first, long step) {
            for (int i = 0; i < PROBES; i++) {
                long bit = Math.floorMod(first + i * step, bits);
                if (((long) WORDS.getOpaque(words, (int) (bit >>> 6)) & (1L << bit)) == 0) {
                    return false;
                }
            }
            return true;
        }
    }

    private final int capacity;
    private volatile Generations generations;
    /** Held while the older generation is cleared and made the newer one ({@link #renew}). */
    private final ReentrantLock renewing = new ReentrantLock();

    /** @param capacity how many requests a generation holds; 0 remembers none */
    CompletedKeys(int capacity) {
        if (capacity < 0) {
            throw new IllegalArgumentException("capacity must be 0 or more: " + capacity);
        }
        this.capacity = capacity;
        // both generations now: allocated at a renewal, the second would fail there, on a request's thread, and
        // allocating each new generation beside the two alive would take half as much memory again at every renewal
        this.generations = capacity == 0 ? null
                : new Generations(new Generation(capacity), new Generation(capacity));
    }

    /** Remembers that the request with {@code requestHash} completed under {@code key}. */
    void add(ScopedKey key, String requestHash) {
        Generations now = generations;
        if (now == null) {
            return;
        }
        long hash = hash(key, requestHash);
        // a request remembered already (replayed again) does not count again: the generation holds distinct requests
        if (now.current.add(hash, step(hash)) && now.current.added.incrementAndGet() == capacity) {
            renew(now);
        }
    }

    /** False if this request is certainly not one seen completed; true if it may be. */
    boolean mightContain(ScopedKey key, String requestHash) {
        Generations now = generations;
        if (now == null) {
            return false;
        }
        long hash = hash(key, requestHash);
        long step = step(hash);
        return now.current.mightContain(hash, step) || now.previous.mightContain(hash, step);
    }

    /**
     * Makes the older generation, cleared, the newer one. A request that took the generations before may still look
     * into the one being cleared, or set bits in it: it then takes a request for unseen, or one more for seen, which
     * only costs a look-up more or less, never changes an answer.
     */
    private void renew(Generations full) {
        // a lock, not a monitor: this runs on a request thread, and a virtual thread that waits to enter a monitor
        // keeps its carrier thread until Java 24
        renewing.lock();
        try {
            if (generations == full) {
                long[] words = full.previous.words;
                Arrays.fill(words, 0L);
                generations = new Generations(new Generation(words), full.current);
            }
        } finally {
            renewing.unlock();
        }
    }

    /** 64 bits of (caller, scope, key, fingerprint), each part ended so that no two tuples run together. */
    static long hash(ScopedKey key, String requestHash) {
        long h = 0xcbf29ce484222325L; // FNV-1a over the characters, then a final mix for the bits the probes use
        h = fnv(h, key.caller());
        h = fnv(h, key.scope());
        h = fnv(h, key.key());
        h = fnv(h, requestHash);
        return mix(h);
    }

    private static long fnv(long h, String part) {
        for (int i = 0; i < part.length(); i++) {
            h = (h ^ part.charAt(i)) * 0x100000001b3L;
        }
        // the length ends the part: ("ab", "c") and ("a", "bc") differ
        return (h ^ (0x10000 + part.length())) * 0x100000001b3L;
    }

    /** The step between probes: odd, and independent of the first probe. */
    private static long step(long hash) {
        return mix(hash ^ 0x9e3779b97f4a7c15L) | 1;
    }

    private static long mix(long z) { // the finalizer of SplitMix64
        z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L;
        z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
        return z ^ (z >>> 31);
    }
}
