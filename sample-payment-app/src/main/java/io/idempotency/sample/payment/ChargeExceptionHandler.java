package io.idempotency.sample.payment;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.core.Ordered;
import org.springframework.core.annotation.Order;
import org.springframework.http.HttpHeaders;
import org.springframework.http.HttpStatus;
import org.springframework.http.MediaType;
import org.springframework.http.ProblemDetail;
import org.springframework.http.ResponseEntity;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.RestControllerAdvice;

import java.net.URI;
import java.time.Duration;

/**
 * The gateway failures of {@code POST /charges} as {@code application/problem+json}. Ordered before
 * {@link PaymentExceptionHandler}, which answers everything else (invalid bodies, unexpected failures). Exceptions
 * are never stored by the starter; what happens to the claim depends on the exception, not on the status chosen here:
 * a {@code DefiniteFailureException} marks it FAILED, any other leaves it PROCESSING until its lease runs out.
 */
@RestControllerAdvice(assignableTypes = ChargeController.class)
@Order(Ordered.HIGHEST_PRECEDENCE)
public class ChargeExceptionHandler {

    private static final Logger log = LoggerFactory.getLogger(ChargeExceptionHandler.class);

    private static final String PROBLEM_TYPE_BASE = "https://idempotency-starter.github.io/problems/sample/";

    /** Problem type of a charge the gateway could not be asked to make. */
    public static final URI GATEWAY_UNREACHABLE = URI.create(PROBLEM_TYPE_BASE + "gateway-unreachable");

    /** Problem type of a charge whose outcome at the gateway is unknown. */
    public static final URI GATEWAY_OUTCOME_UNKNOWN = URI.create(PROBLEM_TYPE_BASE + "gateway-outcome-unknown");

    /** Problem type of a charge for an order the payer charged, or is charging, under another key. */
    public static final URI ORDER_ALREADY_CHARGED = URI.create(PROBLEM_TYPE_BASE + "order-already-charged");

    /** Problem type of a charge under a key that was used before for a charge of another order. */
    public static final URI KEY_USED_FOR_ANOTHER_CHARGE = URI.create(PROBLEM_TYPE_BASE + "key-used-for-another-charge");

    private final String leaseSeconds;

    /** @param lease the starter's lease: how long an unknown outcome holds the key */
    public ChargeExceptionHandler(@Value("${idempotency.lease:5m}") Duration lease) {
        this.leaseSeconds = Long.toString(Math.max(1, (lease.toMillis() + 999) / 1000));
    }

    /** 503: the charge was not made; the claim is FAILED, so a retry with the same key runs at once. */
    @ExceptionHandler(GatewayUnreachableException.class)
    public ResponseEntity<ProblemDetail> unreachable(GatewayUnreachableException e) {
        log.warn("charge not made: {}", e.getMessage());
        ProblemDetail problem = ProblemDetail.forStatusAndDetail(HttpStatus.SERVICE_UNAVAILABLE,
                "The payment gateway could not be reached, so no charge was made. Retry with the same Idempotency-Key.");
        problem.setType(GATEWAY_UNREACHABLE);
        problem.setTitle("Payment gateway unreachable");
        return ResponseEntity.status(HttpStatus.SERVICE_UNAVAILABLE).header(HttpHeaders.RETRY_AFTER, "1").body(problem);
    }

    /**
     * 409: the order is charged, or being charged, under another key; the gateway was not called and the claim is
     * FAILED (the key is not held for the lease). Names the charge when it is recorded.
     */
    @ExceptionHandler(OrderAlreadyChargedException.class)
    public ResponseEntity<ProblemDetail> orderAlreadyCharged(OrderAlreadyChargedException e) {
        Charge existing = e.existing();
        ProblemDetail problem = ProblemDetail.forStatusAndDetail(HttpStatus.CONFLICT, existing == null
                ? "Order " + e.orderId() + " is being charged under another Idempotency-Key; no charge was made by"
                        + " this request. Retry that request with its own key to learn its outcome."
                : "Order " + e.orderId() + " is already charged with " + existing.amount() + " " + existing.currency()
                        + " (charge " + existing.id() + "); no charge was made by this request.");
        problem.setType(ORDER_ALREADY_CHARGED);
        problem.setTitle("Order already charged");
        problem.setProperty("orderId", e.orderId());
        if (existing != null) {
            problem.setProperty("chargeId", existing.id());
            problem.setProperty("charge", ChargeResponses.location(existing).toString());
        }
        return ResponseEntity.status(HttpStatus.CONFLICT).contentType(MediaType.APPLICATION_PROBLEM_JSON)
                .body(problem);
    }

    /**
     * 422: the key was used before for a charge of another order, whose record has been deleted since; the gateway was
     * not called and the claim is FAILED. The client sends this charge under a new key.
     */
    @ExceptionHandler(KeyUsedForAnotherChargeException.class)
    public ResponseEntity<ProblemDetail> keyUsedForAnotherCharge(KeyUsedForAnotherChargeException e) {
        ProblemDetail problem = ProblemDetail.forStatusAndDetail(HttpStatus.UNPROCESSABLE_CONTENT, "This"
                + " Idempotency-Key was used before for a charge of another order, and the payment gateway knows it by"
                + " that charge: no charge was made by this request. Send the charge of order " + e.orderId()
                + " under a new Idempotency-Key.");
        problem.setType(KEY_USED_FOR_ANOTHER_CHARGE);
        problem.setTitle("Idempotency key used for another charge");
        problem.setProperty("orderId", e.orderId());
        return ResponseEntity.status(HttpStatus.UNPROCESSABLE_CONTENT).contentType(MediaType.APPLICATION_PROBLEM_JSON)
                .body(problem);
    }

    /**
     * 502: the charge may or may not have been made. The key stays claimed until its lease runs out; a retry with the
     * same key then gets the charge if the gateway booked it, or runs again if it did not. {@code Retry-After} is
     * the lease.
     */
    @ExceptionHandler(GatewayOutcomeUnknownException.class)
    public ResponseEntity<ProblemDetail> outcomeUnknown(GatewayOutcomeUnknownException e) {
        log.warn("charge outcome unknown: {}", e.getMessage());
        ProblemDetail problem = ProblemDetail.forStatusAndDetail(HttpStatus.BAD_GATEWAY,
                "The payment gateway gave no usable answer, so the charge may or may not have been made. Retry with"
                        + " the same Idempotency-Key: once the request's lease has run out, the retry gets the charge"
                        + " if the gateway made it, and charges otherwise.");
        problem.setType(GATEWAY_OUTCOME_UNKNOWN);
        problem.setTitle("Charge outcome unknown");
        return ResponseEntity.status(HttpStatus.BAD_GATEWAY).header(HttpHeaders.RETRY_AFTER, leaseSeconds)
                .body(problem);
    }
}
