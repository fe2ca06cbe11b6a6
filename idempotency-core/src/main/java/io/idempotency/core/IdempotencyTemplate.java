package io.idempotency.core;

import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.Callable;

/**
 * The idempotency rules for code that is not an HTTP endpoint — a message listener whose broker redelivers, a
 * scheduled job — on the same store and engine. It must own its transaction: called inside one (a
 * {@code @Transactional} method, a listener container's transaction, a Spring Batch step, which always runs in one),
 * it refuses. The work's result (bytes) is stored and returned again
 * for every repetition. Thread-safe.
 *
 * <pre>{@code
 * // a Spring AMQP listener: the broker's redelivery keeps the message id
 * template.execute(new ScopedKey("", "payment-events", message.getMessageProperties().getMessageId()),
 *         message.getBody(),
 *         () -> { payments.apply(parse(message)); return "done".getBytes(); });
 * }</pre>
 */
public final class IdempotencyTemplate {

    /**
     * The result of an execution, and whether it was stored by an earlier one. Compared by its bytes, and printed with
     * their number only (a result may hold a payment's details), as a {@link StoredResponse} is.
     */
    public record Result(byte[] value, boolean replayed) {

        @Override
        public boolean equals(Object other) {
            return other instanceof Result that && replayed == that.replayed && Arrays.equals(value, that.value);
        }

        @Override
        public int hashCode() {
            return 31 * Arrays.hashCode(value) + Boolean.hashCode(replayed);
        }

        @Override
        public String toString() {
            return "Result[value=" + (value == null ? "null" : value.length + " bytes") + ", replayed=" + replayed
                    + "]";
        }
    }

    /** Another execution with the key is still running: try again later (e.g. let the broker redeliver). */
    public static class InProgressException extends RuntimeException {
        // not serialized, as in the library's other exceptions: a listener that returns its exceptions to the sender
        // writes them with Java serialization, and a key could not be written
        private final transient ScopedKey key;

        public InProgressException(ScopedKey key) {
            super("an execution with " + key + " is still in progress");
            this.key = key;
        }

        /**
         * The key whose execution is still running: for a listener's log line or its dead-letter headers. Null in a
         * copy read back from Java serialization, whose message names the key.
         */
        public ScopedKey key() {
            return key;
        }
    }

    /** The key was used before for different input. */
    public static class KeyReusedException extends RuntimeException {
        private final transient ScopedKey key; // not serialized: see InProgressException

        public KeyReusedException(ScopedKey key) {
            super(key + " was already used for different input");
            this.key = key;
        }

        /**
         * The key that was used before for different input: for a listener's log line or its dead-letter headers. Null
         * in a copy read back from Java serialization, whose message names the key.
         */
        public ScopedKey key() {
            return key;
        }
    }

    private final IdempotencyEngine engine;

    public IdempotencyTemplate(IdempotencyEngine engine) {
        this.engine = Objects.requireNonNull(engine, "engine");
    }

    /**
     * Runs {@code work} at most once per key, in one transaction with the claim: the
     * {@linkplain #execute(ScopedKey, byte[], IdempotencyMode, Duration, Callable) execution} in
     * {@link IdempotencyMode#ONE_TRANSACTION} mode, which throws what it throws.
     */
    public Result execute(ScopedKey key, byte[] input, Callable<byte[]> work) throws Exception {
        return execute(key, input, IdempotencyMode.ONE_TRANSACTION, null, work);
    }

