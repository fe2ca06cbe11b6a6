package io.idempotency.core;

import static java.nio.charset.StandardCharsets.UTF_8;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatIllegalArgumentException;

import io.idempotency.core.StoredResponse.Header;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

class StoredResponseTest {

    @Test
    void headersRoundTripThroughText() {
        List<Header> headers = List.of(
                new Header("Content-Type", "application/json; charset=utf-8"),
                new Header("Location", "https://example.com:8443/payments/1"),
                new Header("X-Odd", "a: b: c"),           // ": " inside the value
                new Header("Link", "<https://a>; rel=\"next\""),
                new Header("Link", "<https://b>; rel=\"prev\""), // repeated, order kept
                new Header("X-Empty", ""),
                new Header("X-Spaces", "  padded  "));
        StoredResponse response = new StoredResponse(201, headers, null);

        String text = response.headersAsText();

        assertThat(text).startsWith("Content-Type: application/json; charset=utf-8\n");
        assertThat(StoredResponse.headersFromText(text)).containsExactlyElementsOf(headers);
    }

    @Test
    void noHeadersGiveEmptyTextAndBack() {
        assertThat(new StoredResponse(204, List.of(), null).headersAsText()).isEmpty();
        assertThat(StoredResponse.headersFromText("")).isEmpty();
        assertThat(StoredResponse.headersFromText(null)).isEmpty();
    }

    @Test
    void headerNamesKeepTheirCase() {
        String text = new StoredResponse(200, List.of(new Header("eTaG", "\"v1\"")), null).headersAsText();
        assertThat(StoredResponse.headersFromText(text)).containsExactly(new Header("eTaG", "\"v1\""));
    }

    @Test
    void textThatIsNotANameValueLineIsRejected() {
        assertThatIllegalArgumentException().isThrownBy(() -> StoredResponse.headersFromText("NoSeparator\n"));
        assertThatIllegalArgumentException().isThrownBy(() -> StoredResponse.headersFromText(": value\n"));
    }

    @ParameterizedTest
    @ValueSource(strings = {"X-A\nB", "X-A:B", "X-A: B", "\nX", ":"})
    void headerNamesWithLineBreakOrColonAreRejected(String name) {
        assertThatIllegalArgumentException().isThrownBy(() -> new Header(name, "v"));
    }

    @ParameterizedTest
    @ValueSource(strings = {"a\nb", "a\rb", "a\r\nX-Injected: 1", "\rX-Injected: 1", "\nX-Injected: 1"})
    void headerValuesWithLineBreaksAreRejected(String value) {
        assertThatIllegalArgumentException().isThrownBy(() -> new Header("X-A", value));
    }

    @Test
    void bodyIsCopiedOnTheWayIn() {
        byte[] input = "hello".getBytes(UTF_8);
        StoredResponse response = new StoredResponse(200, List.of(), input);

        input[0] = 'J';

        assertThat(response.body()).isEqualTo("hello".getBytes(UTF_8));
    }

    @Test
    void bodyIsCopiedOnTheWayOut() {
        StoredResponse response = new StoredResponse(200, List.of(), "hello".getBytes(UTF_8));

        response.body()[0] = 'J';

        assertThat(response.body()).isEqualTo("hello".getBytes(UTF_8));
        assertThat(response.bodyLength()).isEqualTo(5);
    }

    @Test
    void nullBodyIsEmpty() {
        StoredResponse response = new StoredResponse(204, List.of(), null);
        assertThat(response.body()).isEmpty();
        assertThat(response.bodyLength()).isZero();
    }

    @Test
    void headerListIsCopiedAndUnmodifiable() {
        List<Header> input = new java.util.ArrayList<>(List.of(new Header("ETag", "\"1\"")));
        StoredResponse response = new StoredResponse(200, input, null);

        input.add(new Header("X-Later", "x"));

        assertThat(response.headers()).containsExactly(new Header("ETag", "\"1\""));
        assertThat(response.headers()).isUnmodifiable();
    }

    @ParameterizedTest
    @ValueSource(ints = {-1, 0, 99, 600, 1000})
    void statusOutsideHttpRangeIsRejected(int status) {
        assertThatIllegalArgumentException().isThrownBy(() -> new StoredResponse(status, List.of(), null));
    }

    @ParameterizedTest
    @ValueSource(ints = {100, 599})
    void statusBoundsAreAccepted(int status) {
        assertThat(new StoredResponse(status, List.of(), null).status()).isEqualTo(status);
    }

    @Test
    void equalsAndHashCodeCompareBodyContent() {
        List<Header> headers = List.of(new Header("Content-Type", "text/plain"));
        StoredResponse a = new StoredResponse(200, headers, "body".getBytes(UTF_8));
        StoredResponse b = new StoredResponse(200, List.copyOf(headers), "body".getBytes(UTF_8));

        assertThat(a).isEqualTo(b).hasSameHashCodeAs(b);
        assertThat(a).isNotEqualTo(new StoredResponse(200, headers, "BODY".getBytes(UTF_8)));
        assertThat(a).isNotEqualTo(new StoredResponse(201, headers, "body".getBytes(UTF_8)));
        assertThat(a).isNotEqualTo(new StoredResponse(200, List.of(), "body".getBytes(UTF_8)));
        assertThat(new StoredResponse(204, List.of(), null)).isEqualTo(new StoredResponse(204, List.of(), new byte[0]));
    }
}
