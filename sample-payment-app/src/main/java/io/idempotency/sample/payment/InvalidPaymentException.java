package io.idempotency.sample.payment;

import java.util.List;

/**
 * A payment request that failed validation. Thrown before anything is written and answered with 400
 * {@code application/problem+json} by {@link PaymentExceptionHandler}; because it is an exception, the starter rolls
 * back and does not store the answer, so the client may correct the body and retry with the same key.
 */
public class InvalidPaymentException extends RuntimeException {

    private final List<String> errors;

    /** @param errors one message per invalid field */
    public InvalidPaymentException(List<String> errors) {
        super(String.join("; ", errors));
        this.errors = List.copyOf(errors);
    }

    /** One message per invalid field. */
    public List<String> errors() {
        return errors;
    }
}
