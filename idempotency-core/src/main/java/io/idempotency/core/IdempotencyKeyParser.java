package io.idempotency.core;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.List;

/**
 * Reads the {@code Idempotency-Key} header as draft-ietf-httpapi-idempotency-key-header and RFC 9651 say, with
 * one allowance for clients that send bare tokens such as UUIDs.
 *
 * <ul>
 *   <li>A value starting with {@code "} is an RFC 9651 Item whose value is a String: printable ASCII between the
 *       quotes, where only {@code \"} and {@code \\} are escapes. Parameters may follow the closing quote
 *       ({@code "abc";v=1}): RFC 9651 lets every Item carry them, for fields to be extended, and a recipient that
 *       knows none of them ignores them, so they are checked for syntax and are no part of the key. Anything else
 *       after the closing quote (a second value, a space) makes the value malformed.</li>
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
                return new Malformed("the key contains a comma, as when the header is sent more than once");
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
                if (i != value.length() - 1 && !new Parameters(value, i + 1).parseAll()) {
                    return new Malformed("only RFC 9651 parameters (;name=value) may follow the closing quote of the"
                            + " key, and the header must be sent once");
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

    /**
     * Checks the parameters after an Item's value as RFC 9651 (section 4.2.3.2) parses them, to the end of the
     * value: each is {@code ;}, optional spaces, a key, and optionally {@code =} and a bare item. Their values are
     * not kept: no parameter of the Idempotency-Key field is defined.
     */
    private static final class Parameters {

        private final String text;
        private int at;

        Parameters(String text, int from) {
            this.text = text;
            this.at = from;
        }

        /** Whether the text from the start position to its end is a list of parameters. */
        boolean parseAll() {
            while (at < text.length()) {
                if (text.charAt(at) != ';') {
                    return false; // a space or a comma after a value: not a parameter (the header merged?)
                }
                at++;
                while (at < text.length() && text.charAt(at) == ' ') {
                    at++;
                }
                if (!key()) {
                    return false;
                }
                if (at < text.length() && text.charAt(at) == '=') {
                    at++;
                    if (!bareItem()) {
                        return false;
                    }
                }
            }
            return true;
        }

        private boolean key() {
            if (at >= text.length() || !(isLowerAlpha(text.charAt(at)) || text.charAt(at) == '*')) {
                return false;
            }
            at++;
            while (at < text.length() && isKeyCharacter(text.charAt(at))) {
                at++;
            }
            return true;
        }

        private boolean bareItem() {
            if (at >= text.length()) {
                return false;
            }
            char c = text.charAt(at);
            if (c == '-' || isDigit(c)) {
                return number(true);
            }
            if (c == '"') {
                return string();
            }
            if (c == '*' || isAlpha(c)) {
                at++;
                while (at < text.length() && isTokenCharacter(text.charAt(at))) {
                    at++;
                }
                return true;
            }
            if (c == ':') {
                return byteSequence();
            }
            if (c == '?') {
                boolean valid = at + 1 < text.length() && (text.charAt(at + 1) == '0' || text.charAt(at + 1) == '1');
                at += 2;
                return valid;
            }
            if (c == '@') {
                at++;
                return number(false);
            }
            if (c == '%') {
                return displayString();
            }
            return false;
        }

        /** An Integer (at most 15 digits) or, where allowed, a Decimal (12 digits, a dot, 1 to 3 digits). */
        private boolean number(boolean decimalAllowed) {
            if (at < text.length() && text.charAt(at) == '-') {
                at++;
            }
            int integerDigits = 0;
            while (at < text.length() && isDigit(text.charAt(at))) {
                integerDigits++;
                at++;
            }
            if (integerDigits == 0 || integerDigits > 15) {
                return false;
            }
            if (at >= text.length() || text.charAt(at) != '.') {
                return true;
            }
            if (!decimalAllowed || integerDigits > 12) {
                return false;
            }
            at++;
            int fractionDigits = 0;
            while (at < text.length() && isDigit(text.charAt(at))) {
                fractionDigits++;
                at++;
            }
            return fractionDigits >= 1 && fractionDigits <= 3;
        }

        private boolean string() {
            at++;
            while (at < text.length()) {
                char c = text.charAt(at++);
                if (c == '\\') {
                    if (at >= text.length() || (text.charAt(at) != '"' && text.charAt(at) != '\\')) {
                        return false;
                    }
                    at++;
                } else if (c == '"') {
                    return true;
                } else if (c < 0x20 || c > 0x7E) {
                    return false;
                }
            }
            return false;
        }

        private boolean byteSequence() {
            int end = text.indexOf(':', at + 1);
            if (end < 0) {
                return false;
            }
            String content = text.substring(at + 1, end);
            at = end + 1;
            for (int i = 0; i < content.length(); i++) {
                char c = content.charAt(i);
                if (!(isAlpha(c) || isDigit(c) || c == '+' || c == '/' || c == '=')) {
                    return false;
                }
            }
            String padded = content.length() % 4 == 0 ? content : content + "=".repeat(4 - content.length() % 4);
            try {
                Base64.getDecoder().decode(padded);
                return true;
            } catch (IllegalArgumentException e) {
                return false;
            }
        }

        /** {@code %"}, printable ASCII with %-escaped lower-case hex octets, {@code "}: UTF-8 once unescaped. */
        private boolean displayString() {
            if (at + 1 >= text.length() || text.charAt(at + 1) != '"') {
                return false;
            }
            at += 2;
            ByteArrayOutputStream bytes = new ByteArrayOutputStream();
            while (at < text.length()) {
                char c = text.charAt(at++);
                if (c < 0x20 || c > 0x7E) {
                    return false;
                }
                if (c == '"') {
                    try {
                        StandardCharsets.UTF_8.newDecoder()
                                .decode(ByteBuffer.wrap(bytes.toByteArray()));
                        return true;
                    } catch (CharacterCodingException e) {
                        return false;
                    }
                }
                if (c == '%') {
                    if (at + 2 > text.length() || !isLowerHex(text.charAt(at)) || !isLowerHex(text.charAt(at + 1))) {
                        return false;
                    }
                    bytes.write(Integer.parseInt(text.substring(at, at + 2), 16));
                    at += 2;
                } else {
                    bytes.write(c);
                }
            }
            return false;
        }

        private static boolean isDigit(char c) {
            return c >= '0' && c <= '9';
        }

        private static boolean isLowerAlpha(char c) {
            return c >= 'a' && c <= 'z';
        }

        private static boolean isAlpha(char c) {
            return isLowerAlpha(c) || c >= 'A' && c <= 'Z';
        }

        private static boolean isLowerHex(char c) {
            return isDigit(c) || c >= 'a' && c <= 'f';
        }

        private static boolean isKeyCharacter(char c) {
            return isLowerAlpha(c) || isDigit(c) || c == '_' || c == '-' || c == '.' || c == '*';
        }

        /** RFC 9110 tchar, plus ':' and '/' as RFC 9651 Tokens allow. */
        private static boolean isTokenCharacter(char c) {
            return isAlpha(c) || isDigit(c) || "!#$%&'*+-.^_`|~:/".indexOf(c) >= 0;
        }
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
