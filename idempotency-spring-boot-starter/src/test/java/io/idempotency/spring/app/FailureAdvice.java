package io.idempotency.spring.app;

import org.springframework.http.ProblemDetail;
import org.springframework.http.ResponseEntity;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.RestControllerAdvice;

/** Maps handler exceptions to answers, as applications do: the starter must roll back whatever the status. */
@RestControllerAdvice
public class FailureAdvice {

    @ExceptionHandler(OrderController.OrderFailure.class)
    public ResponseEntity<ProblemDetail> failed(OrderController.OrderFailure failure) {
        return ResponseEntity.status(failure.status).body(ProblemDetail.forStatusAndDetail(
                org.springframework.http.HttpStatusCode.valueOf(failure.status), failure.getMessage()));
    }

    /**
     * Raised after the handler returned, while its answer is rendered; answered with a body, as applications extending
     * {@code ResponseEntityExceptionHandler} do, instead of Spring MVC's {@code sendError}.
     */
    @ExceptionHandler(org.springframework.web.HttpMediaTypeNotAcceptableException.class)
    public ResponseEntity<ProblemDetail> notAcceptable(org.springframework.web.HttpMediaTypeNotAcceptableException e) {
        return ResponseEntity.status(e.getStatusCode()).body(e.getBody());
    }
}
