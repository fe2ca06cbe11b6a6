package io.idempotency.spring;

import io.idempotency.core.StoredResponse;
import org.junit.jupiter.api.Test;
import org.springframework.test.context.TestPropertySource;

import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Set;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Which of the handler's headers are stored with its answer and replayed, when the application lists them among the
 * replayed headers: never those about the message rather than the answer (its framing, its date, its age), nor
 * those its {@code Connection} header names; and values as the container sends them. Replayed from the database
 * here; the subclass replays from the in-memory cache.
 */
@TestPropertySource(properties = {
        "idempotency.replayed-headers=Content-Type,Location,Content-Length,Date,Age,X-Upstream-Trace,X-Upstream-Region,"
                + "X-Note",
        "idempotency.replay-cache.max-entries=0"})
class StoredHeadersIntegrationTest extends OrdersApplicationTest {

    @Test
    void contentLengthIsNeverStoredTheContainerFramesTheReplayedBody() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"length-" + key + "\"}";

        HttpResponse<byte[]> first = post("/orders/upstream", key, body);
        HttpResponse<byte[]> replay = post("/orders/upstream", key, body);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(storedHeaderNames(key)).as("stored headers").contains("location").doesNotContain("content-length");
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(replay.headers().allValues("Content-Length"))
                .containsExactly(Integer.toString(replay.body().length));
    }

    @Test
    void aReplayCarriesItsOwnDateNotTheFirstAnswers() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"date-" + key + "\"}";

        HttpResponse<byte[]> first = post("/orders/upstream", key, body);
        HttpResponse<byte[]> replay = post("/orders/upstream", key, body);

        assertThat(first.statusCode()).isEqualTo(201);
        // Jetty sends a Date of its own too, before the one the handler adds
        assertThat(first.headers().allValues("Date")).as("the first answer is sent as the handler made it")
                .contains("Sun, 06 Nov 1994 08:49:37 GMT");
        assertThat(storedHeaderNames(key)).as("stored headers").doesNotContain("date");
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.headers().allValues("Date")).hasSize(1).doesNotContain("Sun, 06 Nov 1994 08:49:37 GMT");
    }

    /** An upstream's Age told how long its cache had held the answer; a replay is sent by its origin, now. */
    @Test
    void aReplayCarriesNoStoredAge() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"age-" + key + "\"}";

        HttpResponse<byte[]> first = post("/orders/upstream", key, body);
        HttpResponse<byte[]> replay = post("/orders/upstream", key, body);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(first.headers().firstValue("Age")).as("the first answer is sent as the handler made it")
                .hasValue("30");
        assertThat(storedHeaderNames(key)).as("stored headers").doesNotContain("age");
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.headers().firstValue("Age")).isEmpty();
    }

    @Test
    void fieldsNamedByTheConnectionHeaderAreNeverStored() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"connection-" + key + "\"}";

        HttpResponse<byte[]> first = post("/orders/upstream", key, body);
        HttpResponse<byte[]> replay = post("/orders/upstream", key, body);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(first.headers().firstValue("X-Upstream-Trace")).as("the first answer is sent as the handler made it")
                .isPresent();
        assertThat(storedHeaderNames(key)).as("stored headers").contains("x-upstream-region")
                .doesNotContain("x-upstream-trace", "connection");
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.headers().firstValue("X-Upstream-Region")).hasValue("eu-1");
        assertThat(replay.headers().firstValue("X-Upstream-Trace")).isEmpty();
    }

    @Test
    void theOptionsOfEveryConnectionHeaderAreLeftOutWhateverTheCaseOfItsName() {
        // a handler passing on an upstream answer's headers may pass them in lower case, and a field may be given
        // in several lines (RFC 9110, section 5.3)
        List<StoredResponse.Header> headers = List.of(new StoredResponse.Header("connection", "X-First"),
                new StoredResponse.Header("X-First", "1"), new StoredResponse.Header("Connection", "close"),
                new StoredResponse.Header("CONNECTION", "x-second"), new StoredResponse.Header("X-Second", "2"),
                new StoredResponse.Header("X-Kept", "3"));

        assertThat(IdempotencyFilter.storedHeaders(headers, Set.of("x-first", "x-second", "x-kept")))
                .containsExactly(new StoredResponse.Header("X-Kept", "3"));
    }

    @Test
    void controlCharactersInAValueAreStoredAsTheContainerSendsThem() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"control-" + key + "\"}";

        HttpResponse<byte[]> first = post("/orders/control-characters", key, body);
        HttpResponse<byte[]> replay = post("/orders/control-characters", key, body);

        assertThat(first.statusCode()).as(new String(first.body(), StandardCharsets.UTF_8)).isEqualTo(201);
        assertThat(rows("control-" + key)).isOne();
        assertThat(first.headers().firstValue("X-Note")).hasValueSatisfying(
                value -> assertThat(value).startsWith("line one  line two end"));
        assertThat(storedHeaders(key)).contains("X-Note: line one  line two end\ttab\n");
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.headers().firstValue("X-Note")).isEqualTo(first.headers().firstValue("X-Note"));
        assertThat(replay.body()).isEqualTo(first.body());
    }

    @Test
    void aValueCutInsideACharacterIsReplayedAsTheFirstAnswerCarriedIt() throws Exception {
        // no text column holds half of a surrogate pair: the driver stores a '?' in its place, which the container
        // sends, where it refused the first answer's value as it refuses any character it cannot send
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"cut-" + key + "\"}";

        HttpResponse<byte[]> first = post("/orders/cut-header", key, body);
        HttpResponse<byte[]> replay = post("/orders/cut-header", key, body);

        assertThat(first.statusCode()).as(new String(first.body(), StandardCharsets.UTF_8)).isEqualTo(201);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.headers().firstValue("X-Note")).isEqualTo(first.headers().firstValue("X-Note"));
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(rows("cut-" + key)).isOne();
    }

    @Test
    void aHeaderNameNoStoredLineCouldHoldDoesNotFailAnAnswerThatDoesNotStoreIt() throws Exception {
        // ":status" is not listed: it reaches the first answer only, as any header outside the list
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"pseudo-" + key + "\"}";

        HttpResponse<byte[]> first = post("/orders/pseudo-header", key, body);
        HttpResponse<byte[]> replay = post("/orders/pseudo-header", key, body);

        assertThat(first.statusCode()).as(new String(first.body(), StandardCharsets.UTF_8)).isEqualTo(201);
        assertThat(rows("pseudo-" + key)).isOne();
        assertThat(storedHeaderNames(key)).contains("location").doesNotContain(":status");
        assertThat(replay.statusCode()).isEqualTo(201);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.headers().firstValue("Location")).isEqualTo(first.headers().firstValue("Location"));
        assertThat(replay.body()).isEqualTo(first.body());
    }
}
