package io.idempotency.spring;

/**
 * Thrown by an {@code @Idempotent} method that a handler function (a functional route) calls, when the request is
 * answered without running it: a replay of the stored answer, or a refusal (422, 409, 400). It stops the handler
 * function, whose work after the call must not run again on every retry, and Spring MVC resolves it without an
 * answer of its own; the {@link IdempotencyFilter} then sends the decided answer. A controller method that carries
 * {@code @Idempotent} is not called at all in that case, so it never sees this exception.
 *
 * <p>Let it pass: a handler function or a {@code HandlerFilterFunction} that catches it gains nothing, since whatever
 * it answers instead is dropped, and code it runs then runs on every retry.
 */
public final class RequestAnsweredException extends RuntimeException {

    RequestAnsweredException() {
        super("The request was answered by the @Idempotent advice (a replay or a refusal); the handler function stops"
                + " here", null, false, false);
    }
}
