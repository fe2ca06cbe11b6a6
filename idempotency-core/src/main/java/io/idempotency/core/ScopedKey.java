package io.idempotency.core;

import java.util.Comparator;
import java.util.Objects;

/**
 * The identity of an idempotency record: who asked ({@code caller}), for which operation ({@code scope}),
 * with which client-supplied key. All three are part of the unique index, so one caller can never see
 * another caller's record. No part may hold a NUL character or half of a surrogate pair ({@link #storable}), which no
 * text column holds as it is.
 *
 * @param caller namespace of the caller (principal, tenant, API key id); {@code ""} when anonymous; never null
 * @param scope  the operation, e.g. {@code "POST /payments"}; never null or empty
 * @param key    the idempotency key as parsed from the request; 1–255 characters
 */
public record ScopedKey(String caller, String scope, String key) implements Comparable<ScopedKey> {

    /** Longest caller, scope and key the stores accept (characters). */
    public static final int MAX_LENGTH = 255;

    private static final Comparator<ScopedKey> ORDER = Comparator.comparing(ScopedKey::caller)
            .thenComparing(ScopedKey::scope).thenComparing(ScopedKey::key);

    public ScopedKey {
        Objects.requireNonNull(caller, "caller");
        Objects.requireNonNull(scope, "scope");
        Objects.requireNonNull(key, "key");
        if (scope.isEmpty()) {
            throw new IllegalArgumentException("scope must not be empty");
        }
        if (key.isEmpty()) {
            throw new IllegalArgumentException("key must not be empty");
        }
        if (caller.length() > MAX_LENGTH || scope.length() > MAX_LENGTH || key.length() > MAX_LENGTH) {
            throw new IllegalArgumentException("caller, scope and key are limited to " + MAX_LENGTH + " characters");
        }
        // PostgreSQL refuses a NUL; the driver sends half a surrogate pair as '?', which would make two callers,
        // scopes or keys one
        String unstorable = !storable(key) ? "key" : !storable(caller) ? "caller" : !storable(scope) ? "scope" : null;
        if (unstorable != null) {
            throw new IllegalArgumentException(unstorable + " must not contain a NUL character or half of a surrogate"
                    + " pair");
        }
    }

    /** By caller, then scope, then key, each as {@link String#compareTo}: 0 exactly when the keys are equal. */
    @Override
    public int compareTo(ScopedKey other) {
        return ORDER.compare(this, other);
    }

    /**
     * The key as log lines and exception messages show it, each part quoted ({@link #quoted}): a key given by an
     * expression over the body, or a caller named by a token's claim, may hold a line break, or the text that
     * separates the parts.
     */
    @Override
    public String toString() {
        return "ScopedKey[caller=" + quoted(caller) + ", scope=" + quoted(scope) + ", key=" + quoted(key) + "]";
    }

    /**
     * The claim as a log line names it for an operator, who looks it up in the table or asks a third party about it:
     * {@code caller 'alice' on 'POST /charges' with key 'k-1'}, each part quoted ({@link #quoted}).
     */
    public String describe() {
        return "caller " + quoted(caller) + " on " + quoted(scope) + " with key " + quoted(key);
    }

    /**
     * {@code text} between single quotes, as {@link #printable} writes it, with a quote in it written {@code \'}: a
     * key (a quoted one may hold any printable character) or a caller name cannot end its part early and make the
     * rest of the line read as another claim's.
     */
    private static String quoted(String text) {
        return "'" + printable(text).replace("'", "\\'") + "'";
    }

    /**
     * {@code text} on one line of a log, unmistakably: the characters that end or rewrite a line in a log file or a
     * terminal (control characters, also those of C1 such as NEL, the line and paragraph separators) are written as
     * Java escapes ({@code \n}, {@code \r}, {@code \t}, the others by their code in hex after a backslash and
     * {@code u}), and so is a backslash ({@code \\}), so that an escape read in a log always stands for the
     * character it names. So are Unicode's format characters, which show nothing themselves: a bidirectional
     * override or isolate would show the rest of the line reordered where it is read, a zero-width space or joiner
     * would make one key look like another (one outside the Basic Multilingual Plane, a tag character, as the escapes
     * of its two halves). Any other text is returned as it is.
     */
    public static String printable(String text) {
        StringBuilder printable = null;
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            int length = Character.isHighSurrogate(c) && i + 1 < text.length()
                    && Character.isLowSurrogate(text.charAt(i + 1)) ? 2 : 1;
            String escape = switch (c) {
                case '\\' -> "\\\\";
                case '\n' -> "\\n";
                case '\r' -> "\\r";
                case '\t' -> "\\t";
                default -> c < 0x20 || (c >= 0x7F && c <= 0x9F) || c == '\u2028' || c == '\u2029'
                        || Character.getType(text.codePointAt(i)) == Character.FORMAT
                        ? escaped(text, i, length) : null;
            };
            if (escape != null && printable == null) {
                printable = new StringBuilder(text.length() + 16).append(text, 0, i);
            }
            if (printable != null) {
                if (escape != null) {
                    printable.append(escape);
                } else {
                    printable.append(text, i, i + length);
                }
            }
            i += length - 1;
        }
        return printable == null ? text : printable.toString();
    }

    /** The {@code length} chars of {@code text} from {@code start}, each as a Java escape by its code in hex. */
    private static String escaped(String text, int start, int length) {
        StringBuilder escaped = new StringBuilder(6 * length);
        for (int i = start; i < start + length; i++) {
            escaped.append(String.format("\\u%04x", (int) text.charAt(i)));
        }
        return escaped.toString();
    }

    /** Whether {@code text} has neither a NUL character nor half of a surrogate pair: whether text columns hold it. */
    public static boolean storable(String text) {
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (Character.isHighSurrogate(c) && i + 1 < text.length() && Character.isLowSurrogate(text.charAt(i + 1))) {
                i++;
            } else if (c == '\0' || Character.isSurrogate(c)) {
                return false;
            }
        }
        return true;
    }
}
