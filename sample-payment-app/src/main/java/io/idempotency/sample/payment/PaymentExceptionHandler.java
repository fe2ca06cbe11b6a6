package io.idempotency.sample.payment;

import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.Idempotent;
import jakarta.servlet.http.HttpServletRequest;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.core.annotation.AnnotatedElementUtils;
import org.springframework.http.HttpStatus;
import org.springframework.http.ProblemDetail;
import org.springframework.http.ResponseEntity;
import org.springframework.web.ErrorResponse;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.ResponseStatus;
import org.springframework.web.bind.annotation.RestControllerAdvice;
import org.springframework.web.method.HandlerMethod;
import org.springframework.web.servlet.HandlerMapping;
import org.springframework.web.servlet.mvc.method.annotation.ResponseEntityExceptionHandler;

import java.net.URI;

/**
 * Turns every error of the API into RFC 9457 {@code application/problem+json}.
 *
 * <p>Spring MVC's own exceptions (unreadable body, wrong media type, {@code ResponseStatusException}, …) are
 * rendered by the inherited {@link ResponseEntityExceptionHandler}. Exceptions of the starter that carry their own
 * problem answer ({@link ErrorResponse}, {@link ResponseStatus}) are left to it untouched. Whatever status is chosen
 * here, an exception thrown by an {@code @Idempotent} method rolls its transaction back and the answer is not
 * stored: the client can retry with the same key.
 */
@RestControllerAdvice
public class PaymentExceptionHandler extends ResponseEntityExceptionHandler {

    private static final Logger log = LoggerFactory.getLogger(PaymentExceptionHandler.class);

    private static final String PROBLEM_TYPE_BASE = "https://idempotency-starter.github.io/problems/sample/";

    /** Problem type of an invalid payment request. */
    public static final URI INVALID_PAYMENT = URI.create(PROBLEM_TYPE_BASE + "invalid-payment");

    /** Problem type of a payment for an order the payer already paid with another amount or currency. */
    public static final URI ORDER_ALREADY_PAID = URI.create(PROBLEM_TYPE_BASE + "order-already-paid");

    /** Problem type of a failure inside the server. */
    public static final URI INTERNAL_ERROR = URI.create(PROBLEM_TYPE_BASE + "internal-error");

    /** 400 for a request body that failed validation, listing every problem. */
    @ExceptionHandler(InvalidPaymentException.class)
    public ResponseEntity<ProblemDetail> invalidPayment(InvalidPaymentException e) {
        ProblemDetail problem = ProblemDetail.forStatusAndDetail(HttpStatus.BAD_REQUEST, e.getMessage());
        problem.setType(INVALID_PAYMENT);
        problem.setTitle("Invalid payment request");
        problem.setProperty("errors", e.errors());
        return ResponseEntity.of(problem).build();
    }

    /**
     * 409 when the second wall finds that the payer already paid the order differently. The problem names the
     * existing payment, so the client can look at it instead of guessing. 409 is not kept by the starter's storage
     * policy (and an exception is never kept): the key is released.
     */
    @ExceptionHandler(OrderAlreadyPaidException.class)
    public ResponseEntity<ProblemDetail> orderAlreadyPaid(OrderAlreadyPaidException e) {
        ProblemDetail problem = ProblemDetail.forStatusAndDetail(HttpStatus.CONFLICT, e.getMessage());
        problem.setType(ORDER_ALREADY_PAID);
        problem.setTitle("Order already paid");
        problem.setProperty("orderId", e.existing().orderId());
        problem.setProperty("paymentId", e.existing().id());
        problem.setProperty("payment", PaymentController.location(e.existing()).toString());
        return ResponseEntity.of(problem).build();
    }

    /** 500 for the failure injected by {@code X-Chaos: fail-after-write}. */
    @ExceptionHandler(SimulatedFailureException.class)
    public ResponseEntity<ProblemDetail> simulatedFailure(SimulatedFailureException e) {
        log.warn("X-Chaos: {}", e.getMessage());
        return internalError(e.getMessage());
    }

    /**
     * 500 for anything unexpected, without internals in the answer. Exceptions that already define their answer are
     * rethrown, which hands them on to the resolvers that know how to render them.
     *
     * <p>The answer tells what a retry can expect. A request of an intent-first handler ({@code POST /charges}) may
     * have failed after its external call (the gateway may have booked the charge), and its claim stays until the
     * lease runs out: telling that client "not carried out" could make it pay again under another key.
     */
    @ExceptionHandler(Exception.class)
    public ResponseEntity<ProblemDetail> unexpected(Exception e, HttpServletRequest request) throws Exception {
        if (e instanceof ErrorResponse
                || AnnotatedElementUtils.hasAnnotation(e.getClass(), ResponseStatus.class)) {
            throw e;
        }
        log.error("request failed", e);
        if (intentFirst(request)) {
            return internalError("The request failed inside the server, possibly after the payment gateway was"
                    + " called, so the charge may have been made. Retry with the same Idempotency-Key: the retry is"
                    + " answered 409 until the request's lease has run out, then gets the charge if the gateway made"
                    + " it, and charges otherwise.");
        }
        return internalError("The request failed inside the server; it was not carried out and may be retried.");
    }

    /** Whether the request was mapped to an {@code @Idempotent} handler in intent-first mode. */
    private static boolean intentFirst(HttpServletRequest request) {
        if (!(request.getAttribute(HandlerMapping.BEST_MATCHING_HANDLER_ATTRIBUTE) instanceof HandlerMethod handler)) {
            return false;
        }
        Idempotent idempotent = handler.getMethodAnnotation(Idempotent.class);
        return idempotent != null && idempotent.mode() == IdempotencyMode.INTENT_FIRST;
    }

    private static ResponseEntity<ProblemDetail> internalError(String detail) {
        ProblemDetail problem = ProblemDetail.forStatusAndDetail(HttpStatus.INTERNAL_SERVER_ERROR, detail);
        problem.setType(INTERNAL_ERROR);
        problem.setTitle("Internal error");
        return ResponseEntity.of(problem).build();
    }
}
