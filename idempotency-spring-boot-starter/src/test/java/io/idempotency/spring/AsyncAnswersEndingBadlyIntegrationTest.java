package io.idempotency.spring;

import io.idempotency.spring.app.StreamingController;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The filter wraps every request whose method some {@code @Idempotent} endpoint takes, also those of endpoints that
 * are not idempotent: there an async answer that times out or fails after it began must reach the client as it would
 * without the filter. Each endpoint of {@link StreamingController} answers POST (wrapped) and GET (not wrapped: no
 * endpoint of the test application is idempotent for GET), and the two answers are compared byte for byte, but for
 * what differs between any two answers (the {@code Date} header, an error page's time stamp).
 */
class AsyncAnswersEndingBadlyIntegrationTest extends OrdersApplicationTest {

    @ParameterizedTest
    @ValueSource(strings = {"events-timeout-handled", "events-timeout", "events-error", "emitter-error-early",
            "stream-error", "deferred-timeout-result", "task-timeout"})
    void aWrappedAsyncAnswerEndsAsAnUnwrappedOneDoes(String kind) throws Exception {
        String key = UUID.randomUUID().toString();
        String note = kind + "-" + key;

        String wrapped = answer("POST", kind, key, note);
        String unwrapped = answer("GET", kind, key, note);

        assertThat(comparable(wrapped)).isEqualTo(comparable(unwrapped));
        assertThat(wrapped).as("the answer began as the application wrote it").contains(switch (kind) {
            case "events-timeout-handled", "events-timeout", "events-error" -> "data:first " + note + "\n\n";
            case "deferred-timeout-result", "task-timeout" -> "fallback " + note;
            default -> "\"status\":500"; // Spring MVC answers these with the error page, wrapped or not
        });
        assertThat(keyRows(key)).isZero();
    }

    @Test
    void theComparisonSeesAnAnswerThatDiffers() throws Exception {
        String key = UUID.randomUUID().toString();

        assertThat(comparable(answer("POST", "events-timeout-handled", key, "one")))
                .isNotEqualTo(comparable(answer("GET", "events-timeout-handled", key, "two")));
    }

    /** The answer to {@code method} on {@code /streams/<kind>}, read to the end of the connection, byte for byte. */
    private String answer(String method, String kind, String key, String note) throws Exception {
        String answer = raw(method + " /streams/" + kind + "?note=" + note + " HTTP/1.1\r\nHost: localhost\r\n"
                + "Idempotency-Key: " + key + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        assertThat(answer).as("%s %s", method, kind).startsWith("HTTP/1.1 ");
        return answer;
    }

    /** {@code answer} without what differs between any two answers: the time it was sent. */
    private static String comparable(String answer) {
        return answer.replaceAll("(?im)^Date: [^\r\n]*\r\n", "")
                .replaceAll("\"timestamp\":\"[^\"]*\"", "\"timestamp\":\"\"");
    }
}
