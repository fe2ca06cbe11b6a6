package io.idempotency.spring;

import jakarta.servlet.AsyncContext;
import jakarta.servlet.AsyncListener;
import jakarta.servlet.ServletContext;
import jakarta.servlet.ServletException;
import jakarta.servlet.ServletRequest;
import jakarta.servlet.ServletResponse;
import jakarta.servlet.ServletResponseWrapper;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.function.BooleanSupplier;

/**
 * The async context the application gets from a request the library may answer itself. An idempotent handler that
 * starts async processing is answered by the library, which then ends the request (see {@link IdempotencyFilter}).
 * Work the handler started may still run after that, when the container may already serve another request with the
 * objects this one had, and ending, dispatching or failing then would reach that request instead: a container marks
 * the response a failed {@link #start(Runnable) started} task belonged to as failed, whatever it serves by then. So
 * once {@code answered} says the library has answered the request, {@link #complete()} and {@code dispatch} do
 * nothing, the request and response are no longer handed out ({@link IllegalStateException}, as a container does
 * once async processing has ended), a request and response handed out before pass nothing on any more, and a
 * started task that fails is logged instead of reported to the container (as it is, too, before the answer, when the
 * library holds it: the library answers such a request itself whatever the task did).
 * Until then everything is the container's own, but for the container's own response while the library holds the
 * answer (see {@link #getResponse()}).
 */
final class GuardedAsyncContext implements AsyncContext {

    private static final Logger log = LoggerFactory.getLogger(GuardedAsyncContext.class);

    private final AsyncContext delegate;
    private final BooleanSupplier answered;
    private final BooleanSupplier answerHeld;

    /**
     * @param answered   whether the library has answered the request instead of its async processing
     * @param answerHeld whether the library holds the request's answer (an idempotent handler runs), and so may answer
     *                   it itself
     */
    GuardedAsyncContext(AsyncContext delegate, BooleanSupplier answered, BooleanSupplier answerHeld) {
        this.delegate = delegate;
        this.answered = answered;
        this.answerHeld = answerHeld;
    }

    private boolean ignored(String call) {
        if (!answered.getAsBoolean()) {
            return false;
        }
        log.debug("Ignored {} of an async context whose request the idempotency filter has answered", call);
        return true;
    }

    private void requireUnanswered() {
        if (answered.getAsBoolean()) {
            throw new IllegalStateException("The idempotency filter has answered this request and ended its async"
                    + " processing: @Idempotent does not support handlers that answer asynchronously");
        }
    }

    /**
     * The request, which the work may keep: of a request whose answer the library holds, one that reads nothing more
     * once the library has answered (see {@link GuardedAsyncRequest}).
     */
    @Override
    public ServletRequest getRequest() {
        requireUnanswered();
        ServletRequest request = delegate.getRequest();
        return answerHeld.getAsBoolean() && request instanceof HttpServletRequest http
                ? new GuardedAsyncRequest(http, this, this::requireUnanswered) : request;
    }

    /**
     * The response, which the work may keep: of a request whose answer the library holds, one that stops passing
     * anything on once the library has answered (see {@link GuardedAsyncResponse}) — and passes nothing on at any time
     * when it is not the one the library captures the answer in (async processing started without arguments holds
     * the container's own): what the work wrote there before the library answered would reach the client ahead of
     * that answer, a 200 for effects the library rolls back.
     */
    @Override
    public ServletResponse getResponse() {
        requireUnanswered();
        ServletResponse response = delegate.getResponse();
        if (!answerHeld.getAsBoolean() || !(response instanceof HttpServletResponse http)) {
            return response;
        }
        return new GuardedAsyncResponse(http, captures(response) ? this::requireUnanswered : () -> {
            throw new IllegalStateException("The idempotency filter answers this request itself, as @Idempotent does"
                    + " not support handlers that answer asynchronously: nothing is passed on to the response of an"
                    + " async context started without the request and response the handler was given");
        });
    }

    /** Whether {@code response} is, or wraps, the one the library captures the answer in. */
    private static boolean captures(ServletResponse response) {
        for (ServletResponse inner = response; inner instanceof ServletResponseWrapper wrapper;
             inner = wrapper.getResponse()) {
            if (inner instanceof DeferredResponse) {
                return true;
            }
        }
        return false;
    }

    @Override
    public boolean hasOriginalRequestAndResponse() {
        return delegate.hasOriginalRequestAndResponse();
    }

    @Override
    public void dispatch() {
        if (!ignored("dispatch()")) {
            delegate.dispatch();
        }
    }

    @Override
    public void dispatch(String path) {
        if (!ignored("dispatch(path)")) {
            delegate.dispatch(path);
        }
    }

    @Override
    public void dispatch(ServletContext context, String path) {
        if (!ignored("dispatch(context, path)")) {
            delegate.dispatch(context, path);
        }
    }

    @Override
    public void complete() {
        if (!ignored("complete()")) {
            delegate.complete();
        }
    }

    @Override
    public void start(Runnable run) {
        delegate.start(() -> {
            try {
                run.run();
            } catch (Throwable e) { // also a checked exception thrown undeclared (a task written in Kotlin)
                // a request whose answer the library holds is answered by the library whatever the task did: its
                // failure, even one before that answer, would only race it to the container
                if (!answerHeld.getAsBoolean() && !answered.getAsBoolean()) {
                    throw e;
                }
                log.warn("Async work of a request the idempotency filter answers itself failed: {}", e.toString(), e);
            }
        });
    }

    @Override
    public void addListener(AsyncListener listener) {
        delegate.addListener(listener);
    }

    @Override
    public void addListener(AsyncListener listener, ServletRequest request, ServletResponse response) {
        delegate.addListener(listener, request, response);
    }

    @Override
    public <T extends AsyncListener> T createListener(Class<T> type) throws ServletException {
        return delegate.createListener(type);
    }

    @Override
    public void setTimeout(long timeout) {
        delegate.setTimeout(timeout);
    }

    @Override
    public long getTimeout() {
        return delegate.getTimeout();
    }
}
