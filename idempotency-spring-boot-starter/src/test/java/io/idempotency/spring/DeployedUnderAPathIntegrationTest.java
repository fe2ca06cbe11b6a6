package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.core.RequestFingerprint;
import io.idempotency.testkit.Async;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Import;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.stereotype.Controller;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.ResponseBody;

import java.io.IOException;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Idempotent endpoints of an application that is not deployed at the root of its server: under a context path
 * ({@code server.servlet.context-path}), under a DispatcherServlet path ({@code spring.mvc.servlet.path}), or behind a
 * proxy that names the prefix it strips ({@code X-Forwarded-Prefix}, read by Spring's {@code ForwardedHeaderFilter}).
 * Each subclass deploys this application one way. Over real HTTP, read off the socket:
 * <ul>
 *   <li>the scope is the HTTP method and the route template alone, as the startup checks compute it: without the
 *       context path or the servlet path, so that a route whose default scope the startup checks accept (255
 *       characters) is also claimed under it;</li>
 *   <li>the fingerprint's concrete path, and the {@code instance} of the library's problems, are the path as the
 *       application sees it ({@code getRequestURI()}: with the context path and the servlet path, and behind the
 *       proxy the forwarded prefix in place of the context path);</li>
 *   <li>the replay is the first answer, a relative {@code Location} and a redirect included; a HEAD is replayed; an
 *       {@code @Idempotent} handler reached by a forward from inside the dispatcher is still refused.</li>
 * </ul>
 */
@SpringBootTest(classes = DeployedUnderAPathIntegrationTest.App.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = "idempotency.in-flight-wait=200ms")
@Tag("container")
abstract class DeployedUnderAPathIntegrationTest {

    static final TestPostgres.Database DATABASE = TestDatabases.withOrders();

    /** A route as long as a default scope can be: "POST " and it are 255 characters, the column's size. */
    static final String LONGEST_ROUTE = "/rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr"
            + "rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr"
            + "rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr";

    /** Requests the handler holds until the test lets them go, by their note. */
    static final Map<String, Hold> HOLDS = new ConcurrentHashMap<>();
    static final Map<String, AtomicInteger> CONFIRMATIONS = new ConcurrentHashMap<>();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(OrdersController.class)
    static class App {
    }

    record Hold(CountDownLatch entered, CountDownLatch released) {
        Hold() {
            this(new CountDownLatch(1), new CountDownLatch(1));
        }
    }

    @Controller
    public static class OrdersController {

        private final JdbcClient jdbc;

        public OrdersController(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        private long insert(String note) {
            return jdbc.sql("insert into orders (note) values (?) returning id").param(note).query(Long.class).single();
        }

        /** Answers with a Location relative to the request's URL: {@code orders/7} from {@code …/orders}. */
        @PostMapping("/orders")
        @Idempotent
        public ResponseEntity<String> create(@RequestBody String note) throws InterruptedException {
            Hold hold = HOLDS.get(note);
            if (hold != null) {
                hold.entered().countDown();
                hold.released().await(10, TimeUnit.SECONDS);
            }
            long id = insert(note);
            return ResponseEntity.created(URI.create("orders/" + id)).body("order " + id + ": " + note);
        }

        /** Post/Redirect/Get: a redirect view, which Spring MVC makes relative to the context path. */
        @PostMapping("/checkouts")
        @Idempotent
        public String checkout(@RequestBody String note) {
            return "redirect:/orders/" + insert(note);
        }

        @PostMapping(LONGEST_ROUTE)
        @Idempotent
        @ResponseBody
        public String longRoute(@RequestBody String note) {
            return "order " + insert(note);
        }

        /** An old route that forwards (from inside the dispatcher) to the idempotent one. */
        @PostMapping("/legacy/orders")
        public String legacy(@Value("${spring.mvc.servlet.path:}") String servletPath) {
            return "forward:" + servletPath + "/orders";
        }

        /** Confirms by a link: a GET with an effect, made idempotent for GET, and so for HEAD. */
        @GetMapping("/confirmations")
        @Idempotent(methods = "GET")
        @ResponseBody
        public String confirm(@RequestParam String token) {
            return "confirmation " + CONFIRMATIONS.computeIfAbsent(token, t -> new AtomicInteger()).incrementAndGet()
                    + " of " + token;
        }
    }

    @LocalServerPort
    int port;

    /** The path the client sends before the application's routes. */
    abstract String sentPrefix();

    /** The path before the application's routes as the application reads it ({@code getRequestURI()}). */
    String seenPrefix() {
        return sentPrefix();
    }

    /** The context path as the application reads it, which a redirect view puts before its target. */
    abstract String contextPath();

    /** The header lines a proxy in front of the application adds to every request. */
    String proxyHeaders() {
        return "";
    }

    @Test
    void theFirstAnswerIsReplayedByteForByteUnderTheRouteTemplateAsScope() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "first-" + key;

        String first = post("/orders", key, note);
        String replay = post("/orders", key, note);

        assertThat(first).startsWith("HTTP/1.1 201 ").doesNotContain("Idempotent-Replayed")
                .containsPattern("\r\nLocation: orders/\\d+\r\n").endsWith("\r\n\r\norder " + id(first) + ": " + note);
        assertThat(replay).contains("\r\nIdempotent-Replayed: true\r\n");
        assertThat(withoutDateAndMarker(replay)).isEqualTo(withoutDateAndMarker(first));
        assertThat(rows(note)).isEqualTo(1);
        assertThat(stored(key, "scope")).isEqualTo("POST /orders");
        assertThat(stored(key, "request_hash")).as("the concrete path as the application sees it")
                .isEqualTo(RequestFingerprint.of("POST", seenPrefix() + "/orders", null,
                        note.getBytes(StandardCharsets.UTF_8)));
    }

    @Test
    void theLibrarysProblemsNameThePathAsTheApplicationSeesIt() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "problems-" + key;

        String first = post("/orders", key, note);
        String other = post("/orders", key, note + " (changed)");
        String keyless = post("/orders", null, note);

        assertThat(first).startsWith("HTTP/1.1 201 ");
        assertThat(other).startsWith("HTTP/1.1 422 ").contains("idempotency-key-mismatch")
                .contains("\"instance\":\"" + seenPrefix() + "/orders\"");
        assertThat(keyless).startsWith("HTTP/1.1 400 ").contains("idempotency-key-missing")
                .contains("\"instance\":\"" + seenPrefix() + "/orders\"");
        assertThat(rows(note)).isEqualTo(1);
        assertThat(rows(note + " (changed)")).isZero();
    }

    @Test
    void aDuplicateWhileTheFirstRunsIsAnswered409() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "held-" + key;
        Hold hold = new Hold();
        HOLDS.put(note, hold);
        try {
            CompletableFuture<String> first = Async.supply(() -> {
                try {
                    return post("/orders", key, note);
                } catch (IOException e) {
                    throw new IllegalStateException(e);
                }
            });
            assertThat(hold.entered().await(10, TimeUnit.SECONDS)).as("the first request runs").isTrue();

            String duplicate = post("/orders", key, note);
            hold.released().countDown();

            assertThat(duplicate).startsWith("HTTP/1.1 409 ").contains("idempotency-request-in-progress")
                    .contains("\r\nRetry-After: ").contains("\"instance\":\"" + seenPrefix() + "/orders\"");
            assertThat(first.get(10, TimeUnit.SECONDS)).startsWith("HTTP/1.1 201 ");
        } finally {
            hold.released().countDown();
            HOLDS.remove(note);
        }
        assertThat(post("/orders", key, note)).startsWith("HTTP/1.1 201 ").contains("Idempotent-Replayed: true");
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void aRedirectIsReplayedWithItsLocation() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "checkout-" + key;

        String first = post("/checkouts", key, note);
        String replay = post("/checkouts", key, note);

        assertThat(first).startsWith("HTTP/1.1 302 ")
                .containsPattern("\r\nLocation: " + Pattern.quote(contextPath() + "/orders/") + "\\d+\r\n");
        assertThat(withoutDateAndMarker(replay)).isEqualTo(withoutDateAndMarker(first));
        assertThat(replay).contains("\r\nIdempotent-Replayed: true\r\n");
        assertThat(rows(note)).isEqualTo(1);
    }

    /** The startup checks accept this route's default scope at 255 characters: the claim must fit it as well. */
    @Test
    void theLongestDefaultScopeTheStartupChecksAcceptIsClaimed() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "long-" + key;

        String first = post(LONGEST_ROUTE, key, note);
        String replay = post(LONGEST_ROUTE, key, note);

        assertThat(first).startsWith("HTTP/1.1 200 ");
        assertThat(replay).startsWith("HTTP/1.1 200 ").contains("Idempotent-Replayed: true");
        assertThat(stored(key, "scope")).isEqualTo("POST " + LONGEST_ROUTE).hasSize(255);
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void anIdempotentHandlerReachedThroughAForwardIsRefusedAndWritesNothing() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "forwarded-" + key;

        String forwarded = post("/legacy/orders", key, note);

        assertThat(forwarded).startsWith("HTTP/1.1 500 ");
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
    }

    @Test
    void aHeadRequestIsIdempotentUnderItsOwnScope() throws Exception {
        String token = UUID.randomUUID().toString();
        String key = UUID.randomUUID().toString();

        String first = head(token, key);
        String again = head(token, key);

        String length = "Content-Length: " + ("confirmation 1 of " + token).length() + "\r\n";
        assertThat(first).startsWith("HTTP/1.1 200 ").doesNotContain("Idempotent-Replayed").contains(length)
                .endsWith("\r\n\r\n");
        assertThat(again).startsWith("HTTP/1.1 200 ").contains("Idempotent-Replayed: true").contains(length)
                .endsWith("\r\n\r\n");
        assertThat(CONFIRMATIONS.get(token)).hasValue(1);
        assertThat(stored(key, "scope")).isEqualTo("HEAD /confirmations");
    }

    String post(String route, String key, String note) throws IOException {
        return post(sentPrefix() + route, proxyHeaders(), key, note);
    }

    String post(String path, String headers, String key, String note) throws IOException {
        byte[] body = note.getBytes(StandardCharsets.UTF_8);
        return OrdersApplicationTest.raw(port, "POST " + path + " HTTP/1.1\r\nHost: localhost\r\n" + headers
                + "Content-Type: text/plain;charset=UTF-8\r\nContent-Length: " + body.length + "\r\n"
                + (key == null ? "" : "Idempotency-Key: " + key + "\r\n") + "Connection: close\r\n\r\n"
                + new String(body, StandardCharsets.ISO_8859_1));
    }

    private String head(String token, String key) throws IOException {
        return OrdersApplicationTest.raw(port, "HEAD " + sentPrefix() + "/confirmations?token=" + token
                + " HTTP/1.1\r\nHost: localhost\r\n" + proxyHeaders() + "Idempotency-Key: " + key
                + "\r\nConnection: close\r\n\r\n");
    }

    /** The answer without the time it was sent and the replay's marker: what a replay repeats, byte for byte. */
    static String withoutDateAndMarker(String answer) {
        return answer.replaceFirst("\r\nDate: [^\r]*", "").replace("\r\nIdempotent-Replayed: true", "");
    }

    private static long id(String answer) {
        Matcher matcher = Pattern.compile("\r\nLocation: orders/(\\d+)\r\n").matcher(answer);
        assertThat(matcher.find()).isTrue();
        return Long.parseLong(matcher.group(1));
    }

    static long rows(String note) {
        return TestDatabases.rows(DATABASE, note);
    }

    static long keyRows(String key) {
        return TestDatabases.keyRows(DATABASE, key);
    }

    static String stored(String key, String column) {
        return DATABASE.queryString("select " + column + " from idempotency_keys where idempotency_key = '" + key + "'");
    }
}
