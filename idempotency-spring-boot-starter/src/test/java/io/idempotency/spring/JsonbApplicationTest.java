package io.idempotency.spring;

import org.springframework.test.context.TestPropertySource;

/** The application reads and writes JSON with JSON-B ({@code spring-boot-starter-jsonb}, Eclipse Yasson). */
@TestPropertySource(properties = "spring.http.converters.preferred-json-mapper=jsonb")
class JsonbApplicationTest extends JsonStackApplicationTest {

    @Override
    String converterClass() {
        return "org.springframework.http.converter.json.JsonbHttpMessageConverter";
    }

    @Override
    String jsonContentType() {
        return "application/json;charset=UTF-8";
    }

    @Override
    boolean readsAByteOrderMark() {
        return false;
    }

    @Override
    boolean readsUtf16WithoutACharset() {
        return false;
    }
}
