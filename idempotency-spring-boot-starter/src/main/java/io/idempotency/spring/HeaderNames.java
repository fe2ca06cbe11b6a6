package io.idempotency.spring;

import org.springframework.http.HttpHeaders;
import org.springframework.util.LinkedCaseInsensitiveMap;

import java.util.HashMap;
import java.util.Locale;
import java.util.Map;

/**
 * Header names in lower case, and maps keyed by them without regard to case. Every look-up in a
 * {@link LinkedCaseInsensitiveMap} builds the lower-case copy of the name it is given, and Spring MVC looks a held
 * answer's {@code Content-Type} up several times while it writes it: the names of the common headers, in the spelling
 * they are usually given in, are found lowered here instead.
 */
final class HeaderNames {

    private static final Map<String, String> LOWER_CASE = new HashMap<>(); // never changed after this class is loaded

    static {
        for (String name : new String[] {HttpHeaders.CONTENT_TYPE, HttpHeaders.CONTENT_LENGTH,
                HttpHeaders.CONTENT_ENCODING, HttpHeaders.CONTENT_LANGUAGE, HttpHeaders.CONTENT_DISPOSITION,
                HttpHeaders.LOCATION, HttpHeaders.SET_COOKIE, HttpHeaders.TRANSFER_ENCODING, HttpHeaders.CONNECTION,
                HttpHeaders.CACHE_CONTROL, HttpHeaders.ETAG, HttpHeaders.LAST_MODIFIED, HttpHeaders.VARY,
                HttpHeaders.EXPIRES, HttpHeaders.DATE, HttpHeaders.TRAILER, HttpHeaders.RETRY_AFTER}) {
            LOWER_CASE.put(name, name.toLowerCase(Locale.ROOT));
        }
    }

    private HeaderNames() {
    }

    /** {@code name} in lower case ({@link Locale#ROOT}). */
    static String lowerCase(String name) {
        String known = LOWER_CASE.get(name);
        return known != null ? known : name.toLowerCase(Locale.ROOT);
    }

    /** A map keyed by header names without regard to case, in the order they were first put. */
    static <V> Map<String, V> newMap() {
        return new LinkedCaseInsensitiveMap<>(Locale.ROOT) {
            @Override
            protected String convertKey(String key) {
                return lowerCase(key);
            }
        };
    }
}
