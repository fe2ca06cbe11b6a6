package io.idempotency.spring.app;

import io.idempotency.core.DefiniteFailureException;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.Idempotent;
import org.springframework.context.annotation.Configuration;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.resilience.annotation.EnableResilientMethods;
import org.springframework.resilience.annotation.Retryable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestMapping;
import org.springframework.web.bind.annotation.RestController;

import java.net.URI;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Handlers that Spring's own {@code @Retryable} runs again after a failure. Its advice is added in front of the
 * existing ones, outside the {@code @Idempotent} advice: every attempt passes through the advice again. Each handler
 * writes, then fails on its first attempt for a note, and succeeds on the next.
 */
@RestController
@RequestMapping("/retried")
public class RetryingController {

    @Configuration
    @EnableResilientMethods
    static class Resilience {
    }

    private final JdbcClient jdbc;
    private final Map<String, AtomicInteger> attempts = new ConcurrentHashMap<>();

    public RetryingController(JdbcClient jdbc) {
        this.jdbc = jdbc;
    }

    /** Attempts made for {@code note}. */
    public int attempts(String note) {
        AtomicInteger count = attempts.get(note);
        return count == null ? 0 : count.get();
    }

    @PostMapping("/orders")
    @Idempotent
    @Retryable(maxRetries = 2, delay = 0)
    public ResponseEntity<Map<String, Object>> order(@RequestBody OrderController.OrderRequest request) {
        return insertThenFailOnce(request, "/retried/orders/", new IllegalStateException("a transient failure"));
    }

    @PostMapping("/declined-charges")
    @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "30s")
    @Retryable(maxRetries = 2, delay = 0)
    public ResponseEntity<Map<String, Object>> declinedCharge(@RequestBody OrderController.OrderRequest request) {
        return insertThenFailOnce(request, "/retried/declined-charges/",
                new DefiniteFailureException("declined, nothing charged"));
    }

    @PostMapping("/unknown-charges")
    @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "30s")
    @Retryable(maxRetries = 2, delay = 0)
    public ResponseEntity<Map<String, Object>> unknownCharge(@RequestBody OrderController.OrderRequest request) {
        return insertThenFailOnce(request, "/retried/unknown-charges/",
                new IllegalStateException("the gateway timed out: did the charge happen?"));
    }

    private ResponseEntity<Map<String, Object>> insertThenFailOnce(OrderController.OrderRequest request, String path,
                                                                   RuntimeException failure) {
        long id = jdbc.sql("insert into orders (note) values (?) returning id").param(request.note())
                .query(Long.class).single();
        if (attempts.computeIfAbsent(request.note(), note -> new AtomicInteger()).incrementAndGet() == 1) {
            throw failure;
        }
        return ResponseEntity.created(URI.create(path + id)).body(Map.of("id", id));
    }
}
