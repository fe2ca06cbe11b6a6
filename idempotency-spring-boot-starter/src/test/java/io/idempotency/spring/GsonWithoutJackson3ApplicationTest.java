package io.idempotency.spring;

import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * An application that left Jackson 3 out and reads and writes JSON with Gson, Spring Boot's choice when Jackson 3 is
 * absent (no {@code preferred-json-mapper}). Runs on a class path without Jackson 3 (the build's
 * {@code without-jackson-3} run); the starter needs no JSON library of the application's.
 */
@Tag("without-jackson-3")
class GsonWithoutJackson3ApplicationTest extends JsonStackApplicationTest {

    @Override
    String converterClass() {
        return "org.springframework.http.converter.json.GsonHttpMessageConverter";
    }

    @Test
    void jackson3IsNotOnTheClassPath() {
        assertThatThrownBy(() -> Class.forName("tools.jackson.databind.json.JsonMapper"))
                .isInstanceOf(ClassNotFoundException.class);
        assertThatThrownBy(() -> Class.forName("org.springframework.boot.jackson.autoconfigure.JacksonAutoConfiguration"))
                .isInstanceOf(ClassNotFoundException.class);
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
