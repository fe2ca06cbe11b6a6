package io.idempotency.core;

import java.util.Objects;
import java.util.Optional;
import java.util.function.Supplier;

/**
 * What a handler running under idempotency can know about its request: the key, and the key to send to third
 * parties. Available on the handler's thread while it runs ({@link #current()}), and while its transaction commits:
 * to the callbacks of that commit (a {@code BEFORE_COMMIT} listener writing an outbox row, the entity listeners of the
 * flush it makes). Not thread-safe; do not keep it beyond the handler's return.
 */
public final class IdempotencyContext {

    private static final ThreadLocal<IdempotencyContext> CURRENT = new ThreadLocal<>();

    private final ScopedKey key;
    private final IdempotencyMode mode;
    private final Supplier<String> downstreamKeySource;
    private String downstreamKey;

    /** @param downstreamKey derives the downstream key, when first asked for (most handlers never ask) */
    public IdempotencyContext(ScopedKey key, Supplier<String> downstreamKey, IdempotencyMode mode) {
        this.key = key;
        this.downstreamKeySource = Objects.requireNonNull(downstreamKey, "downstreamKey");
        this.mode = mode;
    }

    /** A context with a known downstream key, e.g. to run a handler under test. */
    public IdempotencyContext(ScopedKey key, String downstreamKey, IdempotencyMode mode) {
        this(key, () -> downstreamKey, mode);
        Objects.requireNonNull(downstreamKey, "downstreamKey");
    }

    /** The context of the idempotent request this thread is handling, if any. */
    public static Optional<IdempotencyContext> current() {
        return Optional.ofNullable(CURRENT.get());
    }

    /** @throws IllegalStateException if this thread is not handling an idempotent request */
    public static IdempotencyContext require() {
        return current().orElseThrow(() -> new IllegalStateException("no idempotent request is being handled here"));
    }

    /** The record identity: caller, scope and the client's key. */
    public ScopedKey key() {
        return key;
    }

    /**
     * The idempotency key to send to a third party for this request — derived from caller, scope and key (see
     * {@link DownstreamKeys}), never the client's raw key.
     */
    public String downstreamKey() {
        if (downstreamKey == null) {
            downstreamKey = downstreamKeySource.get();
        }
        return downstreamKey;
    }

    public IdempotencyMode mode() {
        return mode;
    }

    /** Runs {@code work} with this context as the current one. */
    public <T, E extends Throwable> T runWith(Work<T, E> work) throws E {
        IdempotencyContext previous = CURRENT.get();
        CURRENT.set(this);
        try {
            return work.run();
        } finally {
            if (previous == null) {
                CURRENT.remove();
            } else {
                CURRENT.set(previous);
            }
        }
    }

    /** A piece of work that may throw. */
    @FunctionalInterface
    public interface Work<T, E extends Throwable> {
        T run() throws E;
    }
}
