package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import jakarta.servlet.FilterChain;
import jakarta.servlet.ServletException;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.boot.web.servlet.FilterRegistrationBean;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Import;
import org.springframework.http.HttpStatus;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.bind.annotation.DeleteMapping;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.filter.OncePerRequestFilter;
import org.springframework.web.filter.ShallowEtagHeaderFilter;
import org.springframework.web.util.ContentCachingRequestWrapper;
import org.springframework.web.util.ContentCachingResponseWrapper;

import java.io.IOException;
import java.io.Reader;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CopyOnWriteArrayList;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Filters applications commonly register around the library's: a logging filter that wraps the request and the answer
 * in Spring's {@code ContentCachingRequestWrapper} and {@code ContentCachingResponseWrapper}, before the library's or
 * after it; {@code ShallowEtagHeaderFilter} on an endpoint made idempotent for GET, before or after; and Spring's
 * {@code HiddenHttpMethodFilter} ({@code spring.mvc.hiddenmethod.filter.enabled}), whose form parameter
 * {@code _method} turns a POST into the method the handler is mapped to. Also a handler that reads its body through
 * {@code getReader()}, after the library has read it ahead.
 */
@SpringBootTest(classes = ApplicationFiltersIntegrationTest.App.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = "spring.mvc.hiddenmethod.filter.enabled=true")
@Tag("container")
class ApplicationFiltersIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestDatabases.withOrders();
    /** What the logging filters saw of each exchange, after their chain: where, request body, status, answer body. */
    private static final List<List<String>> LOGGED = new CopyOnWriteArrayList<>();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(FilteredController.class)
    static class App {

        @Bean
        FilterRegistrationBean<OncePerRequestFilter> loggingBeforeIdempotency() {
            return registered(new Logging("before"), IdempotencyFilter.ORDER - 1, "/before/*");
        }

        @Bean
        FilterRegistrationBean<OncePerRequestFilter> loggingAfterIdempotency() {
            return registered(new Logging("after"), IdempotencyFilter.ORDER + 1, "/after/*");
        }

        @Bean
        FilterRegistrationBean<OncePerRequestFilter> etagBeforeIdempotency() {
            return registered(new ShallowEtagHeaderFilter(), IdempotencyFilter.ORDER - 1, "/etag/before/*");
        }

        @Bean
        FilterRegistrationBean<OncePerRequestFilter> etagAfterIdempotency() {
            return registered(new ShallowEtagHeaderFilter(), IdempotencyFilter.ORDER + 1, "/etag/after/*");
        }

        private static FilterRegistrationBean<OncePerRequestFilter> registered(OncePerRequestFilter filter, int order,
                                                                               String path) {
            FilterRegistrationBean<OncePerRequestFilter> registration = new FilterRegistrationBean<>(filter);
            registration.addUrlPatterns(path);
            registration.setOrder(order);
            return registration;
        }
    }

    /** Logs each exchange from Spring's content-caching wrappers, as request-logging filters do. */
    static final class Logging extends OncePerRequestFilter {
        private final String where;

        Logging(String where) {
            this.where = where;
        }

        @Override
        protected void doFilterInternal(HttpServletRequest request, HttpServletResponse response, FilterChain chain)
                throws ServletException, IOException {
            ContentCachingRequestWrapper cachingRequest = new ContentCachingRequestWrapper(request, 1 << 20);
            ContentCachingResponseWrapper cachingResponse = new ContentCachingResponseWrapper(response);
            try {
                chain.doFilter(cachingRequest, cachingResponse);
            } finally {
                LOGGED.add(List.of(where, new String(cachingRequest.getContentAsByteArray(), StandardCharsets.UTF_8),
                        String.valueOf(cachingResponse.getStatus()),
                        new String(cachingResponse.getContentAsByteArray(), StandardCharsets.UTF_8)));
                cachingResponse.copyBodyToResponse();
            }
        }
    }

    @RestController
    public static class FilteredController {
        private final JdbcClient jdbc;

        FilteredController(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        private long insert(String note) {
            return jdbc.sql("insert into orders (note) values (?) returning id").param(note).query(Long.class)
                    .single();
        }

        @PostMapping({"/before/orders", "/after/orders"})
        @Idempotent
        public ResponseEntity<Map<String, Object>> create(@RequestBody Map<String, String> order) {
            long id = insert(order.get("note"));
            return ResponseEntity.status(HttpStatus.CREATED).header("Location", "/orders/" + id)
                    .body(Map.of("id", id, "note", order.get("note")));
        }

        /** Answers 201 with a type, a location and no body. */
        @PostMapping({"/before/orders/bare", "/after/orders/bare"})
        @Idempotent
        public ResponseEntity<Void> createBare(@RequestBody Map<String, String> order) {
            long id = insert(order.get("note"));
            return ResponseEntity.status(HttpStatus.CREATED).header("Location", "/orders/" + id)
                    .header("Content-Type", "application/vnd.order-created").build();
        }

        /** Reads its body itself, through the request's reader, and answers what it read. */
        @PostMapping({"/read", "/after/read"})
        @Idempotent
        public String read(HttpServletRequest request) throws IOException {
            StringBuilder text = new StringBuilder();
            try (Reader reader = request.getReader()) {
                char[] buffer = new char[1000];
                int n;
                while ((n = reader.read(buffer)) != -1) {
                    text.append(buffer, 0, n);
                }
            }
            insert("read-" + text.length() + "-" + text.substring(0, 36));
            return text.toString();
        }

        @PostMapping("/things/{id}")
        @Idempotent
        public String post(@PathVariable String id, @RequestParam String note) {
            insert(note);
            return "posted " + id;
        }

        @DeleteMapping("/things/{id}")
        @Idempotent(methods = "DELETE")
        public String delete(@PathVariable String id, @RequestParam String note) {
            insert(note);
            return "deleted " + id;
        }

        /** A GET with an effect, made idempotent for GET; its answer is the same for every run. */
        @GetMapping({"/etag/before/confirmations", "/etag/after/confirmations"})
        @Idempotent(methods = "GET")
        public String confirm(@RequestParam String token) {
            insert(token);
            return "confirmed " + token;
        }
    }

    @LocalServerPort
    int port;

    private final HttpClient http = HttpClient.newHttpClient();

    private HttpResponse<String> send(HttpRequest request) throws IOException, InterruptedException {
        return http.send(request, HttpResponse.BodyHandlers.ofString());
    }

    private HttpRequest.Builder to(String path) {
        return HttpRequest.newBuilder(URI.create("http://localhost:" + port + path));
    }

    private HttpResponse<String> post(String path, String key, String type, String body)
            throws IOException, InterruptedException {
        return send(to(path).header("Idempotency-Key", key).header("Content-Type", type)
                .POST(HttpRequest.BodyPublishers.ofString(body)).build());
    }

    private HttpResponse<String> get(String path, String key, String ifNoneMatch)
            throws IOException, InterruptedException {
        HttpRequest.Builder request = to(path).header("Idempotency-Key", key);
        if (ifNoneMatch != null) {
            request.header("If-None-Match", ifNoneMatch);
        }
        return send(request.build());
    }

    private static long rows(String note) {
        return TestDatabases.rows(DATABASE, note);
    }

    private static long keyRows(String key) {
        return TestDatabases.keyRows(DATABASE, key);
    }

    /** What the logging filter {@code where} saw of the exchanges whose request body mentions {@code text}. */
    private static List<List<String>> logged(String where, String text) {
        return LOGGED.stream().filter(entry -> entry.get(0).equals(where) && entry.get(1).contains(text)).toList();
    }

    /** A first request to {@code path}, its replay and its key reused with another body. */
    private record Exchanges(String note, String body, HttpResponse<String> first, HttpResponse<String> replay,
                             HttpResponse<String> reused) {
    }

    /**
     * Sends a first request, its replay and the key reused with another body to {@code path}, and checks what every
     * client gets of them, whatever filter stands around the library's: the answer, the same one replayed with its
     * location and type, 422, and one row written.
     */
    private Exchanges firstReplayAndReuse(String path, String notePrefix) throws Exception {
        String key = UUID.randomUUID().toString();
        String note = notePrefix + key;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<String> first = post(path, key, "application/json", body);
        HttpResponse<String> replay = post(path, key, "application/json", body);
        HttpResponse<String> reused = post(path, key, "application/json", "{\"note\":\"" + note + "-other\"}");

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(first.body()).contains(note);
        assertThat(replay.statusCode()).isEqualTo(201);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(replay.headers().firstValue("Location")).isEqualTo(first.headers().firstValue("Location"))
                .isPresent();
        assertThat(replay.headers().firstValue("Content-Type")).isEqualTo(first.headers().firstValue("Content-Type"));
        assertThat(reused.statusCode()).isEqualTo(422);
        assertThat(rows(note)).isEqualTo(1);
        return new Exchanges(note, body, first, replay, reused);
    }

    @Test
    void aLoggingFilterBeforeTheLibraryLogsEachBodyWithTheAnswerItsClientGot() throws Exception {
        Exchanges exchanges = firstReplayAndReuse("/before/orders", "logged-before-");
        String note = exchanges.note();
        String body = exchanges.body();

        assertThat(logged("before", note)).as("the body each request was read with, and the answer it was sent")
                .containsExactly(List.of("before", body, "201", exchanges.first().body()),
                        List.of("before", body, "201", exchanges.replay().body()),
                        List.of("before", "{\"note\":\"" + note + "-other\"}", "422", exchanges.reused().body()));
    }

    @Test
    void aLoggingFilterAfterTheLibraryLeavesTheAnswerAndItsReplayWhole() throws Exception {
        Exchanges exchanges = firstReplayAndReuse("/after/orders", "logged-after-");
        HttpResponse<String> first = exchanges.first();

        assertThat(first.headers().firstValue("Content-Length")).hasValue(String.valueOf(first.body().length()));
        assertThat(logged("after", exchanges.note()).get(0)).as("the handler's answer, as it passed the filter")
                .isEqualTo(List.of("after", exchanges.body(), "201", first.body()));

        // an answer without a body keeps the type and the location the handler gave it, through the wrapper too
        String bareKey = UUID.randomUUID().toString();
        String bare = "{\"note\":\"bare-" + bareKey + "\"}";
        HttpResponse<String> created = post("/after/orders/bare", bareKey, "application/json", bare);
        HttpResponse<String> createdAgain = post("/after/orders/bare", bareKey, "application/json", bare);

        assertThat(created.statusCode()).isEqualTo(201);
        assertThat(created.headers().firstValue("Content-Type")).hasValue("application/vnd.order-created");
        assertThat(createdAgain.statusCode()).isEqualTo(201);
        assertThat(createdAgain.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(createdAgain.headers().firstValue("Content-Type")).hasValue("application/vnd.order-created");
        assertThat(createdAgain.headers().firstValue("Location")).isEqualTo(created.headers().firstValue("Location"))
                .isPresent();
        assertThat(createdAgain.body()).isEmpty();
        assertThat(rows("bare-" + bareKey)).isEqualTo(1);
    }

    @Test
    void aHandlerReadingItsBodyThroughTheReaderReadsAllOfItAfterTheLibraryReadItAhead() throws Exception {
        // longer than what is read ahead at once, and text of more bytes than characters
        for (String path : List.of("/read", "/after/read")) {
            String key = UUID.randomUUID().toString();
            String body = key + " " + "déjà vu ".repeat(3000) + "end";

            HttpResponse<String> first = post(path, key, "text/plain;charset=UTF-8", body);
            HttpResponse<String> replay = post(path, key, "text/plain;charset=UTF-8", body);
            HttpResponse<String> reused = post(path, key, "text/plain;charset=UTF-8", body.replace("end", "enD"));

            assertThat(first.statusCode()).as(path).isEqualTo(200);
            assertThat(first.body()).as(path).isEqualTo(body);
            assertThat(replay.statusCode()).as(path).isEqualTo(200);
            assertThat(replay.headers().firstValue("Idempotent-Replayed")).as(path).hasValue("true");
            assertThat(replay.body()).as(path).isEqualTo(body);
            assertThat(reused.statusCode()).as(path).isEqualTo(422);
            assertThat(rows("read-" + body.length() + "-" + key)).as(path).isEqualTo(1);
        }
    }

    @Test
    void aHiddenMethodIsTheMethodTheRequestIsScopedAndFingerprintedBy() throws Exception {
        String key = UUID.randomUUID().toString();
        String form = "_method=DELETE&note=hidden-" + key;

        HttpResponse<String> deleted = post("/things/7", key, "application/x-www-form-urlencoded", form);
        HttpResponse<String> deletedAgain = post("/things/7", key, "application/x-www-form-urlencoded", form);
        HttpResponse<String> otherNote = post("/things/7", key, "application/x-www-form-urlencoded",
                "_method=DELETE&note=hidden-other-" + key);
        // the same key on the POST the form's action names is another operation, scoped by its own method
        HttpResponse<String> posted = post("/things/7", key, "application/x-www-form-urlencoded",
                "note=posted-" + key);

        assertThat(deleted.statusCode()).isEqualTo(200);
        assertThat(deleted.body()).isEqualTo("deleted 7");
        assertThat(deletedAgain.statusCode()).isEqualTo(200);
        assertThat(deletedAgain.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(deletedAgain.body()).isEqualTo("deleted 7");
        assertThat(otherNote.statusCode()).isEqualTo(422);
        assertThat(posted.statusCode()).isEqualTo(200);
        assertThat(posted.body()).isEqualTo("posted 7");
        assertThat(posted.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(rows("hidden-" + key)).isEqualTo(1);
        assertThat(rows("hidden-other-" + key)).isZero();
        assertThat(rows("posted-" + key)).isEqualTo(1);
        assertThat(DATABASE.queryString("select string_agg(scope, ',' order by scope) from idempotency_keys"
                + " where idempotency_key = '" + key + "'")).isEqualTo("DELETE /things/{id},POST /things/{id}");
    }

    @Test
    void anEtagFilterBeforeTheLibraryAnswersAConditionalReplayWith304AndStoresTheWholeAnswer() throws Exception {
        String token = "etag-before-" + UUID.randomUUID();
        String path = "/etag/before/confirmations?token=" + token;
        String key = UUID.randomUUID().toString();

        HttpResponse<String> first = get(path, key, null);
        String etag = first.headers().firstValue("ETag").orElseThrow();
        HttpResponse<String> conditionalReplay = get(path, key, etag);
        String otherKey = UUID.randomUUID().toString();
        HttpResponse<String> conditionalFirst = get(path, otherKey, etag);
        HttpResponse<String> unconditionalReplay = get(path, otherKey, null);

        assertThat(first.statusCode()).isEqualTo(200);
        assertThat(first.body()).isEqualTo("confirmed " + token);
        assertThat(conditionalReplay.statusCode()).isEqualTo(304);
        assertThat(conditionalReplay.headers().firstValue("ETag")).hasValue(etag);
        assertThat(conditionalReplay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(conditionalFirst.statusCode()).as("the client has the answer already").isEqualTo(304);
        assertThat(unconditionalReplay.statusCode()).as("the handler's own answer was stored, not the 304")
                .isEqualTo(200);
        assertThat(unconditionalReplay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(unconditionalReplay.body()).isEqualTo(first.body());
        assertThat(unconditionalReplay.headers().firstValue("ETag")).hasValue(etag);
        assertThat(rows(token)).as("one run for each key").isEqualTo(2);
    }

    @Test
    void anEtagFilterAfterTheLibraryHasItsTagStoredAndA304ItMakesRolledBack() throws Exception {
        String token = "etag-after-" + UUID.randomUUID();
        String path = "/etag/after/confirmations?token=" + token;
        String key = UUID.randomUUID().toString();

        HttpResponse<String> first = get(path, key, null);
        String etag = first.headers().firstValue("ETag").orElseThrow();
        HttpResponse<String> conditionalReplay = get(path, key, etag);

        assertThat(first.statusCode()).isEqualTo(200);
        assertThat(first.body()).isEqualTo("confirmed " + token);
        assertThat(conditionalReplay.statusCode()).as("replayed as stored, not compared").isEqualTo(200);
        assertThat(conditionalReplay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(conditionalReplay.headers().firstValue("ETag")).as("stored with the answer").hasValue(etag);
        assertThat(conditionalReplay.body()).isEqualTo(first.body());
        assertThat(rows(token)).isEqualTo(1);

        // a first request the filter answers 304 (the client holds the answer of another key): a status not stored,
        // so it is rolled back, and the same request without the condition runs
        String otherKey = UUID.randomUUID().toString();
        HttpResponse<String> conditionalFirst = get(path, otherKey, etag);
        assertThat(conditionalFirst.statusCode()).isEqualTo(304);
        assertThat(conditionalFirst.body()).isEmpty();
        assertThat(rows(token)).isEqualTo(1);
        assertThat(keyRows(otherKey)).isZero();

        HttpResponse<String> unconditional = get(path, otherKey, null);
        assertThat(unconditional.statusCode()).isEqualTo(200);
        assertThat(unconditional.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(unconditional.body()).isEqualTo(first.body());
        assertThat(rows(token)).isEqualTo(2);
    }
}
