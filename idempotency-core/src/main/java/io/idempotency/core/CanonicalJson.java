package io.idempotency.core;

import java.lang.reflect.Array;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.SortedSet;
import java.util.TreeMap;

/**
 * A strict JSON (RFC 8259) reader and a canonical writer, so that two bodies meaning the same thing fingerprint
 * alike: object members are sorted (by UTF-16 code units), insignificant whitespace is dropped, strings are written
 * with one escaping, and numbers are compared as exact decimals — {@code 12.50}, {@code 12.5} and {@code 1.25e1}
 * are one number, and no value ever passes through a {@code double}. Duplicate member names are an error: readers
 * disagree on which one wins, so such a body has no single meaning. Stateless and thread-safe.
 *
 * <p>Parsed values are {@code Map<String, Object>} (insertion-ordered), {@code List<Object>}, {@code String},
 * {@code BigDecimal}, {@code Boolean} and {@code null}.
 */
public final class CanonicalJson {

    /** Deepest nesting of arrays and objects accepted. */
    public static final int MAX_DEPTH = 128;

    /**
     * Most digits a number may have (those of its exponent too; its signs, point and exponent letter are not counted):
     * as many as Jackson reads by default (its {@code maxNumberLength}, which counts them so).
     */
    public static final int MAX_NUMBER_LENGTH = 1000;

    /**
     * Largest decimal exponent a number's value may have, written in scientific notation ({@code d.ddd × 10^n}):
     * judged on the value, so that every spelling of one number ({@code 1e100000}, {@code 0.1e100001},
     * {@code 10e99999}) is read, or refused, alike.
     */
    private static final int MAX_EXPONENT = 100_000;

    /** The body is not valid JSON, or has duplicate member names; the message is safe to show to the client. */
    public static final class InvalidJsonException extends Exception {
        public InvalidJsonException(String message) {
            super(message);
        }
    }

    private CanonicalJson() {
    }

    /**
     * The canonical UTF-8 form of a JSON text: the same bytes as {@code canonicalize(parse(utf8), utf8.length)}, and
     * the same refusals, but written as the text is read, without building its values. A parsed body's maps, lists
     * and numbers take many times the text's size (a list of a million zeros, about twenty); this holds the text, its
     * canonical form and, for the large objects whose members came out of order, where each member is (see
     * {@code Reader.writeObject}).
     */
    public static byte[] canonicalize(byte[] utf8) throws InvalidJsonException {
        StringBuilder canonical = (StringBuilder) read(utf8, new StringBuilder(Math.max(16, utf8.length + 16)));
        return canonical.toString().getBytes(StandardCharsets.UTF_8);
    }

    /**
     * The canonical UTF-8 form of a parsed value (as {@link #parse} returns, or any mix of those types). Other values
     * are written too: any number by its decimal value (NaN and the infinities as text), collections and arrays
     * by their elements (a set that is not sorted in the order of its members' canonical forms, not in the order it
     * happens to give them), an {@code Optional} as the value it holds ({@code null} when empty), a JSON tree of
     * Jackson as its content ({@link #treeContent}), anything else as the text of its {@code toString()}. A map's
     * names are written as the text of theirs. Half of a surrogate pair in a text, which UTF-8 cannot hold, is written
     * as a JSON escape (six characters), never as the {@code ?} UTF-8 would make of it.
     *
     * @throws IllegalArgumentException when two names of a map (at any depth) are written as the same text, such as
     *                                  the number {@code 1} and the text {@code "1"}: its canonical form would hold one
     *                                  of them only, and two different values would be one
     */
    public static byte[] canonicalize(Object value) {
        return canonicalize(value, 0);
    }

    /**
     * {@link #canonicalize(Object)} of a value parsed from a JSON text of {@code textLength} bytes: its canonical form
     * is about as long, and is written into room of that size rather than into a buffer grown (and copied) on the way.
     *
     * @throws IllegalArgumentException as {@link #canonicalize(Object)}
     */
    public static byte[] canonicalize(Object value, int textLength) {
        StringBuilder out = new StringBuilder(Math.max(16, textLength + 16));
        write(value, out);
        return out.toString().getBytes(StandardCharsets.UTF_8);
    }

