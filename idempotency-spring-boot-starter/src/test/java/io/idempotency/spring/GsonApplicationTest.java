package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.springframework.test.context.TestPropertySource;

import java.net.http.HttpResponse;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/** The application reads and writes JSON with Gson ({@code spring-boot-starter-gson}). */
@TestPropertySource(properties = "spring.http.converters.preferred-json-mapper=gson")
class GsonApplicationTest extends JsonStackApplicationTest {

    @Override
    String converterClass() {
        return "org.springframework.http.converter.json.GsonHttpMessageConverter";
    }

    /**
     * Gson reads JSON leniently (single quotes, comments, NaN), the library does not: such a body, which the handler
     * would have read, is refused with the library's own problem before the claim, nothing written.
     */
    @Test
    void lenientlyWrittenJsonGsonReadsIsRefusedWithTheLibrarysProblem() throws Exception {
        String note = note();
        for (String body : new String[] {"{'note':'" + note + "','amount':'1'}",
                "/* first */ {\"note\":\"" + note + "\",\"amount\":\"1\"}",
                "{note:\"" + note + "\",amount:\"1\"}"}) {
            String key = UUID.randomUUID().toString();
            HttpResponse<byte[]> refused = post(key, body);

            assertThat(refused.statusCode()).as(body).isEqualTo(400);
            assertLibraryProblem(refused, "idempotency-body-invalid", 400);
            assertThat(TestDatabases.keyRows(DATABASE, key)).as(body).isZero();
        }
        assertThat(TestDatabases.rows(DATABASE, note)).isZero();
    }

    @Override
    String jsonContentType() {
        return "application/json;charset=UTF-8";
    }

    @Override
    boolean readsAByteOrderMark() {
        return true;
    }

    @Override
    boolean readsUtf16WithoutACharset() {
        return false;
    }
}
