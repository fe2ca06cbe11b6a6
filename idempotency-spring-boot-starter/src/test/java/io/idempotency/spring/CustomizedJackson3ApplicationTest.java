package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.springframework.test.context.TestPropertySource;

import java.net.http.HttpResponse;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The application's Jackson 3 mapper set up by {@code spring.jackson.*}: names in snake_case, unknown properties
 * refused, and JSON read leniently (single quotes, comments). The library uses none of it: it reads bodies with its
 * own parser and replays the answer's bytes.
 */
@TestPropertySource(properties = {
        "spring.jackson.property-naming-strategy=SNAKE_CASE",
        "spring.jackson.deserialization.fail-on-unknown-properties=true",
        "spring.jackson.json.read.allow-single-quotes=true",
        "spring.jackson.json.read.allow-java-comments=true"})
class CustomizedJackson3ApplicationTest extends JsonStackApplicationTest {

    @Override
    String converterClass() {
        return "org.springframework.http.converter.json.JacksonJsonHttpMessageConverter";
    }

    @Override
    String jsonContentType() {
        return "application/json";
    }

    @Override
    boolean readsAByteOrderMark() {
        return true;
    }

    @Override
    boolean readsUtf16WithoutACharset() {
        return true;
    }

    /**
     * JSON the mapper was set to read (single quotes, comments) has no canonical form: the library refuses it with its
     * own problem before the claim, nothing written.
     */
    @Test
    void jsonTheMapperWasSetToReadLenientlyIsRefusedWithTheLibrarysProblem() throws Exception {
        String note = note();
        for (String body : new String[] {"{'note':'" + note + "','amount':'1'}",
                "/* first */ {\"note\":\"" + note + "\",\"amount\":\"1\"}"}) {
            String key = UUID.randomUUID().toString();
            HttpResponse<byte[]> refused = post(key, body);

            assertThat(refused.statusCode()).as(body).isEqualTo(400);
            assertLibraryProblem(refused, "idempotency-body-invalid", 400);
            assertThat(TestDatabases.keyRows(DATABASE, key)).as(body).isZero();
        }
        assertThat(TestDatabases.rows(DATABASE, note)).isZero();
    }
}
