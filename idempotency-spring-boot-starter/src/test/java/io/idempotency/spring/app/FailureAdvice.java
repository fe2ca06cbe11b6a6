package io.idempotency.spring.app;

import org.springframework.http.HttpStatus;
import org.springframework.http.ProblemDetail;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.RestControllerAdvice;

import java.util.Map;

/** Maps handler exceptions to answers, as applications do: the starter must roll back whatever the status. */
@RestControllerAdvice
public class FailureAdvice {

    private final JdbcClient jdbc;

    public FailureAdvice(JdbcClient jdbc) {
        this.jdbc = jdbc;
    }

    @ExceptionHandler(OrderController.OrderFailure.class)
    public ResponseEntity<ProblemDetail> failed(OrderController.OrderFailure failure) {
        return ResponseEntity.status(failure.status).body(ProblemDetail.forStatusAndDetail(
                org.springframework.http.HttpStatusCode.valueOf(failure.status), failure.getMessage()));
    }

    /** Reads the database to answer, as a handler that looks up the record a request conflicts with does. */
    @ExceptionHandler(OrderController.OrderConflict.class)
    public ResponseEntity<Map<String, Object>> conflict(OrderController.OrderConflict conflict) {
        long rows = jdbc.sql("select count(*) from orders where note = ?").param(conflict.note).query(Long.class)
                .single();
        return ResponseEntity.status(HttpStatus.CONFLICT).body(Map.of("rows", rows));
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
