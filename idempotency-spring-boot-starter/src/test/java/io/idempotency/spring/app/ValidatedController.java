package io.idempotency.spring.app;

import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.Idempotent;
import jakarta.validation.ConstraintViolationException;
import jakarta.validation.constraints.Max;
import jakarta.validation.constraints.NotNull;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.http.HttpStatus;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.validation.annotation.Validated;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestHeader;
import org.springframework.web.bind.annotation.RequestMapping;
import org.springframework.web.bind.annotation.ResponseStatus;
import org.springframework.web.bind.annotation.RestController;

import java.net.URI;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A controller validated the classic way: class-level {@code @Validated}, so its arguments are checked by Spring's
 * method-validation proxy (Spring MVC then leaves them to it), and a violation is a
 * {@link ConstraintViolationException} the application answers 400.
 */
@RestController
@Validated
@RequestMapping("/validated")
public class ValidatedController {

    private final JdbcClient jdbc;
    private final ObjectProvider<ValidatedController> self;
    private final AtomicInteger relayedCalls = new AtomicInteger();

    public ValidatedController(JdbcClient jdbc, ObjectProvider<ValidatedController> self) {
        this.jdbc = jdbc;
        this.self = self;
    }

    /** External calls {@link #relayedCharge} has made. */
    public int relayedCalls() {
        return relayedCalls.get();
    }

    /**
     * Makes its external call, then calls itself through the proxy with a quantity the validation refuses: a refusal
     * of the handler's own method and object, raised after its body ran.
     */
    @PostMapping("/relayed-charges")
    @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "30s")
    public ResponseEntity<Map<String, Object>> relayedCharge(@RequestBody OrderController.OrderRequest request,
                                                             @RequestHeader(name = "X-Quantity") @Max(10) int quantity) {
        relayedCalls.incrementAndGet();
        return self.getObject().relayedCharge(request, quantity + 10);
    }

    @PostMapping("/orders")
    @Idempotent
    public ResponseEntity<Map<String, Object>> order(@RequestBody OrderController.OrderRequest request,
                                                     @RequestHeader(name = "X-Quantity") @Max(10) int quantity) {
        return insert(request, "/validated/orders/");
    }

    @PostMapping("/charges")
    @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "30s")
    public ResponseEntity<Map<String, Object>> charge(@RequestBody OrderController.OrderRequest request,
                                                      @RequestHeader(name = "X-Quantity") @Max(10) int quantity) {
        return insert(request, "/validated/charges/");
    }

    /** Writes, then returns nothing where the validation proxy requires an answer: refused after the body ran. */
    @PostMapping("/unanswered-charges")
    @ResponseStatus(HttpStatus.CREATED)
    @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "30s")
    public @NotNull Map<String, Object> unansweredCharge(@RequestBody OrderController.OrderRequest request) {
        insert(request, "/validated/unanswered-charges/");
        return null;
    }

    private ResponseEntity<Map<String, Object>> insert(OrderController.OrderRequest request, String path) {
        long id = jdbc.sql("insert into orders (note) values (?) returning id").param(request.note())
                .query(Long.class).single();
        return ResponseEntity.created(URI.create(path + id)).body(Map.of("id", id));
    }

    @ExceptionHandler(ConstraintViolationException.class)
    ResponseEntity<Map<String, Object>> invalid(ConstraintViolationException e) {
        return ResponseEntity.status(HttpStatus.BAD_REQUEST).body(Map.of("error", e.getMessage()));
    }
}
