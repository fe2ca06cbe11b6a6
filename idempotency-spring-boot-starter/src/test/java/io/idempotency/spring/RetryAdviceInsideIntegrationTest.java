package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.testkit.TestPostgres;
import jakarta.validation.ConstraintViolationException;
import jakarta.validation.constraints.Future;
import org.aopalliance.intercept.MethodInterceptor;
import org.aopalliance.intercept.MethodInvocation;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.springframework.aop.Advisor;
import org.springframework.aop.ProxyMethodInvocation;
import org.springframework.aop.support.StaticMethodMatcherPointcutAdvisor;
import org.springframework.beans.factory.config.BeanDefinition;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.web.server.context.WebServerApplicationContext;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Import;
import org.springframework.context.annotation.Role;
import org.springframework.core.Ordered;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.validation.annotation.Validated;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestHeader;
import org.springframework.web.bind.annotation.RestController;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;
import java.lang.reflect.Method;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.time.Instant;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A retry advice that the application ordered inside the {@code @Idempotent} advice, between it and the handler, as
 * Spring Retry's {@code @EnableRetry} (order {@code LOWEST_PRECEDENCE - 1}) and Resilience4j's {@code @Retry} aspect
 * are by default: it calls the handler again through a clone of the invocation, as they do, within the attempt the
 * advice took on — one claim, one transaction. The failed call's writes must not be kept beside the next one's
 * under the key: the request is refused and rolled back whole.
 */
