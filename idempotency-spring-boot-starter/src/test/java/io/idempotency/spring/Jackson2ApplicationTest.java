package io.idempotency.spring;

import org.springframework.test.context.TestPropertySource;

/** The application reads and writes JSON with Jackson 2 ({@code spring-boot-jackson2}), deprecated but supported. */
@TestPropertySource(properties = "spring.http.converters.preferred-json-mapper=jackson2")
class Jackson2ApplicationTest extends JsonStackApplicationTest {

    @Override
    String converterClass() {
        return "org.springframework.http.converter.json.MappingJackson2HttpMessageConverter";
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
}
