package io.idempotency.spring;

import io.idempotency.spring.app.TestApplication;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.http.converter.HttpMessageConverter;
import org.springframework.http.MediaType;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.servlet.mvc.method.annotation.RequestMappingHandlerAdapter;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Optional;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The test application over real HTTP on real PostgreSQL with a JSON stack other than Spring Boot's default (Jackson 3)
 * reading requests and writing answers: the library fingerprints bodies with its own canonical JSON and stores the
 * answer's bytes as written, so a retry is the same request and its answer the same bytes whichever stack the
 * application chose. Each subclass names its stack.
 */
@SpringBootTest(classes = TestApplication.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
abstract class JsonStackApplicationTest {

    static final TestPostgres.Database DATABASE = TestDatabases.withOrders();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
    }

    @LocalServerPort
    int port;

    @Autowired
    RequestMappingHandlerAdapter handlerAdapter;

    final HttpClient http = HttpClient.newHttpClient();

    /** The class of the converter this application's stack reads and writes JSON with. */
    abstract String converterClass();

    /** The Content-Type the stack writes a JSON answer with. */
    abstract String jsonContentType();

    HttpResponse<byte[]> post(String key, String contentType, byte[] body) throws Exception {
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create("http://localhost:" + port + "/orders"))
                .header("Content-Type", contentType)
                .POST(HttpRequest.BodyPublishers.ofByteArray(body));
        if (key != null) {
            request.header("Idempotency-Key", key);
        }
        return http.send(request.build(), HttpResponse.BodyHandlers.ofByteArray());
    }

    HttpResponse<byte[]> post(String key, String json) throws Exception {
        return post(key, "application/json", json.getBytes(StandardCharsets.UTF_8));
    }

    static String note() {
        return "json-" + UUID.randomUUID();
    }

    @Test
    void theApplicationReadsAndWritesJsonWithItsStack() {
        Optional<HttpMessageConverter<?>> json = handlerAdapter.getMessageConverters().stream()
                .filter(converter -> converter.canRead(Map.class, MediaType.APPLICATION_JSON))
                .findFirst();
        assertThat(json).hasValueSatisfying(converter -> assertThat(converter.getClass().getName())
                .isEqualTo(converterClass()));
    }

    @Test
    void theReplayIsTheFirstAnswerByteForByte() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = note();
        HttpResponse<byte[]> first = post(key, "{\"note\":\"" + note + "\",\"amount\":\"12.50 €\"}");
        HttpResponse<byte[]> replay = post(key, "{\"note\":\"" + note + "\",\"amount\":\"12.50 €\"}");

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(new String(first.body(), StandardCharsets.UTF_8)).contains(note).contains("12.50 €");
        assertThat(replay.statusCode()).isEqualTo(201);
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(first.headers().allValues("Content-Type")).containsExactly(jsonContentType());
        assertThat(replay.headers().allValues("Content-Type")).containsExactly(jsonContentType());
        assertThat(replay.headers().firstValue("Content-Length"))
                .isEqualTo(first.headers().firstValue("Content-Length"));
        assertThat(replay.headers().firstValue("Location")).isEqualTo(first.headers().firstValue("Location"));
        assertThat(TestDatabases.rows(DATABASE, note)).isEqualTo(1);
    }

    @Test
    void aRetryWithItsMembersReorderedAndRespacedIsTheSameRequest() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = note();
        HttpResponse<byte[]> first = post(key, "{\"note\":\"" + note + "\",\"amount\":\"12.50\"}");
        HttpResponse<byte[]> retry = post(key, " {\n  \"amount\" : \"12.50\" ,\n  \"note\" : \"" + note + "\"\n}\n");

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(retry.statusCode()).isEqualTo(201);
        assertThat(retry.body()).isEqualTo(first.body());
        assertThat(TestDatabases.rows(DATABASE, note)).isEqualTo(1);
    }

    @Test
    void aRetryWithAnotherPayloadIsRefusedAndWritesNothing() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = note();
        HttpResponse<byte[]> first = post(key, "{\"note\":\"" + note + "\",\"amount\":\"12.50\"}");
        HttpResponse<byte[]> other = post(key, "{\"note\":\"" + note + "\",\"amount\":\"12.51\"}");

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(other.statusCode()).isEqualTo(422);
        assertLibraryProblem(other, "idempotency-key-mismatch", 422);
        assertThat(TestDatabases.rows(DATABASE, note)).isEqualTo(1);
    }

    @Test
    void theLibrarysOwnProblemsAreItsOwnBytesWhateverTheStack() throws Exception {
        String note = note();
        HttpResponse<byte[]> missing = post(null, "{\"note\":\"" + note + "\",\"amount\":\"1\"}");

        assertThat(missing.statusCode()).isEqualTo(400);
        assertLibraryProblem(missing, "idempotency-key-missing", 400);
        assertThat(TestDatabases.rows(DATABASE, note)).isZero();
    }

    /**
     * A body the library reads but the application's stack cannot bind is refused by Spring MVC before the handler:
     * nothing is claimed, and the key is free for the body sent again as the stack reads it.
     */
    @Test
    void aBodyTheStackCannotBindClaimsNothing() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = note();
        HttpResponse<byte[]> broken = post(key, "{\"note\":\"" + note + "\",\"amount\":{\"value\":1}}");

        assertThat(broken.statusCode()).isEqualTo(400);
        assertThat(TestDatabases.keyRows(DATABASE, key)).isZero();
        assertThat(post(key, "{\"note\":\"" + note + "\",\"amount\":\"1\"}").statusCode()).isEqualTo(201);
        assertThat(TestDatabases.rows(DATABASE, note)).isEqualTo(1);
    }


    /**
     * Whether the stack reads a UTF-8 body that starts with a byte order mark. Where it does, the mark makes no other
     * request (the library skips it as Jackson does); where it does not, Spring MVC refuses the body before the handler.
     */
    abstract boolean readsAByteOrderMark();

    /** Whether the stack reads a UTF-16 body whose Content-Type names no charset (Jackson tells it by its zero bytes). */
    abstract boolean readsUtf16WithoutACharset();

    @Test
    void aBodyWithAByteOrderMarkIsTheSameRequestOrRefusedBeforeTheClaim() throws Exception {
        String note = note();
        byte[] json = ("{\"note\":\"" + note + "\",\"amount\":\"1\"}").getBytes(StandardCharsets.UTF_8);
        byte[] marked = new byte[json.length + 3];
        marked[0] = (byte) 0xEF;
        marked[1] = (byte) 0xBB;
        marked[2] = (byte) 0xBF;
        System.arraycopy(json, 0, marked, 3, json.length);

        assertSameRequestOrRefusedBeforeTheClaim(note, "application/json;charset=UTF-8", marked, json,
                readsAByteOrderMark());
    }

    @Test
    void aUtf16BodyWithoutACharsetIsTheSameRequestOrRefusedBeforeTheClaim() throws Exception {
        String note = note();
        String json = "{\"note\":\"" + note + "\",\"amount\":\"1\"}";

        assertSameRequestOrRefusedBeforeTheClaim(note, "application/json", json.getBytes(StandardCharsets.UTF_16LE),
                json.getBytes(StandardCharsets.UTF_8), readsUtf16WithoutACharset());
    }

    /**
     * Sends {@code body}, then {@code asUtf8} (the same JSON in plain UTF-8) under the same key: where the stack reads
     * {@code body} they are one request, run once; where it does not, Spring MVC refuses {@code body} before the
     * handler, nothing is claimed, and the key is free for {@code asUtf8}.
     */
    private void assertSameRequestOrRefusedBeforeTheClaim(String note, String contentType, byte[] body, byte[] asUtf8,
            boolean read) throws Exception {
        String key = UUID.randomUUID().toString();
        HttpResponse<byte[]> first = post(key, contentType, body);
        if (read) {
            assertThat(first.statusCode()).isEqualTo(201);
            HttpResponse<byte[]> retry = post(key, "application/json", asUtf8);
            assertThat(retry.statusCode()).isEqualTo(201);
            assertThat(retry.body()).isEqualTo(first.body());
        } else {
            assertThat(first.statusCode()).isEqualTo(400);
            assertThat(first.headers().firstValue("Content-Type")).hasValueSatisfying(
                    type -> assertThat(type).doesNotStartWith("application/problem+json"));
            assertThat(TestDatabases.keyRows(DATABASE, key)).isZero();
            assertThat(post(key, "application/json", asUtf8).statusCode()).isEqualTo(201);
        }
        assertThat(TestDatabases.rows(DATABASE, note)).isEqualTo(1);
    }

    /**
     * JSON with more after its value, comments or {@code NaN}: refused with a 400 and nothing claimed or written,
     * whether the stack reads it (Jackson 2 and JSON-B ignore what follows the value, Gson reads leniently) and the
     * library refuses it, or the stack refuses it first.
     */
    @Test
    void jsonTheLibraryCannotCanonicalizeIsRefusedWhetherOrNotTheStackReadsIt() throws Exception {
        String note = note();
        String json = "{\"note\":\"" + note + "\",\"amount\":\"1\"}";
        for (String body : new String[] {json + " {\"amount\":\"2\"}", json + " x", "/* first */ " + json,
                "{\"note\":\"" + note + "\",\"amount\":NaN}"}) {
            String key = UUID.randomUUID().toString();
            HttpResponse<byte[]> refused = post(key, body);

            assertThat(refused.statusCode()).as(body).isEqualTo(400);
            assertThat(TestDatabases.keyRows(DATABASE, key)).as(body).isZero();
        }
        assertThat(TestDatabases.rows(DATABASE, note)).isZero();
    }

    static void assertLibraryProblem(HttpResponse<byte[]> response, String type, int status) {
        assertThat(response.headers().allValues("Content-Type")).containsExactly("application/problem+json");
        assertThat(new String(response.body(), StandardCharsets.UTF_8)).startsWith("{\"type\":\""
                + ProblemResponses.DEFAULT_TYPE_BASE + type + "\",\"title\":\"")
                .contains(",\"status\":" + status + ",\"detail\":\"");
    }
}
