package io.idempotency.sample.payment;

import org.springframework.core.Ordered;
import org.springframework.core.annotation.Order;
import org.springframework.http.HttpHeaders;
import org.springframework.http.ProblemDetail;
import org.springframework.http.ResponseEntity;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.RestControllerAdvice;

/**
 * The refusals of {@code POST /provider/notifications} as {@code application/problem+json}. Ordered before
 * {@link PaymentExceptionHandler}, which answers everything else (an unreadable body, unexpected failures).
 */
@RestControllerAdvice(assignableTypes = ProviderNotificationController.class)
@Order(Ordered.HIGHEST_PRECEDENCE)
public class ProviderNotificationExceptionHandler {

    /** The refusal's status and problem, with {@code Retry-After} when a later delivery can succeed. */
    @ExceptionHandler(NotificationRefusedException.class)
    public ResponseEntity<ProblemDetail> refused(NotificationRefusedException e) {
        ProblemDetail problem = ProblemDetail.forStatusAndDetail(e.status(), e.getMessage());
        problem.setType(e.type());
        problem.setTitle(e.title());
        if (!e.errors().isEmpty()) {
            problem.setProperty("errors", e.errors());
        }
        ResponseEntity.HeadersBuilder<?> answer = ResponseEntity.of(problem);
        if (e.retryAfter() != null) {
            answer.header(HttpHeaders.RETRY_AFTER, String.valueOf(e.retryAfter().toSeconds()));
        }
        return answer.build();
    }
}