    /** Parses a whole JSON text. */
    public static Object parse(byte[] utf8) throws InvalidJsonException {
        return read(utf8, null);
    }

    /**
     * Reads a whole JSON text: returns it parsed, or, given {@code out}, writes it there and returns its canonical
     * form ({@code out}, or another builder where members had to be put in order).
     */
    private static Object read(byte[] utf8, StringBuilder out) throws InvalidJsonException {
        String text;
        try {
            // ASCII, as most bodies are, is valid UTF-8 and reads the same in ISO-8859-1, which copies it as it is;
            // anything else goes through a decoder that refuses what is not UTF-8
            text = isAscii(utf8) ? new String(utf8, StandardCharsets.ISO_8859_1) : StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(utf8)).toString();
        } catch (CharacterCodingException e) {
            throw new InvalidJsonException("the JSON body is not valid UTF-8");
        }
        return read(text, out, false);
    }

    /**
     * {@link #read(byte[], StringBuilder)} of a text already decoded.
     *
     * @param halfPairs whether a string may hold half of a surrogate pair: no text decoded from UTF-8 holds one raw,
     *                  so from bytes only an escape makes one, which is refused (no canonical form in UTF-8); a
     *                  tree's text ({@link #treeContent}) may hold one raw, and then holds it as given, raw or
     *                  escaped alike, for the key's check or the writer's escape
     */
    private static Object read(String text, StringBuilder out, boolean halfPairs) throws InvalidJsonException {
        Reader reader = new Reader(text, halfPairs);
        reader.skipWhitespace();
        if (reader.position < text.length() && text.charAt(reader.position) == '\uFEFF') {
            throw reader.error("a byte order mark is not allowed");
        }
        Object value = reader.readValue(0, out);
        reader.skipWhitespace();
        if (reader.position != text.length()) {
            throw reader.error("unexpected text after the JSON value");
        }
        return out == null ? value : reader.inOrder(out);
    }

    /**
     * What a JSON tree of Jackson holds ({@code JsonNode}, of Jackson 3 or 2, told by its class's name: this module
     * depends on no JSON library), parsed from its text as {@link #parse} parses a body, but for half of a surrogate
     * pair, which a tree may hold and keeps (a key holding one is refused, a fingerprint escapes it): so that it is
     * compared by its content, as a body is, not by its {@code toString()}, which keeps the order of its members and
     * the spelling of its numbers, and writes a text with its quotes. Anything else, and a tree whose text is no JSON
     * (a missing node's is empty), is returned as it is. {@link #canonicalize(Object)} writes the trees it meets so,
     * at any depth.
     */
    public static Object treeContent(Object value) {
        if (value == null || !JSON_TREES.get(value.getClass())) {
            return value;
        }
        try {
            // the text as it is, not through UTF-8: half of a surrogate pair in it stays one, and is refused or
            // escaped where it is used, not made a '?' that another text would share
            return read(value.toString(), null, true);
        } catch (InvalidJsonException e) {
            return value;
        }
    }

    /** Whether a class is a JSON tree of Jackson, for {@link #treeContent}. */
    private static final ClassValue<Boolean> JSON_TREES = new ClassValue<>() {
        @Override
        protected Boolean computeValue(Class<?> type) {
            for (Class<?> c = type; c != null && c != Object.class; c = c.getSuperclass()) {
                String name = c.getName();
                if (name.equals("tools.jackson.databind.JsonNode")
                        || name.equals("com.fasterxml.jackson.databind.JsonNode")) {
                    return true;
                }
            }
            return false;
        }
    };

    private static boolean isAscii(byte[] bytes) {
        for (byte b : bytes) {
            if (b < 0) {
                return false;
            }
        }
        return true;
    }

    private static void write(Object value, StringBuilder out) {
        if (value instanceof Optional<?> optional) {
            // its toString() writes the value it holds by that value's toString(): a list's elements lose their
            // bounds ("[a, b]" is also the one element "a, b") and a number is compared as it is spelt
            write(optional.orElse(null), out);
        } else if (value == null) {
            out.append("null");
        } else if (value instanceof Map<?, ?> map) {
            TreeMap<String, Object> sorted = new TreeMap<>();
            map.forEach((name, member) -> sorted.put(String.valueOf(name), member));
            if (sorted.size() != map.size()) {
                // e.g. the number 1 and the text "1": written as one name, two different maps would be one value (the
                // name not quoted: it may be a request's value)
                throw new IllegalArgumentException("two names of a map are written as the same text, so its"
                        + " canonical form cannot tell them apart");
            }
            out.append('{');
            boolean first = true;
            for (Map.Entry<String, Object> member : sorted.entrySet()) {
                if (!first) {
                    out.append(',');
                }
                first = false;
                writeString(member.getKey(), out);
                out.append(':');
                write(member.getValue(), out);
            }
            out.append('}');
        } else if (value instanceof Set<?> members && !(members instanceof SortedSet<?>)) {
            // in no order of its own: a HashSet's, or Set.of's (salted at each start of the JVM), depends on how and
            // where it was built, so the same members are written in the order of their canonical forms
            List<String> written = new ArrayList<>(members.size());
            for (Object member : members) {
                StringBuilder one = new StringBuilder();
                write(member, one);
                written.add(one.toString());
            }
            Collections.sort(written);
            out.append('[').append(String.join(",", written)).append(']');
        } else if (value instanceof Collection<?> elements) {
            out.append('[');
            boolean first = true;
            for (Object element : elements) {
                if (!first) {
                    out.append(',');
                }
                first = false;
                write(element, out);
            }
            out.append(']');
        } else if (value.getClass().isArray()) {
            // an array's own toString() names the instance, not its elements
            out.append('[');
            for (int i = 0; i < Array.getLength(value); i++) {
                if (i > 0) {
                    out.append(',');
                }
                write(Array.get(value, i), out);
            }
            out.append(']');
        } else if (value instanceof BigDecimal number) {
            out.append(canonicalNumber(number));
        } else if (value instanceof Double number && !Double.isFinite(number)
                || value instanceof Float single && !Float.isFinite(single)) {
            writeString(value.toString(), out); // NaN and the infinities have no decimal value
        } else if (value instanceof Number number) {
            String text = number.toString();
            BigDecimal decimal;
            try {
                decimal = new BigDecimal(text);
            } catch (NumberFormatException e) {
                decimal = null; // no decimal value (a DoubleAdder's NaN, a name): written as text, as NaN is above
            }
            if (decimal == null) {
                writeString(text, out);
            } else {
                write(decimal, out);
            }
        } else if (value instanceof Boolean bool) {
            out.append(bool);
        } else {
            Object content = value instanceof String ? value : treeContent(value);
            if (content != value) {
                write(content, out);
            } else {
                writeString(value.toString(), out);
            }
        }
    }

    /**
     * A number's canonical text: its exact decimal value without trailing zeros ({@code 12.50}, {@code 12.5} and
     * {@code 1.25e1} are all {@code 12.5}). {@link BigDecimal#stripTrailingZeros()} divides by ten once per zero, each
     * division as long as the number: for a long number ending in many zeros that is quadratic, hundreds of
     * microseconds for one 1000-digit number, which a compressed body can repeat cheaply. So for long numbers the
     * zeros are counted on the digits instead, with the same result. A number with more zeros than its scale has room
     * to drop (a parameter bound from {@code 100e2147483647}, which JSON bodies never give: their exponents are capped)
     * is written as its {@code toString()} would be, had a {@code BigDecimal} such a scale.
     */
    static String canonicalNumber(BigDecimal number) {
        if (number.signum() == 0) {
            return "0";
        }
        if (number.precision() <= 18 && number.scale() >= Integer.MIN_VALUE + 18) {
            return number.stripTrailingZeros().toString(); // fits in a long: cheap
        }
        String digits = number.unscaledValue().toString();
        int end = digits.length();
        while (digits.charAt(end - 1) == '0') {
            end--;
        }
        if (end == digits.length()) {
            return number.toString();
        }
        long scale = (long) number.scale() - (digits.length() - end);
        if (scale >= Integer.MIN_VALUE) {
            return new BigDecimal(new BigInteger(digits.substring(0, end)), (int) scale).toString();
        }
        // a negative scale: exponential notation, one digit before the point
        int first = number.signum() < 0 ? 1 : 0;
        String coefficient = digits.substring(first, end);
        return digits.substring(0, first) + coefficient.charAt(0)
                + (coefficient.length() > 1 ? "." + coefficient.substring(1) : "")
                + "E+" + (coefficient.length() - 1 - scale);
    }

    private static void writeString(String text, StringBuilder out) {
        out.append('"');
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else if (Character.isHighSurrogate(c) && i + 1 < text.length()
                    && Character.isLowSurrogate(text.charAt(i + 1))) {
                out.append(c).append(text.charAt(++i));
            } else if (Character.isSurrogate(c)) {
                // half of a pair, which UTF-8 cannot hold (it would be written as '?', and be the text "?"): escaped
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        out.append('"');
    }

    private static final class Reader {
        private final String text;
        /** Whether strings may hold half of a surrogate pair: see {@code CanonicalJson.read(String, …)}. */
        private final boolean halfPairs;
        private int position;

        Reader(String text, boolean halfPairs) {
            this.text = text;
            this.halfPairs = halfPairs;
        }

        /**
         * Reads a value inside {@code depth} enclosing arrays and objects: returns it, or, given {@code out}, writes
         * its canonical form there (as {@link CanonicalJson#write} writes the value) and returns null.
         */
        Object readValue(int depth, StringBuilder out) throws InvalidJsonException {
            skipWhitespace();
            if (position >= text.length()) {
                throw error("unexpected end of the JSON body");
            }
            char c = text.charAt(position);
            if ((c == '{' || c == '[') && depth >= MAX_DEPTH) {
                throw error("nesting deeper than " + MAX_DEPTH + " levels");
            }
            switch (c) {
                case '{':
                    return out == null ? readObject(depth) : writeObject(depth, out);
                case '[':
                    return out == null ? readArray(depth) : writeArray(depth, out);
                case '"':
                    return emit(readString(), out);
                case 't':
                    expectWord("true");
                    return emit(Boolean.TRUE, out);
                case 'f':
                    expectWord("false");
                    return emit(Boolean.FALSE, out);
                case 'n':
                    expectWord("null");
                    return emit(null, out);
                default:
                    if (c == '-' || (c >= '0' && c <= '9')) {
                        return emit(readNumber(), out);
                    }
                    throw error("unexpected character '" + printable(c) + "'");
            }
        }

        /** {@code value}, or, given {@code out}, null once its canonical form is written there. */
        private static Object emit(Object value, StringBuilder out) {
            if (out == null) {
                return value;
            }
            write(value, out);
            return null;
        }

        private Map<String, Object> readObject(int depth) throws InvalidJsonException {
            position++; // {
            Map<String, Object> members = new LinkedHashMap<>();
            skipWhitespace();
            if (peek() == '}') {
                position++;
                return members;
            }
            while (true) {
                String name = readMemberName();
                Object value = readValue(depth + 1, null);
                if (members.containsKey(name)) {
                    throw duplicate(name);
                }
                members.put(name, value);
                if (!moreMembers()) {
                    return members;
                }
            }
        }

        /**
         * Reads an object and writes its members to {@code out} as they come, each as its canonical form has it
         * ({@code "name":value}), then puts them in the order of their names. A small object is put in order at once,
         * through a buffer kept for that; a larger one is not moved here, which would copy its whole text once for
         * every object around it (127 levels deep, 127 times): where each of its members' texts is, in the order of
         * the names, is noted for {@link #inOrder}, which writes every character once. (Small objects nested in one
         * another are copied once for each: at most {@value #SMALL_OBJECT} characters' worth of levels.)
         */
        private Object writeObject(int depth, StringBuilder out) throws InvalidJsonException {
            int start = out.length();
            position++; // {
            out.append('{');
            skipWhitespace();
            if (peek() == '}') {
                position++;
                out.append('}');
                return null;
            }
            List<String> names = new ArrayList<>();
            Set<String> seen = null; // made once there are too many names to compare one by one
            int[] spans = new int[8]; // each member's start and end, in the order they came
            boolean inOrder = true;
            while (true) {
                String name = readMemberName();
                if (!names.isEmpty()) {
                    out.append(',');
                }
                int from = out.length();
                writeString(name, out);
                out.append(':');
                readValue(depth + 1, out);
                if (seen == null && names.size() >= 16) {
                    seen = new HashSet<>(names);
                }
                if (seen != null ? !seen.add(name) : names.contains(name)) {
                    throw duplicate(name);
                }
                inOrder &= names.isEmpty() || names.get(names.size() - 1).compareTo(name) < 0;
                int member = names.size();
                names.add(name);
                if (spans.length < 2 * member + 2) {
                    spans = Arrays.copyOf(spans, spans.length * 2);
                }
                spans[2 * member] = from;
                spans[2 * member + 1] = out.length();
                if (!moreMembers()) {
                    break;
                }
            }
            out.append('}');
            if (inOrder) {
                return null;
            }
            int[] order = byName(names);
            int end = out.length();
            if (end - start <= SMALL_OBJECT) {
                if (scratch.length < end - start) {
                    scratch = new char[SMALL_OBJECT];
                }
                out.getChars(start, end, scratch, 0);
                out.setLength(start + 1); // {
                for (int i = 0; i < order.length; i++) {
                    if (i > 0) {
                        out.append(',');
                    }
                    int from = spans[2 * order[i]];
                    out.append(scratch, from - start, spans[2 * order[i] + 1] - from);
                }
                out.append('}');
                return null;
            }
            int[] moved = new int[2 + 2 * order.length];
            moved[0] = start;
            moved[1] = end;
            for (int i = 0; i < order.length; i++) {
                moved[2 + 2 * i] = spans[2 * order[i]];
                moved[3 + 2 * i] = spans[2 * order[i] + 1];
            }
            reordered.add(moved);
            return null;
        }

        /** The longest object, in characters as written, put in order at once. */
        private static final int SMALL_OBJECT = 256;

        /** Where a small object's text waits while it is put in order. */
        private char[] scratch = new char[0];

        /** The positions of {@code names} in the order of the names (which are all different). */
        private static int[] byName(List<String> names) {
            int[] order = new int[names.size()];
            for (int i = 0; i < order.length; i++) {
                order[i] = i;
            }
            if (order.length <= 16) {
                for (int i = 1; i < order.length; i++) {
                    int moving = order[i];
                    int j = i - 1;
                    for (; j >= 0 && names.get(order[j]).compareTo(names.get(moving)) > 0; j--) {
                        order[j + 1] = order[j];
                    }
                    order[j + 1] = moving;
                }
                return order;
            }
            return java.util.stream.IntStream.range(0, order.length).boxed()
                    .sorted(Comparator.comparing(names::get)).mapToInt(Integer::intValue).toArray();
        }

        /**
         * Objects written with their members out of order, as {start, end, then each member's start and end in the
         * order of the names}, in the order they ended (inner objects first).
         */
        private final List<int[]> reordered = new ArrayList<>();

        /** {@code written} with every object noted by {@link #writeObject} put in order: itself when there is none. */
        StringBuilder inOrder(StringBuilder written) {
            if (reordered.isEmpty()) {
                return written;
            }
            reordered.sort(Comparator.comparingInt(object -> object[0]));
            int[] starts = new int[reordered.size()];
            for (int i = 0; i < starts.length; i++) {
                starts[i] = reordered.get(i)[0];
            }
            StringBuilder out = new StringBuilder(written.length());
            copy(written, 0, written.length(), starts, out);
            return out;
        }

        /** Appends {@code written} from {@code from} to {@code to}, the objects in it noted as out of order put in order. */
        private void copy(StringBuilder written, int from, int to, int[] starts, StringBuilder out) {
            int at = from;
            while (at < to) {
                // the next object out of order at or after here: the objects in it start after its own start
                int next = Arrays.binarySearch(starts, at);
                next = next >= 0 ? next : -next - 1;
                if (next == starts.length || starts[next] >= to) {
                    out.append(written, at, to);
                    return;
                }
                int[] object = reordered.get(next);
                out.append(written, at, object[0]).append('{');
                for (int member = 2; member < object.length; member += 2) {
                    if (member > 2) {
                        out.append(',');
                    }
                    copy(written, object[member], object[member + 1], starts, out);
                }
                out.append('}');
                at = object[1];
            }
        }

        /** Reads a member's name and the colon after it. */
        private String readMemberName() throws InvalidJsonException {
            skipWhitespace();
            if (peek() != '"') {
                throw error("expected a member name in quotes");
            }
            String name = readString();
            skipWhitespace();
            if (peek() != ':') {
                throw error("expected ':' after a member name");
            }
            position++;
            return name;
        }

        /** Reads what follows a member's value: true after a comma, false at the end of the object. */
        private boolean moreMembers() throws InvalidJsonException {
            skipWhitespace();
            char c = peek();
            position++;
            if (c == '}') {
                return false;
            }
            if (c != ',') {
                throw error("expected ',' or '}' in an object");
            }
            return true;
        }

        private InvalidJsonException duplicate(String name) {
            // as decoded, it may hold a line break or be as long as the body: shown escaped, and cut
            String shown = ScopedKey.printable(name.length() > 64 ? name.substring(0, 64) + "…" : name);
            return error("duplicate member name \"" + shown + "\"");
        }

        /** Reads an array and writes its canonical form to {@code out}, element by element. */
        private Object writeArray(int depth, StringBuilder out) throws InvalidJsonException {
            position++; // [
            out.append('[');
            skipWhitespace();
            if (peek() == ']') {
                position++;
                out.append(']');
                return null;
            }
            while (true) {
                readValue(depth + 1, out);
                skipWhitespace();
                char c = peek();
                position++;
                if (c == ']') {
                    out.append(']');
                    return null;
                }
                if (c != ',') {
                    throw error("expected ',' or ']' in an array");
                }
                out.append(',');
            }
        }

        private List<Object> readArray(int depth) throws InvalidJsonException {
            position++; // [
            List<Object> elements = new ArrayList<>();
            skipWhitespace();
            if (peek() == ']') {
                position++;
                return Collections.unmodifiableList(elements);
            }
            while (true) {
                elements.add(readValue(depth + 1, null));
                skipWhitespace();
                char c = peek();
                position++;
                if (c == ']') {
                    return Collections.unmodifiableList(elements);
                }
                if (c != ',') {
                    throw error("expected ',' or ']' in an array");
                }
            }
        }

        private String readString() throws InvalidJsonException {
            position++; // "
            // most strings have no escape: taken as they are (a text decoded strictly holds no unpaired surrogate, so
            // only an escape can make one; a tree's text, which may, is read with halfPairs)
            for (int end = position; end < text.length(); end++) {
                char c = text.charAt(end);
                if (c == '"') {
                    String value = text.substring(position, end);
                    position = end + 1;
                    return value;
                }
                if (c == '\\' || c < 0x20) {
                    break; // read it character by character, which also reports what is wrong
                }
            }
            StringBuilder value = new StringBuilder();
            while (true) {
                if (position >= text.length()) {
                    throw error("unterminated string");
                }
                char c = text.charAt(position++);
                if (c == '"') {
                    return halfPairs ? value.toString() : checkSurrogates(value);
                }
                if (c < 0x20) {
                    throw error("unescaped control character in a string");
                }
                if (c != '\\') {
                    value.append(c);
                    continue;
                }
                if (position >= text.length()) {
                    throw error("unterminated escape");
                }
                char escaped = text.charAt(position++);
                switch (escaped) {
                    case '"', '\\', '/' -> value.append(escaped);
                    case 'b' -> value.append('\b');
                    case 'f' -> value.append('\f');
                    case 'n' -> value.append('\n');
                    case 'r' -> value.append('\r');
                    case 't' -> value.append('\t');
                    case 'u' -> {
                        if (position + 4 > text.length()) {
                            throw error("incomplete \\u escape");
                        }
                        int code = 0;
                        for (int i = 0; i < 4; i++) {
                            char hex = text.charAt(position++);
                            int digit = hex < 0x80 ? Character.digit(hex, 16) : -1;
                            if (digit < 0) {
                                throw error("invalid \\u escape");
                            }
                            code = code * 16 + digit;
                        }
                        value.append((char) code);
                    }
                    default -> throw error("invalid escape \\" + printable(escaped));
                }
            }
        }

        /** Unpaired surrogates cannot be written as UTF-8: two different strings would canonicalize alike. */
        private String checkSurrogates(StringBuilder value) throws InvalidJsonException {
            for (int i = 0; i < value.length(); i++) {
                char c = value.charAt(i);
                if (Character.isHighSurrogate(c) && i + 1 < value.length()
                        && Character.isLowSurrogate(value.charAt(i + 1))) {
                    i++;
                } else if (Character.isSurrogate(c)) {
                    throw error("unpaired surrogate \\u" + String.format("%04x", (int) c) + " in a string");
                }
            }
            return value.toString();
        }

        private BigDecimal readNumber() throws InvalidJsonException {
            int start = position;
            int notDigits = 0; // signs, point and exponent letter: Jackson counts the digits alone
            if (peek() == '-') {
                position++;
                notDigits++;
            }
            if (peek() == '0') {
                position++;
            } else if (isDigit(peek())) {
                skipDigits();
            } else {
                throw error("invalid number");
            }
            if (peek() == '.') {
                position++;
                notDigits++;
                if (!isDigit(peek())) {
                    throw error("invalid number: digits must follow '.'");
                }
                skipDigits();
            }
            int mantissaEnd = position;
            if (peek() == 'e' || peek() == 'E') {
                position++;
                notDigits++;
                if (peek() == '+' || peek() == '-') {
                    position++;
                    notDigits++;
                }
                if (!isDigit(peek())) {
                    throw error("invalid number: digits must follow the exponent");
                }
                skipDigits();
            }
            if (position - start - notDigits > MAX_NUMBER_LENGTH) {
                // converting n digits costs time in n squared: refused before any of it is spent
                throw error("number longer than " + MAX_NUMBER_LENGTH + " digits");
            }
            if (isZero(start, mantissaEnd)) {
                // zero whatever its exponent: 0e-100001 is 0, also with an exponent beyond what a BigDecimal holds
                BigDecimal zero;
                try {
                    zero = new BigDecimal(text.substring(start, position));
                } catch (NumberFormatException | ArithmeticException e) {
                    return BigDecimal.ZERO;
                }
                return Math.abs((long) zero.scale()) > MAX_EXPONENT ? BigDecimal.ZERO : zero;
            }
            BigDecimal number;
            try {
                number = new BigDecimal(text.substring(start, position));
            } catch (NumberFormatException | ArithmeticException e) {
                throw error("number out of range"); // an exponent beyond an int: far beyond MAX_EXPONENT
            }
            // keeps canonical forms readable and bounded; judged on the value (the exponent of its first digit), not
            // on the scale it is written with, which its digits move: 10e100000 is 1e100001
            if (Math.abs((long) number.precision() - number.scale() - 1) > MAX_EXPONENT) {
                throw error("number out of range");
            }
            return number;
        }

        /** Whether the mantissa between {@code from} and {@code to} (sign, digits and dot) has no digit but 0. */
        private boolean isZero(int from, int to) {
            for (int i = from; i < to; i++) {
                char c = text.charAt(i);
                if (c >= '1' && c <= '9') {
                    return false;
                }
            }
            return true;
        }

        private void expectWord(String word) throws InvalidJsonException {
            if (!text.startsWith(word, position)) {
                throw error("unexpected text, expected " + word);
            }
            position += word.length();
        }

        private void skipDigits() {
            while (isDigit(peek())) {
                position++;
            }
        }

        private static boolean isDigit(char c) {
            return c >= '0' && c <= '9';
        }

        private char peek() {
            return position < text.length() ? text.charAt(position) : '\0';
        }

        void skipWhitespace() {
            while (position < text.length()) {
                char c = text.charAt(position);
                if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
                    return;
                }
                position++;
            }
        }

        InvalidJsonException error(String message) {
            return new InvalidJsonException("invalid JSON body at character " + (position + 1) + ": " + message);
        }

        private static String printable(char c) {
            return c < 0x20 || c > 0x7E ? String.format("\\u%04x", (int) c) : String.valueOf(c);
        }
    }
}
