package io.idempotency.spring;

import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.StoragePolicy;
import io.idempotency.core.StoredResponse;
import jakarta.servlet.DispatcherType;
import jakarta.servlet.http.HttpServletRequest;
import org.springframework.transaction.support.TransactionSynchronizationManager;

import java.lang.reflect.Method;

/**
 * What the filter and the advice share about one request, kept as a request attribute: the recorded body, the
 * deferred response, and either the running execution or the answer the advice decided on. Not thread-safe.
 */
final class IdempotentExchange {

    static final String ATTRIBUTE = IdempotentExchange.class.getName();

    private final BodyRecordingRequest request;
    private final DeferredResponse response;
    private IdempotencyEngine.Execution execution;
    private StoragePolicy storagePolicy = StoragePolicy.DEFAULT;
    private boolean handlerFailed;
    private HandlerFailure handlerFailure = HandlerFailure.UNKNOWN;
    private boolean attemptRunning;
    private boolean reentered;
    private boolean passedThrough;
    private Method takenBy;
    private Object takenOn;
    private StoredResponse answer;
    private StoredResponse.Header[] answerHeaders = new StoredResponse.Header[0];
    private Runnable closeResources = () -> { };
    private final DispatcherType dispatcherType;
    private final boolean arrivedInTransaction;

    IdempotentExchange(BodyRecordingRequest request, DeferredResponse response) {
        this.request = request;
        this.response = response;
        this.dispatcherType = request.getDispatcherType();
        this.arrivedInTransaction = TransactionSynchronizationManager.isActualTransactionActive();
    }

    /**
     * Whether a transaction was already active on the thread when the request reached the filter: nothing of the
     * request opened it. A server's request threads hold none; MockMvc runs the request on the calling thread, so a
     * {@code @Transactional} test's request arrives in the test's transaction.
     */
    boolean arrivedInTransaction() {
        return arrivedInTransaction;
    }

    /**
     * Whether {@code current} is in the kind of dispatch the filter wrapped (usually the client's request; a forward
     * when a filter before this one forwarded). Not in a forward or include made later, from inside the dispatcher:
     * the container ends the response when that returns, before the filter could send the answer. Such a dispatch is
     * of another kind than the wrapped one, or, when a filter before this one forwarded, a forward too: then it is
     * told apart as one made through the wrapped request.
     */
    boolean isTheWrappedDispatch(HttpServletRequest current) {
        return current.getDispatcherType() == dispatcherType && !request.inDispatchMadeInside();
    }

    BodyRecordingRequest request() {
        return request;
    }

    DeferredResponse response() {
        return response;
    }

    /**
     * True once the advice has taken this request on: started an execution, decided an answer, or let an
     * optional-key handler run without a key.
     */
    boolean isTaken() {
        return execution != null || answer != null || passedThrough;
    }

    /**
     * The advice takes the request on with {@code method} called on {@code target}: only that call made again (by an
     * advice outside, after its attempt ended) is the request's handler run once more.
     */
    void takeOnWith(Method method, Object target) {
        takenBy = method;
        takenOn = target;
    }

    /** The method the advice took the request on with, or null. */
    Method takenBy() {
        return takenBy;
    }

    /** Whether the advice took the request on with {@code method} called on {@code target}. */
    boolean takenOnWith(Method method, Object target) {
        return method.equals(takenBy) && target == takenOn;
    }

    /** An optional-key handler runs without a key: methods it calls run as they are. */
    void passThrough() {
        passedThrough = true;
    }

    /**
     * The handler runs in {@code execution}'s transaction; capture its answer. Its attempt runs from now until
     * {@link #attemptEnded()}.
     */
    void begin(IdempotencyEngine.Execution execution, StoragePolicy policy) {
        this.execution = execution;
        this.storagePolicy = policy;
        attemptRunning = true;
        reentered = false;
        response.capture(policy::isStorable);
    }

    /** {@code close} runs after the execution's transaction has ended (see {@link TransactionResources}). */
    void closeAfterTransaction(Runnable close) {
        Runnable earlier = closeResources; // an earlier attempt's (see retry)
        closeResources = () -> {
            try {
                close.run();
            } finally {
                earlier.run();
            }
        };
    }

    /** The handler's attempt has left the advice, returning or throwing. */
    void attemptEnded() {
        attemptRunning = false;
    }

    /** Whether the advice is running the handler (a method called now is called from inside it). */
    boolean attemptRunning() {
        return attemptRunning;
    }

    /** Whether the handler's attempt has left the advice: the handler run once more is a new attempt. */
    boolean attemptHasEnded() {
        return execution != null && !attemptRunning;
    }

    /**
     * The handler called an {@code @Idempotent} method through its proxy (itself, say) while it ran: its body had
     * started.
     */
    void noteReentry() {
        reentered = true;
    }

    /** Whether the running attempt's handler has called an {@code @Idempotent} method through its proxy. */
    boolean reentered() {
        return reentered;
    }

    /**
     * The handler's attempt has ended — it failed, or it returned and an advice outside the {@code @Idempotent} one
     * refused the result — and that advice runs the handler again (a retry): the next attempt starts afresh, claiming
     * the key again. The ended attempt's execution is ended here if it is still open (it is when the handler
     * returned): its writes roll back, and in intent-first mode the claim is left for the resolver, marked failed
     * after a definite failure, or released when the handler's body never ran. What was kept open for it is closed
     * with the new one's.
     */
    void retry() {
        abandon();
        execution = null;
        storagePolicy = StoragePolicy.DEFAULT;
        handlerFailed = false;
        handlerFailure = HandlerFailure.UNKNOWN;
    }

    /** Closes what was kept open for the execution; the filter calls it once the transaction has ended. */
    void closeResources() {
        Runnable close = closeResources;
        closeResources = () -> { };
        close.run();
    }

    /**
     * Answer with {@code answer} instead of running the handler. Whatever the rest of the MVC pipeline writes is
     * captured and dropped.
     */
    void answer(StoredResponse answer, StoredResponse.Header... extraHeaders) {
        this.answer = answer;
        this.answerHeaders = extraHeaders;
        response.capture(status -> true); // what is written now is dropped: none of it is held past the limit
    }

    /** What is known of a failed handler's work, which decides what becomes of an intent-first claim. */
    enum HandlerFailure {
        /** It may have happened: the claim stays for the resolver. */
        UNKNOWN,
        /** The handler declared it definitely not done ({@code DefiniteFailureException}): FAILED, for a retry. */
        DEFINITE,
        /** The handler's body never ran (its arguments were refused, or method security refused the call): released. */
        NOT_RUN
    }

    /** The handler threw: whatever the exception is rendered as, its transaction rolls back. */
    void markHandlerFailed(HandlerFailure failure) {
        handlerFailed = true;
        handlerFailure = failure;
    }

    IdempotencyEngine.Execution execution() {
        return execution;
    }

    StoragePolicy storagePolicy() {
        return storagePolicy;
    }

    boolean handlerFailed() {
        return handlerFailed;
    }

    StoredResponse answer() {
        return answer;
    }

    StoredResponse.Header[] answerHeaders() {
        return answerHeaders;
    }

    /**
     * Rolls back the execution unless it has ended; in intent-first mode, also marks the claim failed after a definite
     * failure of the handler (so that a retry runs at once), or releases it when the handler's body never ran.
     */
    void abandon() {
        if (execution == null) {
            return;
        }
        switch (handlerFailure) {
            case DEFINITE -> execution.abandonDefinitely();
            case NOT_RUN -> execution.abandonUnrun();
            case UNKNOWN -> execution.abandon();
        }
    }
}
