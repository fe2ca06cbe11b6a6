package io.idempotency.spring.app;

import io.idempotency.core.DefiniteFailureException;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.Idempotent;
import io.idempotency.spring.IdempotentAdvisor;
import org.aopalliance.intercept.MethodInterceptor;
import org.springframework.aop.Advisor;
import org.springframework.aop.support.DefaultPointcutAdvisor;
import org.springframework.aop.support.annotation.AnnotationMatchingPointcut;
import org.springframework.beans.factory.config.BeanDefinition;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.Role;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.resilience.annotation.EnableResilientMethods;
import org.springframework.resilience.annotation.Retryable;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestMapping;
import org.springframework.web.bind.annotation.RestController;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;
import java.net.URI;
import java.util.Set;
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

        /**
         * An advice between {@code @Retryable} and {@code @Idempotent} that refuses, once, what the handler's advice
         * returned, as {@code @PostAuthorize} refuses an answer: {@code @Retryable} then makes another attempt.
         */
        @Bean
        @Role(BeanDefinition.ROLE_INFRASTRUCTURE)
        static Advisor refusingOnceAfterReturning() {
            Set<String> refused = ConcurrentHashMap.newKeySet();
            MethodInterceptor refuseOnce = invocation -> {
                Object result = invocation.proceed();
                RefusedOnce refusing = invocation.getMethod().getAnnotation(RefusedOnce.class);
                String note = ((OrderController.OrderRequest) invocation.getArguments()[0]).note();
                if ((result == null || !refusing.onlyNothing()) && refused.add(note + "/" + (result == null))) {
                    throw new IllegalStateException("the answer was refused after the handler returned");
                }
                return result;
            };
            DefaultPointcutAdvisor advisor = new DefaultPointcutAdvisor(
                    AnnotationMatchingPointcut.forMethodAnnotation(RefusedOnce.class), refuseOnce);
            advisor.setOrder(IdempotentAdvisor.ORDER - 1); // outside the @Idempotent advice
            return advisor;
        }
    }

    /** The handler's return value is refused once by an advice outside the {@code @Idempotent} one (see above). */
    @Target(ElementType.METHOD)
    @Retention(RetentionPolicy.RUNTIME)
    @interface RefusedOnce {

        /** Only when the {@code @Idempotent} advice returned nothing (a replay, a refusal: the handler did not run). */
        boolean onlyNothing() default false;
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

    /**
     * Fails its first attempt with an unknown outcome; {@code @Retryable} tries again after the claim's lease has run
     * out, so the next attempt's claim asks the resolver first.
     */
    @PostMapping("/stale-charges")
    @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "1s")
    @Retryable(maxRetries = 1, delay = 3000)
    public ResponseEntity<Map<String, Object>> staleCharge(@RequestBody OrderController.OrderRequest request) {
        return insertThenFailOnce(request, "/retried/stale-charges/",
                new IllegalStateException("the gateway timed out: did the charge happen?"));
    }

    /** The gateway's status could not be asked. */
    public static class GatewayUnreachable extends RuntimeException {
        public GatewayUnreachable() {
            super("the gateway's status API is down");
        }
    }

    @ExceptionHandler(GatewayUnreachable.class)
    ResponseEntity<String> gatewayUnreachable(GatewayUnreachable e) {
        return ResponseEntity.status(503).header("Retry-After", "5").body("the gateway cannot be asked");
    }

    @PostMapping("/refused-orders")
    @Idempotent
    @Retryable(maxRetries = 2, delay = 0)
    @RefusedOnce
    public ResponseEntity<Map<String, Object>> refusedOrder(@RequestBody OrderController.OrderRequest request) {
        return insert(request, "/retried/refused-orders/");
    }

    @PostMapping("/refused-replays")
    @Idempotent
    @Retryable(maxRetries = 2, delay = 0)
    @RefusedOnce(onlyNothing = true)
    public ResponseEntity<Map<String, Object>> refusedReplay(@RequestBody OrderController.OrderRequest request) {
        return insert(request, "/retried/refused-replays/");
    }

    private ResponseEntity<Map<String, Object>> insert(OrderController.OrderRequest request, String path) {
        long id = jdbc.sql("insert into orders (note) values (?) returning id").param(request.note())
                .query(Long.class).single();
        attempts.computeIfAbsent(request.note(), note -> new AtomicInteger()).incrementAndGet();
        return ResponseEntity.created(URI.create(path + id)).body(Map.of("id", id));
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
