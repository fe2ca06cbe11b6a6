package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.springframework.util.LinkedCaseInsensitiveMap;

import java.util.List;
import java.util.Locale;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

class HeaderNamesTest {

    @Test
    void lowersKnownAndOtherNamesAlike() {
        assertThat(HeaderNames.lowerCase("Content-Type")).isEqualTo("content-type");
        assertThat(HeaderNames.lowerCase("CONTENT-TYPE")).isEqualTo("content-type");
        assertThat(HeaderNames.lowerCase("X-Trace-Id")).isEqualTo("x-trace-id");
        assertThat(HeaderNames.lowerCase("location")).isEqualTo("location");
    }

    @Test
    void mapFindsANameInAnyCaseAndKeepsOrderAndSpellingAsSpringsMapDoes() {
        Map<String, List<String>> headers = HeaderNames.newMap();
        Map<String, List<String>> spring = new LinkedCaseInsensitiveMap<>(Locale.ROOT);
        for (String[] header : new String[][] {{"X-Trace-Id", "1"}, {"Content-Type", "application/json"},
                {"LOCATION", "/a"}, {"content-type", "text/plain"}}) {
            headers.put(header[0], List.of(header[1]));
            spring.put(header[0], List.of(header[1]));
        }
        assertThat(headers).containsExactlyEntriesOf(spring);
        headers.clear();
        headers.put("X-Trace-Id", List.of("1"));
        headers.put("Content-Type", List.of("application/json"));
        headers.put("LOCATION", List.of("/a"));
        headers.put("content-type", List.of("text/plain"));

        assertThat(headers.get("CONTENT-TYPE")).containsExactly("text/plain");
        assertThat(headers.get("Location")).containsExactly("/a");
        assertThat(headers.containsKey("x-trace-id")).isTrue();
        // a name put again in another spelling takes the new spelling and the last place, as in Spring's map
        assertThat(headers.keySet()).containsExactly("X-Trace-Id", "LOCATION", "content-type");
        headers.remove("Content-Type");
        assertThat(headers.keySet()).containsExactly("X-Trace-Id", "LOCATION");
    }
}
