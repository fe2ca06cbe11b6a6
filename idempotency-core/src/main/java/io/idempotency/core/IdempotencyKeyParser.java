package io.idempotency.core;

import java.util.List;

/**
 * Reads the {@code Idempotency-Key} header as draft-ietf-httpapi-idempotency-key-header and RFC 9651 say, with
 * one allowance for clients that send bare tokens such as UUIDs.
 *
 * <ul>
 *   <li>A value starting with {@code "} is an RFC 9651 sf-string: printable ASCII between the quotes, where only
 *       {@code \"} and {@code \\} are escapes. Nothing may follow the closing quote (no parameters).</li>
 *   <li>Any other value is a bare key of the characters 0x21–0x7E except {@code "} and {@code ,}. A comma means
 *       that a repeated header was merged into one line, which is an error.</li>
 *   <li>The parsed key has 1–255 characters. Leading and trailing spaces and tabs around the field value are
 *       ignored, as HTTP does.</li>
 * </ul>
 *
 * So {@code "abc"} and {@code abc} are the same key. Stateless and thread-safe.
 */
public final class IdempotencyKeyParser {

    /** Longest key accepted, in characters after parsing. */
    public static final int MAX_KEY_LENGTH = ScopedKey.MAX_LENGTH;

    /** The result of parsing: exactly one of three cases. */
    public sealed interface Result {
    }

    /** No header was sent. */
    public record Missing() implements Result {
    }

    /** A header was sent but is not a usable key; {@code reason} is safe to show to the client. */
    public record Malformed(String reason) implements Result {
    }

    /** A usable key. */
    public record Valid(String key) implements Result {
    }

    private IdempotencyKeyParser() {
    }

    /**
     * Parses every value the request carried for the header, in order.
     *
     * @param fieldValues the header's values; empty when the header is absent; never null
     */
    public static Result parse(List<String> fieldValues) {
        if (fieldValues.isEmpty()) {
            return new Missing();
        }
        if (fieldValues.size() > 1) {
            return new Malformed("the header must be sent once, it was sent " + fieldValues.size() + " times");
        }
        return parse(fieldValues.get(0));
    }

    /** Parses one field value; {@code null} means the header is absent. */
    public static Result parse(String fieldValue) {
        if (fieldValue == null) {
            return new Missing();
        }
        String value = trimOptionalWhitespace(fieldValue);
        Result parsed = value.startsWith("\"") ? parseString(value) : parseBare(value);
        if (parsed instanceof Valid valid) {
            if (valid.key().isEmpty()) {
                return new Malformed("the key is empty");
            }
            if (valid.key().length() > MAX_KEY_LENGTH) {
                return new Malformed("the key is longer than " + MAX_KEY_LENGTH + " characters");
            }
        }
        return parsed;
    }

    private static Result parseBare(String value) {
        for (int i = 0; i < value.length(); i++) {
            char c = value.charAt(i);
            if (c == ',') {
                return new Malformed("the key contains a comma: was the header sent more than once?");
            }
            if (c < 0x21 || c > 0x7E || c == '"') {
                return new Malformed("a bare key may contain only visible ASCII characters other than '\"' and ','"
                        + " (position " + (i + 1) + ")");
            }
        }
        return new Valid(value);
    }

    private static Result parseString(String value) {
        StringBuilder key = new StringBuilder(value.length());
        int i = 1;
        while (i < value.length()) {
            char c = value.charAt(i);
            if (c == '\\') {
                if (i + 1 >= value.length()) {
                    return new Malformed("the quoted key ends inside an escape");
                }
                char escaped = value.charAt(i + 1);
                if (escaped != '"' && escaped != '\\') {
                    return new Malformed("only \\\" and \\\\ are escapes in a quoted key (position " + (i + 1) + ")");
                }
                key.append(escaped);
                i += 2;
            } else if (c == '"') {
                if (i != value.length() - 1) {
                    return new Malformed("nothing may follow the closing quote of the key");
                }
                return new Valid(key.toString());
            } else if (c < 0x20 || c > 0x7E) {
                return new Malformed("a quoted key may contain only printable ASCII characters (position " + (i + 1) + ")");
            } else {
                key.append(c);
                i++;
            }
        }
        return new Malformed("the quoted key has no closing quote");
    }

    private static String trimOptionalWhitespace(String value) {
        int start = 0;
        int end = value.length();
        while (start < end && isOptionalWhitespace(value.charAt(start))) {
            start++;
        }
        while (end > start && isOptionalWhitespace(value.charAt(end - 1))) {
            end--;
        }
        return value.substring(start, end);
    }

    private static boolean isOptionalWhitespace(char c) {
        return c == ' ' || c == '\t';
    }
}