@Tag("container")
class RetryAdviceInsideIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestDatabases.withOrders();

    private static ConfigurableApplicationContext context;

    @Retention(RetentionPolicy.RUNTIME)
    @Target(ElementType.METHOD)
    @interface RetriedInside {

        /** Whether the advice answers with a fallback once every call failed, as a {@code @Recover} method does. */
        boolean recovers() default false;
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import({OrdersController.class, ValidatedChargesController.class})
    static class RetryingInside {

        /** Spring Retry's interceptor, as {@code @EnableRetry} orders it by default: inside the @Idempotent advice. */
        @Bean
        @Role(BeanDefinition.ROLE_INFRASTRUCTURE)
        static Advisor retryAdvisor() {
            StaticMethodMatcherPointcutAdvisor advisor = new StaticMethodMatcherPointcutAdvisor(new RetryAdvice()) {
                @Override
                public boolean matches(Method method, Class<?> targetClass) {
                    return method.isAnnotationPresent(RetriedInside.class);
                }
            };
            advisor.setOrder(Ordered.LOWEST_PRECEDENCE - 1);
            return advisor;
        }
    }

    /** Calls the method up to three times while it throws; with {@code recovers}, answers a fallback after that. */
    static final class RetryAdvice implements MethodInterceptor {

        @Override
        public Object invoke(MethodInvocation invocation) throws Throwable {
            RuntimeException last = null;
            for (int call = 0; call < 3; call++) {
                try {
                    return ((ProxyMethodInvocation) invocation).invocableClone().proceed();
                } catch (RuntimeException e) {
                    last = e;
                }
            }
            if (invocation.getMethod().getAnnotation(RetriedInside.class).recovers()) {
                return "recovered";
            }
            throw last;
        }
    }

    @RestController
    static class OrdersController {

        private final Map<String, AtomicInteger> calls = new ConcurrentHashMap<>();
        private final JdbcClient jdbc;

        OrdersController(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        /** Writes its order, then fails on its first call (a lost connection to a gateway) and succeeds after. */
        @PostMapping("/retried-inside/orders")
        @Idempotent
        @RetriedInside
        public String create(@RequestBody String note) {
            return createFailingFirst(note);
        }

        @PostMapping("/retried-inside/recovered-orders")
        @Idempotent
        @RetriedInside(recovers = true)
        public String createRecovered(@RequestBody String note) {
            return createFailingFirst(note);
        }

        /** A request without a key runs as it would without the library, its retries included. */
        @PostMapping("/retried-inside/optional-key-orders")
        @Idempotent(keyRequired = false)
        @RetriedInside
        public String createWithOptionalKey(@RequestBody String note) {
            return createFailingFirst(note);
        }

        public int calls(String note) {
            return calls.getOrDefault(note, new AtomicInteger()).get();
        }

        private String createFailingFirst(String note) {
            long id = jdbc.sql("insert into orders (note) values (?) returning id").param(note)
                    .query(Long.class).single();
            if (calls.computeIfAbsent(note, n -> new AtomicInteger()).incrementAndGet() == 1
                    && note.startsWith("failing-")) {
                throw new IllegalStateException("the gateway did not answer");
            }
            return "order " + id;
        }
    }

    /**
     * Charges in intent-first mode, its arguments checked by Spring's method-validation proxy (class-level
     * {@code @Validated}), which runs inside the retry advice: each call the retry advice makes is validated again.
     */
    @RestController
    @Validated
    static class ValidatedChargesController {

        private final AtomicInteger gatewayCalls = new AtomicInteger();

        public int gatewayCalls() {
            return gatewayCalls.get();
        }

        /**
         * Calls the gateway, which answers too late: the deadline the client set for the charge has passed when the
         * retry advice calls again, and the validation refuses that call's arguments.
         */
        @PostMapping("/retried-inside/charges")
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "30s")
        @RetriedInside
        public String charge(@RequestBody String note,
                             @RequestHeader("X-Charge-Before") @Future Instant chargeBefore) throws Exception {
            gatewayCalls.incrementAndGet();
            Thread.sleep(Math.max(0, Duration.between(Instant.now(), chargeBefore).toMillis()) + 50);
            throw new IllegalStateException("the gateway did not answer in time: did the charge happen?");
        }

        @ExceptionHandler(ConstraintViolationException.class)
        ResponseEntity<String> invalid(ConstraintViolationException e) {
            return ResponseEntity.badRequest().body(e.getMessage());
        }
    }

    @BeforeAll
    static void start() {
        SpringApplicationBuilder builder = new SpringApplicationBuilder(RetryingInside.class)
                .web(WebApplicationType.SERVLET).properties("server.port=0");
        DATABASE.springProperties().forEach((name, value) -> builder.properties(name + "=" + value));
        context = builder.run();
    }

    @AfterAll
    static void stop() {
        context.close();
    }

    @Test
    void aCallRetriedInsideTheAdviceIsRefusedAndNothingOfTheRequestIsKept() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "failing-" + key;

        HttpResponse<String> response = post("/retried-inside/orders", key, note);

        assertThat(response.statusCode()).as(response.body()).isEqualTo(500);
        assertThat(context.getBean(OrdersController.class).calls(note)).isEqualTo(1);
        assertThat(TestDatabases.rows(DATABASE, note)).as("the failed call's write").isZero();
        assertThat(TestDatabases.keyRows(DATABASE, key)).isZero();
    }

    /** The retry advice recovering from the refusal cannot make the attempt commit with the failed call's writes. */
    @Test
    void aRefusedCallThatTheRetryAdviceRecoversFromStillRollsTheRequestBack() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "failing-" + key;

        HttpResponse<String> response = post("/retried-inside/recovered-orders", key, note);

        assertThat(response.statusCode()).as(response.body()).isEqualTo(500);
        assertThat(context.getBean(OrdersController.class).calls(note)).isEqualTo(1);
        assertThat(TestDatabases.rows(DATABASE, note)).as("the failed call's write").isZero();
        assertThat(TestDatabases.keyRows(DATABASE, key)).isZero();
    }

    @Test
    void aCallThatSucceedsFirstIsAnsweredAndReplayed() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "succeeding-" + key;

        HttpResponse<String> first = post("/retried-inside/orders", key, note);
        HttpResponse<String> retry = post("/retried-inside/orders", key, note);

        assertThat(first.statusCode()).as(first.body()).isEqualTo(200);
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(retry.body()).isEqualTo(first.body());
        assertThat(TestDatabases.rows(DATABASE, note)).isEqualTo(1);
        assertThat(DATABASE.queryString("select status from idempotency_keys where idempotency_key = '" + key
                + "'")).isEqualTo("SUCCEEDED");
    }

    @Test
    void aRequestWithoutAnOptionalKeyIsRetriedAsWithoutTheLibrary() throws Exception {
        String note = "failing-" + UUID.randomUUID();

        HttpResponse<String> response = post("/retried-inside/optional-key-orders", null, note);

        assertThat(response.statusCode()).as(response.body()).isEqualTo(200);
        assertThat(context.getBean(OrdersController.class).calls(note)).isEqualTo(2);
        assertThat(TestDatabases.rows(DATABASE, note)).isEqualTo(2);
    }

    /**
     * The handler's body ran — it called the gateway — and the retry advice's next call was refused by the
     * validation: the refusal names the handler's own method and arguments, but the attempt's body had run, so the
     * outcome is unknown and the claim stays for the resolver. Released, it would let another request under the key
     * run at once and send the gateway the same downstream key.
     */
    @Test
    void aValidationRefusalAfterTheBodyRanInTheAttemptKeepsTheIntentFirstClaim() throws Exception {
        String key = UUID.randomUUID().toString();
        int port = ((WebServerApplicationContext) context).getWebServer().getPort();
        HttpRequest request = HttpRequest.newBuilder(URI.create("http://localhost:" + port + "/retried-inside/charges"))
                .header("Content-Type", "text/plain").header("Idempotency-Key", key)
                .header("X-Charge-Before", Instant.now().plusMillis(2000).toString())
                .POST(HttpRequest.BodyPublishers.ofString("charge-" + key)).build();

        HttpResponse<String> response = HttpClient.newHttpClient().send(request, HttpResponse.BodyHandlers.ofString());

        assertThat(context.getBean(ValidatedChargesController.class).gatewayCalls()).isEqualTo(1);
        assertThat(response.statusCode()).as(response.body()).isNotEqualTo(201);
        assertThat(DATABASE.queryString("select coalesce(max(status), 'none') from idempotency_keys"
                + " where idempotency_key = '" + key + "'")).as("the claim after the body ran").isEqualTo("PROCESSING");
    }

    private static HttpResponse<String> post(String path, String key, String note) throws Exception {
        int port = ((WebServerApplicationContext) context).getWebServer().getPort();
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                .header("Content-Type", "text/plain").POST(HttpRequest.BodyPublishers.ofString(note));
        if (key != null) {
            request.header("Idempotency-Key", key);
        }
        return HttpClient.newHttpClient().send(request.build(), HttpResponse.BodyHandlers.ofString());
    }
}