    /**
     * Runs {@code work} at most once per key, in the given mode. Must be called with no transaction open.
     *
     * @param input what identifies "the same work" besides the key (e.g. the message body); null (a message without
     *              a body) is the empty input
     * @param mode  never null
     * @param lease the lease in {@link IdempotencyMode#INTENT_FIRST} mode, at least
     *              {@link IdempotencyEngine#MIN_LEASE}; ignored otherwise
     * @throws NullPointerException        if {@code key}, {@code mode} or {@code work} is null, or {@code lease} in
     *                                     {@link IdempotencyMode#INTENT_FIRST} mode: nothing is claimed
     * @throws IllegalArgumentException    if {@code lease} is below {@link IdempotencyEngine#MIN_LEASE} in
     *                                     {@link IdempotencyMode#INTENT_FIRST} mode: nothing is claimed
     * @throws InProgressException         if another execution with the key is running
     * @throws KeyReusedException          if the key was used for other input
     * @throws RuntimeException            the store's or the {@link Transactions}' own exception (with Spring's JDBC
     *                                     store a {@code DataAccessException}, or a {@code TransactionException} when
     *                                     the pool gave no connection) if the database failed the claim or the work's
     *                                     transaction could not begin: the work did not run. In
     *                                     {@link IdempotencyMode#INTENT_FIRST} mode a claim that was committed is
     *                                     released (marked FAILED when an earlier attempt held it), in the background
     *                                     when the database does not take that at once: a redelivery meanwhile gets
     *                                     {@link InProgressException}
     * @throws IllegalStateException       if a transaction is open on this thread, or this thread is running the work
     *                                     of an execution with the key (work calling the template again): nothing is
     *                                     claimed; also in {@link IdempotencyMode#INTENT_FIRST} mode once the engine
     *                                     has been shut down, as {@link EngineShutDownException} (the work does not
     *                                     run, and no claim is kept from anyone); also if a resolver asked about a
     *                                     stale claim of the key answered null, with a status the storage policy
     *                                     does not store, or (in a web application) with more headers than its server
     *                                     sends, as {@link StaleClaimUndecidedException} (the work does not run, the
     *                                     claim stays PROCESSING under this call's lease)
     * @throws StoredBodyTooLargeException if the work's result is larger than the engine's cap on stored bodies
     *                                     ({@link IdempotencyEngine#maxStoredBodySize()}): it was not stored and the
     *                                     work's writes were rolled back, as after a failure of the work (in
     *                                     {@link IdempotencyMode#INTENT_FIRST} mode the claim stays PROCESSING for
     *                                     the {@link StaleClaimResolver}); also if a resolver asked about a stale
     *                                     claim of the key answered with a body above the cap (nothing stored, the
     *                                     claim stays PROCESSING)
     * @throws CommitFailedException      if the work's result could not be committed with its writes: nothing of
     *                                     this run was kept (unless {@link CommitFailedException#outcomeUnknown()})
     * @throws LeaseLostException          ({@link IdempotencyMode#INTENT_FIRST}) if the claim was taken over while
     *                                     the work ran; its writes were rolled back
     * @throws Exception                   what {@code work} threw, unwrapped, also when rolling its writes back failed
     *                                     (that failure is attached as suppressed); its writes were rolled back. An
     *                                     {@code Error}, or a {@code Throwable} of neither kind (work in Kotlin), is
     *                                     thrown on the same way, and so is an error after the work returned (no
     *                                     memory for the copy of its result that is stored), with the work's writes
     *                                     rolled back. In {@link IdempotencyMode#INTENT_FIRST} mode also
     *                                     what the {@link StaleClaimResolver} asked about a stale claim of the key
     *                                     threw: the work did not run, and the claim stays PROCESSING under this
     *                                     call's lease (redeliveries meanwhile get {@link InProgressException})
     */
    public Result execute(ScopedKey key, byte[] input, IdempotencyMode mode, Duration lease, Callable<byte[]> work)
            throws Exception {
        // a key left null: named, as the work and the mode are, not left to the first use of it below
        Objects.requireNonNull(key, "key");
        // before the claim: in intent-first mode a committed claim without work would hold the key for its lease
        Objects.requireNonNull(work, "work");
        // a missing mode is no default: work meant to run intent-first would run in one transaction with its claim
        Objects.requireNonNull(mode, "mode");
        byte[] identifying = input == null ? new byte[0] : input;
        String fingerprint = RequestFingerprint.of("EXECUTE", key.scope(), null, identifying);
        IdempotencyEngine.Start start = engine.start(key, fingerprint, mode, lease);
        if (start instanceof IdempotencyEngine.Replay replay) {
            return new Result(replay.response().body(), true);
        }
        if (start instanceof IdempotencyEngine.Mismatch) {
            throw new KeyReusedException(key);
        }
        if (!(start instanceof IdempotencyEngine.Proceed proceed)) {
            throw new InProgressException(key);
        }
        IdempotencyEngine.Execution execution = proceed.execution();
        byte[] value;
        StoredResponse result;
        // everything up to finish, which ends the execution whatever befalls it, is in here: a throwable that escaped
        // would leave the execution running — its transaction bound to the thread, its claim held, its lease renewed
        // for ever
        try {
            value = execution.context().runWith(() -> {
                byte[] returned = work.call();
                // an ORM's held-back writes are the work's: made under its context, and failing as its own failure
                execution.flush();
                return returned;
            });
            if (value != null && value.length > engine.maxStoredBodySize()) {
                // as for an HTTP answer above the cap: neither kept cut short nor committed without it
                throw new StoredBodyTooLargeException(key, "the result of the work", value.length,
                        engine.maxStoredBodySize());
            }
            // a copy, which a large result may find no memory for: that error fails the work as its own would
            result = new StoredResponse(200, List.of(), value);
        } catch (DefiniteFailureException e) {
            abandonAfter(execution::abandonDefinitely, e);
            throw e;
        } catch (Throwable e) {
            // any throwable, not only an Exception or an Error: work in Kotlin may throw a bare Throwable
            abandonAfter(execution::abandon, e);
            throw e;
        }
        execution.finish(result, status -> true);
        return new Result(value == null ? new byte[0] : value, false);
    }

    /**
     * Ends the execution after the work failed with {@code failure}, which stays the exception to throw: a rollback on
     * a lost connection fails too, and would otherwise hide what the work threw (a definite failure among others).
     */
    private static void abandonAfter(Runnable abandon, Throwable failure) {
        try {
            abandon.run();
        } catch (Throwable e) { // also a checked exception a store in Kotlin passes on undeclared
            failure.addSuppressed(e);
        }
    }
}
