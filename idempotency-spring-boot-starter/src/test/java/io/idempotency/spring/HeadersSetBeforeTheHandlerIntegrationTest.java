package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Import;
import org.springframework.http.CacheControl;
import org.springframework.http.ResponseEntity;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.servlet.HandlerInterceptor;
import org.springframework.web.servlet.config.annotation.InterceptorRegistry;
import org.springframework.web.servlet.config.annotation.WebMvcConfigurer;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.List;
import java.util.Map;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Headers set on the response before the handler runs (an interceptor's {@code preHandle}, a filter after the
 * idempotency filter) that the handler sets again: as without the library, the handler's value replaces the earlier
 * one, in the first answer and in a replay, rather than both being sent.
 */
@SpringBootTest(classes = HeadersSetBeforeTheHandlerIntegrationTest.App.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = "idempotency.replayed-headers=Content-Type,Cache-Control,X-Served-By")
@Tag("container")
class HeadersSetBeforeTheHandlerIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(ReportsController.class)
    static class App implements WebMvcConfigurer {
        /** A default for every answer, which a handler may replace (as Spring's WebContentInterceptor does). */
        @Override
        public void addInterceptors(InterceptorRegistry registry) {
            registry.addInterceptor(new HandlerInterceptor() {
                @Override
                public boolean preHandle(HttpServletRequest request, HttpServletResponse response, Object handler) {
                    response.setHeader("Cache-Control", "max-age=60");
                    response.setHeader("X-Served-By", "default");
                    response.setHeader("X-Default", "kept");
                    if (request.getRequestURI().endsWith("/receipts")) {
                        // the answer's status and content type, unless the handler sets its own
                        response.setStatus(202);
                        response.setContentType("application/vnd.example+json");
                    }
                    return true;
                }
            });
        }
    }

    @RestController
    public static class ReportsController {
        @PostMapping("/reports")
        @Idempotent
        public ResponseEntity<String> create() {
            return answer();
        }

        @PostMapping("/unguarded/reports")
        public ResponseEntity<String> createUnguarded() {
            return answer();
        }

        @PostMapping("/receipts")
        @Idempotent
        public Map<String, Object> receipt() {
            return Map.of("queued", true);
        }

        @PostMapping("/unguarded/receipts")
        public Map<String, Object> receiptUnguarded() {
            return Map.of("queued", true);
        }

        private static ResponseEntity<String> answer() {
            return ResponseEntity.ok().cacheControl(CacheControl.noStore()).header("X-Served-By", "reports")
                    .body("{}");
        }
    }

    @LocalServerPort
    int port;

    private final HttpClient http = HttpClient.newHttpClient();

    @Test
    void aHeaderTheHandlerSetsAgainIsSentOnceWithItsValue() throws Exception {
        List<HttpResponse<String>> answers = unguardedThenFirstAndReplay("reports");
        HttpResponse<String> unguarded = answers.get(0);

        assertThat(unguarded.headers().allValues("Cache-Control")).containsExactly("no-store");
        assertThat(unguarded.headers().allValues("X-Served-By")).containsExactly("reports");
        for (HttpResponse<String> answer : answers.subList(1, 3)) {
            assertThat(answer.statusCode()).isEqualTo(200);
            assertThat(answer.headers().allValues("Cache-Control")).containsExactly("no-store");
            assertThat(answer.headers().allValues("X-Served-By")).containsExactly("reports");
            assertThat(answer.headers().allValues("X-Default")).as("a header only set before").containsExactly("kept");
        }
    }

    @Test
    void theStatusAndContentTypeSetBeforeTheHandlerAreTheAnswersAsWithoutTheLibrary() throws Exception {
        List<HttpResponse<String>> answers = unguardedThenFirstAndReplay("receipts");
        HttpResponse<String> unguarded = answers.get(0);

        assertThat(unguarded.statusCode()).isEqualTo(202);
        assertThat(unguarded.headers().allValues("Content-Type")).containsExactly("application/vnd.example+json");
        for (HttpResponse<String> answer : answers.subList(1, 3)) {
            assertThat(answer.statusCode()).isEqualTo(202);
            assertThat(answer.headers().allValues("Content-Type")).containsExactly("application/vnd.example+json");
            assertThat(answer.body()).isEqualTo(unguarded.body());
        }
    }

    /** The endpoint without the library, then the idempotent one twice under one key: the second is a replay. */
    private List<HttpResponse<String>> unguardedThenFirstAndReplay(String name) throws Exception {
        String key = UUID.randomUUID().toString();
        HttpResponse<String> unguarded = post("/unguarded/" + name, null);
        HttpResponse<String> first = post("/" + name, key);
        HttpResponse<String> replay = post("/" + name, key);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        return List.of(unguarded, first, replay);
    }

    private HttpResponse<String> post(String path, String key) throws Exception {
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                .POST(HttpRequest.BodyPublishers.noBody());
        if (key != null) {
            request.header("Idempotency-Key", key);
        }
        return http.send(request.build(), HttpResponse.BodyHandlers.ofString());
    }
}
