package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.springframework.aop.support.AopUtils;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Import;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * A controller declared by an interface and proxied through it ({@code spring.aop.proxy-target-class=false}), with
 * {@code @Idempotent} on the implementing method: the proxy is called with the interface's method, and the annotation
 * must still take effect.
 */
@SpringBootTest(classes = JdkProxiedControllerIntegrationTest.App.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT, properties = "spring.aop.proxy-target-class=false")
@Tag("container")
class JdkProxiedControllerIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();
    private static final AtomicInteger RUNS = new AtomicInteger();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import({TransfersController.class, RefundsController.class})
    static class App {
    }

    @RestController
    public interface TransfersApi {
        @PostMapping("/jdk-proxied/transfers")
        String create();
    }

    public static class TransfersController implements TransfersApi {
        @Override
        @Idempotent
        public String create() {
            return "transfer " + RUNS.incrementAndGet();
        }
    }

    @RestController
    public interface RefundsApi {
        @PostMapping("/jdk-proxied/refunds")
        String refund(@org.springframework.web.bind.annotation.RequestBody java.util.Map<String, Object> request);
    }

    /** Its parameter is named otherwise than the interface's, and its expressions name it as it is named here. */
    public static class RefundsController implements RefundsApi {
        @Override
        @Idempotent(key = "#refund['reference']", fingerprint = "#refund['amount']")
        public String refund(java.util.Map<String, Object> refund) {
            return "refund " + RUNS.incrementAndGet();
        }
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(AsyncController.class)
    static class AsyncApp {
    }

    @RestController
    public interface AsyncApi {
        @PostMapping("/jdk-proxied/async")
        CompletableFuture<String> create();
    }

    public static class AsyncController implements AsyncApi {
        @Override
        @Idempotent
        public CompletableFuture<String> create() {
            return CompletableFuture.completedFuture("late");
        }
    }

    @LocalServerPort
    int port;

    @Autowired
    TransfersApi controller;

    @Test
    void theRetryOfARequestToAnInterfaceProxiedControllerIsAReplay() throws Exception {
        assertThat(AopUtils.isJdkDynamicProxy(controller)).as("the controller is proxied through its interface").isTrue();
        String key = UUID.randomUUID().toString();

        HttpResponse<String> first = post(key);
        HttpResponse<String> retry = post(key);

        assertThat(first.statusCode()).isEqualTo(200);
        assertThat(retry.statusCode()).isEqualTo(200);
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(retry.body()).isEqualTo(first.body());
        assertThat(RUNS).hasValue(1);
        assertThat(DATABASE.queryString("select scope from idempotency_keys where idempotency_key = '" + key + "'"))
                .isEqualTo("POST /jdk-proxied/transfers");
    }

    /**
     * The expressions are written on the implementing method, and read its parameters by the names it gives them, not
     * by those of the interface's method the proxy is called with.
     */
    @Test
    void theExpressionsReadTheParametersOfTheImplementingMethod() throws Exception {
        String reference = UUID.randomUUID().toString();
        String body = "{\"reference\":\"" + reference + "\",\"amount\":5}";
        int runs = RUNS.get();

        HttpResponse<String> first = post("/jdk-proxied/refunds", null, body);
        HttpResponse<String> retry = post("/jdk-proxied/refunds", null, body);

        assertThat(first.statusCode()).as(first.body()).isEqualTo(200);
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(retry.body()).isEqualTo(first.body());
        assertThat(RUNS).hasValue(runs + 1);
        assertThat(post("/jdk-proxied/refunds", null, "{\"reference\":\"" + reference + "\",\"amount\":6}")
                .statusCode()).isEqualTo(422);
    }

    @Test
    void theStartupChecksSeeTheAnnotationOnTheImplementingMethod() {
        SpringApplicationBuilder application = new SpringApplicationBuilder(AsyncApp.class)
                .web(WebApplicationType.SERVLET)
                .properties("spring.aop.proxy-target-class=false", "server.port=0");
        DATABASE.springProperties().forEach((name, value) -> application.properties(name + "=" + value));

        assertThatThrownBy(application::run)
                .hasMessageContaining("AsyncController.create()").hasMessageContaining("async answers");
    }

    private HttpResponse<String> post(String key) throws Exception {
        return post("/jdk-proxied/transfers", key, "{}");
    }

    private HttpResponse<String> post(String path, String key, String body) throws Exception {
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                .header("Content-Type", "application/json");
        if (key != null) {
            request.header("Idempotency-Key", key);
        }
        return HttpClient.newHttpClient().send(request.POST(HttpRequest.BodyPublishers.ofString(body)).build(),
                HttpResponse.BodyHandlers.ofString());
    }
}
