package io.idempotency.core;

import static java.nio.charset.StandardCharsets.UTF_8;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.fail;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;

import io.idempotency.core.CanonicalJson.InvalidJsonException;
import java.math.BigDecimal;
import java.time.Duration;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.Nested;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;

class CanonicalJsonTest {

    private static final Duration NO_HANG = Duration.ofSeconds(5);

    private static byte[] utf8(String text) {
        return text.getBytes(UTF_8);
    }

    private static byte[] bytes(int... values) {
        byte[] result = new byte[values.length];
        for (int i = 0; i < values.length; i++) {
            result[i] = (byte) values[i];
        }
        return result;
    }

    private static String canon(String json) throws InvalidJsonException {
        return new String(CanonicalJson.canonicalize(utf8(json)), UTF_8);
    }

    private static Object parse(String json) throws InvalidJsonException {
        return CanonicalJson.parse(utf8(json));
    }

    private static String nestedArrays(int depth, String innermost) {
        return "[".repeat(depth) + innermost + "]".repeat(depth);
    }

    private static String nestedObjects(int depth) {
        // depth objects: {"a":{"a":...{}...}}
        return "{\"a\":".repeat(depth - 1) + "{}" + "}".repeat(depth - 1);
    }

    /** Canonical bytes must parse again and canonicalize to exactly themselves. */
    private static void assertCanonicalFormIsStable(byte[] canonical) throws InvalidJsonException {
        assertThat(CanonicalJson.canonicalize(canonical))
                .as("re-canonicalizing %s", new String(canonical, UTF_8))
                .isEqualTo(canonical);
    }

    // ------------------------------------------------------------------ equality

    static Stream<Arguments> equivalentDocuments() {
        return Stream.of(
                // numbers as exact decimals
                Arguments.of("12.50", "12.5"),
                Arguments.of("12.5", "1.25e1"),
                Arguments.of("125E-1", "12.5"),
                Arguments.of("1.25E+1", "12.50"),
                Arguments.of("0", "-0"),
                Arguments.of("0", "0.0"),
                Arguments.of("-0.0", "0e10"),
                Arguments.of("0", "-0E-7"),
                Arguments.of("1e2", "100"),
                Arguments.of("100", "10E1"),
                Arguments.of("100.00", "1E+2"),
                Arguments.of("1", "1.000"),
                Arguments.of("-3.10", "-31e-1"),
                Arguments.of("123456789012345678901234567890.50", "12345678901234567890123456789.05e1"),
                Arguments.of("[12.50,0,-0.0]", "[1.25e1,-0,0]"),
                // member order and whitespace
                Arguments.of("{\"a\":1,\"b\":2}", "{\"b\":2,\"a\":1}"),
                Arguments.of(" { \"a\" : [ 1 , 2 ] ,\n\t\"b\" : { } }\r\n ", "{\"b\":{},\"a\":[1,2]}"),
                Arguments.of("\t[\n]\r", "[]"),
                // one escaping for strings
                Arguments.of("\"\\u0041\"", "\"A\""),
                Arguments.of("\"\\u0061bc\"", "\"abc\""),
                Arguments.of("\"\\/\"", "\"/\""),
                Arguments.of("\"a\\/b\"", "\"a/b\""),
                Arguments.of("\"\\u00e9\"", "\"\u00e9\""),
                Arguments.of("\"\\u00E9\"", "\"\u00e9\""),
                Arguments.of("\"\\ud83d\\ude00\"", "\"\uD83D\uDE00\""),
                Arguments.of("\"\\uD83D\\uDE00\"", "\"\\ud83d\\ude00\""),
                Arguments.of("\"\\n\"", "\"\\u000a\""),
                Arguments.of("\"\\t\\r\\b\\f\"", "\"\\u0009\\u000D\\u0008\\u000c\""),
                Arguments.of("\"\\\"\"", "\"\\u0022\""),
                Arguments.of("\"\\\\\"", "\"\\u005c\""),
                Arguments.of("{\"\\u0061\":1}", "{\"a\":1}"),
                Arguments.of("{\"caf\u00e9\":\"\u65e5\u672c\"}", "{\"caf\\u00e9\":\"\\u65e5\\u672c\"}"));
    }

    @ParameterizedTest(name = "{0} == {1}")
    @MethodSource("equivalentDocuments")
    void equivalentDocumentsHaveTheSameCanonicalForm(String left, String right) throws Exception {
        assertThat(canon(left)).isEqualTo(canon(right));
    }

    static Stream<Arguments> differentDocuments() {
        return Stream.of(
                // never via double
                Arguments.of("0.1", "0.10000000000000000001"),
                Arguments.of("9007199254740993", "9007199254740992"),
                Arguments.of("1.0000000000000000000000000000001", "1"),
                Arguments.of("1e400", "1e401"),
                Arguments.of("1e-400", "0"),
                Arguments.of("123456789012345678901234567890123456789", "123456789012345678901234567890123456788"),
                // different values
                Arguments.of("1", "2"),
                Arguments.of("1", "-1"),
                Arguments.of("\"a\"", "\"A\""),
                Arguments.of("\"a\"", "\"a \""),
                Arguments.of("\"a\\u0000\"", "\"a\""),
                Arguments.of("{\"a\":1}", "{\"A\":1}"),
                Arguments.of("{\"a\":{\"b\":1}}", "{\"a\":{\"b\":2}}"),
                // array order matters
                Arguments.of("[1,2]", "[2,1]"),
                Arguments.of("[{\"a\":1},{\"b\":2}]", "[{\"b\":2},{\"a\":1}]"),
                // types matter
                Arguments.of("\"1\"", "1"),
                Arguments.of("true", "\"true\""),
                Arguments.of("false", "\"false\""),
                Arguments.of("null", "\"null\""),
                Arguments.of("false", "0"),
                Arguments.of("null", "0"),
                Arguments.of("null", "false"),
                Arguments.of("\"\"", "null"),
                Arguments.of("[]", "{}"),
                Arguments.of("[]", "[null]"),
                Arguments.of("[1]", "[[1]]"),
                Arguments.of("[1]", "1"),
                // null vs missing member
                Arguments.of("{\"a\":null}", "{}"),
                Arguments.of("{\"a\":1,\"b\":null}", "{\"a\":1}"));
    }

    @ParameterizedTest(name = "{0} != {1}")
    @MethodSource("differentDocuments")
    void differentDocumentsHaveDifferentCanonicalForms(String left, String right) throws Exception {
        assertThat(canon(left)).isNotEqualTo(canon(right));
    }

    @Test
    void writesTheCanonicalFormCompactWithMembersSorted() throws Exception {
        assertThat(canon(" { \"b\" : [ 1.50 , true , null , false ] , \"a\" : \"x\" , \"c\" : { } , \"d\" : [ ] } "))
                .isEqualTo("{\"a\":\"x\",\"b\":[1.5,true,null,false],\"c\":{},\"d\":[]}");
        assertThat(canon("-0.000")).isEqualTo("0");
        assertThat(canon("\"\\/\"")).isEqualTo("\"/\"");
    }

    /**
     * The canonical form is hashed into the fingerprints kept in the records: a string written with other escapes
     * would no longer match the record of its own request. Only quotes, backslashes and the control characters are
     * escaped; everything else, a space, DEL and U+2028 among it, is written as it is.
     */
    @Test
    void writesStringsWithOnlyTheEscapesJsonRequires() throws Exception {
        assertThat(canon("\"a b\\u007f\\u2028~\\/\\u001F\\\"\"")).isEqualTo("\"a b\u007f\u2028~/\\u001f\\\"\"");
    }

    @Test
    void sortsMembersAtEveryLevel() throws Exception {
        String json = "{\"z\":{\"y\":1,\"x\":[{\"d\":1,\"c\":{\"q\":0,\"p\":0}}]},\"a\":0,\"m\":[{\"b\":1,\"a\":2}]}";
        assertThat(canon(json)).isEqualTo(
                "{\"a\":0,\"m\":[{\"a\":2,\"b\":1}],\"z\":{\"x\":[{\"c\":{\"p\":0,\"q\":0},\"d\":1}],\"y\":1}}");
    }

    @Test
    void sortsMemberNamesByUtf16CodeUnits() throws Exception {
        // U+FF61 sorts after the surrogate pair of U+1F600 in UTF-16 order (but before it by code point).
        String json = "{\"\uFF61\":4,\"\uD83D\uDE00\":3,\"\u00e9\":2,\"z\":1,\"a\":0,\"B\":-1,\"\":-2}";
        assertThat(canon(json)).isEqualTo(
                "{\"\":-2,\"B\":-1,\"a\":0,\"z\":1,\"\u00e9\":2,\"\uD83D\uDE00\":3,\"\uFF61\":4}");
    }

    @Test
    void preservesVeryLargeAndVeryPreciseNumbers() throws Exception {
        String[] numbers = {
            "9007199254740993",
            "0.10000000000000000001",
            "123456789012345678901234567890.123456789012345678901",
            "-98765432109876543210987654321098765432109876543210",
            "1e400",
            "-2.5e-400",
        };
        for (String number : numbers) {
            BigDecimal expected = new BigDecimal(number);
            assertThat((BigDecimal) parse(number)).as(number).isEqualByComparingTo(expected);
            Object reparsed = CanonicalJson.parse(CanonicalJson.canonicalize(utf8(number)));
            assertThat((BigDecimal) reparsed).as("canonical form of %s", number).isEqualByComparingTo(expected);
        }
        assertThat(canon("9007199254740993")).isEqualTo("9007199254740993");
        assertThat(canon("0.10000000000000000001")).isEqualTo("0.10000000000000000001");
    }

    // ------------------------------------------------------------------ unicode and escaping

    @Test
    void writesNonAsciiAsUtf8() throws Exception {
        assertThat(CanonicalJson.canonicalize(utf8("\"\\u00e9\\u65e5\\ud83d\\ude00\"")))
                .isEqualTo(utf8("\"\u00e9\u65e5\uD83D\uDE00\""));
        assertThat(CanonicalJson.canonicalize(utf8("\"\\ud83d\\ude00\"")))
                .isEqualTo(bytes(0x22, 0xF0, 0x9F, 0x98, 0x80, 0x22));
    }

    @Test
    void surrogatePairEscapeMatchesLiteralEmoji() throws Exception {
        Object escaped = parse("\"\\ud83d\\ude00\"");
        assertThat(escaped).isEqualTo("\uD83D\uDE00");
        assertThat(canon("{\"k\":\"\\ud83d\\ude00\"}")).isEqualTo(canon("{\"k\":\"\uD83D\uDE00\"}"));
    }

    @Test
    void escapesEveryControlCharacterSoTheOutputIsValidJson() throws Exception {
        for (int c = 0; c < 0x20; c++) {
            String json = String.format("\"a\\u%04xb\"", c);
            byte[] canonical = CanonicalJson.canonicalize(utf8(json));
            for (byte b : canonical) {
                assertThat(b & 0xFF).as("raw byte in canonical form of U+%04X", c).isGreaterThanOrEqualTo(0x20);
            }
            assertThat(CanonicalJson.parse(canonical)).as("U+%04X", c).isEqualTo("a" + (char) c + "b");
            assertCanonicalFormIsStable(canonical);
        }
    }

    @Test
    void escapesQuotesAndBackslashesInValuesAndNames() throws Exception {
        String json = "{\"na\\\"me\\\\\\n\":\"va\\\"l\\\\ue\\t\"}";
        byte[] canonical = CanonicalJson.canonicalize(utf8(json));
        @SuppressWarnings("unchecked")
        Map<String, Object> reparsed = (Map<String, Object>) CanonicalJson.parse(canonical);
        assertThat(reparsed).containsExactly(Map.entry("na\"me\\\n", "va\"l\\ue\t"));
        assertCanonicalFormIsStable(canonical);
    }

    static Stream<String> roundTripDocuments() {
        return Stream.of(
                "{\"b\":[1.50,-0,1e400,1.5e-7,0.000001,12345678901234567890.000],\"a\":{\"y\":null,\"x\":true}}",
                "[\"\\u0000\\u001f\\\"\\\\\\/\\b\\f\\n\\r\\t\",\"\\ud83d\\ude00\u00e9\u65e5\",\"\u007f\u2028\u2029\"]",
                "{\"\\n\":\"\\u0001\",\"\":\"\",\"\\\"\":{\"\\\\\":[[],{},[{}]]}}",
                "\"just a string\"",
                "-12.50E+3",
                "null",
                "false",
                "[[[[[[[[[[{\"deep\":[1,[2,[3,{\"z\":0,\"a\":0}]]]}]]]]]]]]]]",
                "{\"amount\":100.00,\"currency\":\"EUR\",\"items\":[{\"sku\":\"A-1\",\"qty\":2,\"price\":9.990}],"
                        + "\"meta\":{\"note\":\"caf\u00e9 \\ud83d\\ude00\",\"tags\":[\"x\",\"y\"]}}");
    }

    @ParameterizedTest
    @MethodSource("roundTripDocuments")
    void canonicalFormRoundTrips(String json) throws Exception {
        byte[] canonical = CanonicalJson.canonicalize(utf8(json));
        assertCanonicalFormIsStable(canonical);
        assertThat(CanonicalJson.canonicalize(CanonicalJson.parse(canonical))).isEqualTo(canonical);
        assertThat(CanonicalJson.canonicalize(CanonicalJson.parse(utf8(json)))).isEqualTo(canonical);
    }

    @Test
    void loneSurrogatesDoNotCollideWithOtherStrings() throws Exception {
        // A lone surrogate is legal RFC 8259 syntax ("behavior unpredictable"). It must either be rejected or
        // written so it stays distinguishable; it must not be collapsed into '?' by the UTF-8 encoder.
        String[][] pairs = {
            {"\"\\ud800\"", "\"?\""},
            {"\"\\udc00\"", "\"?\""},
            {"\"\\ud800\"", "\"\\udc00\""},
            {"\"\\ude00\\ud83d\"", "\"??\""},
        };
        for (String[] pair : pairs) {
            String left;
            try {
                left = canon(pair[0]);
            } catch (InvalidJsonException rejected) {
                continue; // rejecting a lone surrogate is acceptable
            }
            assertThat(left).as("canonical form of %s vs %s", pair[0], pair[1]).isNotEqualTo(canon(pair[1]));
        }
    }

    // ------------------------------------------------------------------ parse() result types

    @Test
    void parsesObjectsIntoInsertionOrderedMaps() throws Exception {
        Object value = parse("{\"b\":1,\"a\":2,\"c\":3,\"0\":4}");
        assertThat(value).isInstanceOf(Map.class);
        @SuppressWarnings("unchecked")
        Map<String, Object> map = (Map<String, Object>) value;
        assertThat(map.keySet()).containsExactly("b", "a", "c", "0");
        assertThat(map.get("a")).isInstanceOf(BigDecimal.class);
    }

    @Test
    void parsesEachJsonTypeIntoItsJavaType() throws Exception {
        Object value = parse("[1,\"x\",true,false,null,{},[],-2.50e3]");
        assertThat(value).isInstanceOf(List.class);
        List<?> list = (List<?>) value;
        assertThat(list).hasSize(8);
        assertThat(list.get(0)).isInstanceOf(BigDecimal.class);
        assertThat((BigDecimal) list.get(0)).isEqualByComparingTo("1");
        assertThat(list.get(1)).isEqualTo("x");
        assertThat(list.get(2)).isEqualTo(Boolean.TRUE);
        assertThat(list.get(3)).isEqualTo(Boolean.FALSE);
        assertThat(list.get(4)).isNull();
        assertThat(list.get(5)).isInstanceOf(Map.class);
        assertThat((Map<?, ?>) list.get(5)).isEmpty();
        assertThat(list.get(6)).isInstanceOf(List.class);
        assertThat((List<?>) list.get(6)).isEmpty();
        assertThat((BigDecimal) list.get(7)).isEqualByComparingTo("-2500");
    }

    @Test
    void parsesTopLevelScalars() throws Exception {
        assertThat(parse("\"s\"")).isEqualTo("s");
        assertThat(parse(" true ")).isEqualTo(Boolean.TRUE);
        assertThat(parse("false")).isEqualTo(Boolean.FALSE);
        assertThat(parse("null")).isNull();
        assertThat(parse("12.50")).isInstanceOf(BigDecimal.class);
        assertThat((BigDecimal) parse("12.50")).isEqualByComparingTo("12.5");
        assertThat((BigDecimal) parse("-0")).isEqualByComparingTo("0");
        assertThat(parse("0.10000000000000000001")).isEqualTo(new BigDecimal("0.10000000000000000001"));
    }

    @Test
    void canonicalizesParsedValuesAndMixedJavaValuesAlike() throws Exception {
        byte[] fromText = CanonicalJson.canonicalize(utf8("{\"a\":[2,\"x\",null],\"b\":1.0,\"c\":true}"));
        assertThat(CanonicalJson.canonicalize(parse("{\"c\":true,\"b\":1.0,\"a\":[2,\"x\",null]}")))
                .isEqualTo(fromText);
        Map<String, Object> plain = new HashMap<>();
        plain.put("c", true);
        plain.put("b", 1);
        plain.put("a", Arrays.asList(2L, "x", null));
        assertThat(CanonicalJson.canonicalize(plain)).isEqualTo(fromText);
        Map<String, Object> ordered = new LinkedHashMap<>();
        ordered.put("b", new BigDecimal("1.000"));
        ordered.put("c", Boolean.TRUE);
        ordered.put("a", List.of(new BigDecimal("2"), "x", Collections.singletonMap("k", null)));
        assertThat(new String(CanonicalJson.canonicalize(ordered), UTF_8))
                .isEqualTo("{\"a\":[2,\"x\",{\"k\":null}],\"b\":1,\"c\":true}");
    }

    // ------------------------------------------------------------------ rejections

    static Stream<Arguments> invalidDocuments() {
        return Stream.of(
                Arguments.of("duplicate key", "{\"a\":1,\"a\":2}"),
                Arguments.of("duplicate key, same value", "{\"a\":1,\"b\":0,\"a\":1}"),
                Arguments.of("duplicate key, null values", "{\"a\":null,\"a\":null}"),
                Arguments.of("duplicate key spelled differently", "{\"a\":1,\"\\u0061\":2}"),
                Arguments.of("nested duplicate key", "{\"a\":{\"b\":1,\"b\":2}}"),
                Arguments.of("duplicate key inside array", "[{\"x\":1},{\"y\":{\"z\":1,\"z\":1}}]"),
                Arguments.of("trailing comma in object", "{\"a\":1,}"),
                Arguments.of("trailing comma in array", "[1,]"),
                Arguments.of("trailing comma in nested array", "{\"a\":[1,2,]}"),
                Arguments.of("leading comma in array", "[,1]"),
                Arguments.of("double comma in array", "[1,,2]"),
                Arguments.of("comma only object", "{,}"),
                Arguments.of("single-quoted name", "{'a':1}"),
                Arguments.of("single-quoted string", "'a'"),
                Arguments.of("single-quoted element", "[\"a\",'b']"),
                Arguments.of("unquoted name", "{a:1}"),
                Arguments.of("number as name", "{1:2}"),
                Arguments.of("missing colon", "{\"a\" 1}"),
                Arguments.of("missing value", "{\"a\":}"),
                Arguments.of("missing comma in object", "{\"a\":1 \"b\":2}"),
                Arguments.of("missing comma in array", "[1 2]"),
                Arguments.of("leading zero", "01"),
                Arguments.of("leading zero in array", "[01]"),
                Arguments.of("negative leading zero", "-01"),
                Arguments.of("double zero", "00"),
                Arguments.of("plus sign", "+1"),
                Arguments.of("plus sign in array", "[+1]"),
                Arguments.of("leading dot", ".5"),
                Arguments.of("negative leading dot", "-.5"),
                Arguments.of("trailing dot", "1."),
                Arguments.of("trailing dot in array", "[1.]"),
                Arguments.of("dot before exponent", "1.e5"),
                Arguments.of("empty exponent", "1e"),
                Arguments.of("empty signed exponent", "1e+"),
                Arguments.of("empty negative exponent", "1E-"),
                Arguments.of("lone minus", "-"),
                Arguments.of("hex number", "0x10"),
                Arguments.of("underscore in number", "1_000"),
                Arguments.of("non-ASCII digit", "[\u0661]"),
                Arguments.of("NaN", "NaN"),
                Arguments.of("NaN in array", "[NaN]"),
                Arguments.of("Infinity", "Infinity"),
                Arguments.of("-Infinity", "-Infinity"),
                Arguments.of("unterminated string", "\"abc"),
                Arguments.of("unterminated string after escape", "\"abc\\"),
                Arguments.of("unterminated member name", "{\"a"),
                Arguments.of("raw tab in string", "\"a\tb\""),
                Arguments.of("raw newline in string", "\"a\nb\""),
                Arguments.of("raw NUL in string", "\"a" + (char) 0 + "b\""),
                Arguments.of("raw U+001F in name", "{\"a" + (char) 0x1f + "\":1}"),
                Arguments.of("escape \\x", "\"\\x41\""),
                Arguments.of("escape \\a", "\"\\a\""),
                Arguments.of("escape \\'", "\"\\'\""),
                Arguments.of("escape \\U", "\"\\U0041\""),
                Arguments.of("short \\u escape", "\"\\u12\""),
                Arguments.of("short \\u escape at end", "\"\\u12"),
                Arguments.of("empty \\u escape", "\"\\u\""),
                Arguments.of("non-hex \\u escape", "\"\\u12G4\""),
                Arguments.of("\\u escape with space", "\"\\u 123\""),
                Arguments.of("\\u escape with fullwidth digits", "\"\\u\uFF10\uFF10\uFF14\uFF11\""),
                Arguments.of("\\u escape with Arabic-Indic digits", "\"\\u\u0660\u0660\u0664\u0661\""),
                Arguments.of("empty body", ""),
                Arguments.of("only spaces", "   "),
                Arguments.of("only whitespace", " \n\t\r "),
                Arguments.of("two numbers", "1 2"),
                Arguments.of("two objects", "{} {}"),
                Arguments.of("two arrays", "[][]"),
                Arguments.of("two strings", "\"a\" \"b\""),
                Arguments.of("two literals", "null null"),
                Arguments.of("garbage after object", "{}x"),
                Arguments.of("garbage after literal", "truex"),
                Arguments.of("truncated literal", "tru"),
                Arguments.of("truncated null", "nul"),
                Arguments.of("capitalised literal", "True"),
                Arguments.of("upper-case null", "NULL"),
                Arguments.of("unclosed array", "[1"),
                Arguments.of("unclosed object", "{\"a\":1"),
                Arguments.of("lone open bracket", "["),
                Arguments.of("lone open brace", "{"),
                Arguments.of("lone close bracket", "]"),
                Arguments.of("lone close brace", "}"),
                Arguments.of("mismatched brackets", "[}"),
                Arguments.of("form feed is not whitespace", "\f1"),
                Arguments.of("no-break space is not whitespace", "\u00a01"),
                Arguments.of("byte order mark", "\uFEFF{}"),
                Arguments.of("comment", "{} // c"),
                Arguments.of("huge exponent", "1e999999999999"),
                Arguments.of("huge negative exponent", "1e-999999999999"),
                Arguments.of("exponent just past int", "1E2147483648"),
                Arguments.of("huge exponent in object", "{\"a\":[2.5E+99999999999999999999]}"));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("invalidDocuments")
    void rejectsInvalidDocumentsSayingWhere(String description, String json) {
        assertTimeoutPreemptively(NO_HANG, () -> assertThatThrownBy(() -> CanonicalJson.canonicalize(utf8(json)))
                .isInstanceOf(InvalidJsonException.class)
                .hasMessageContaining("character"));
        assertTimeoutPreemptively(NO_HANG, () -> assertThatThrownBy(() -> CanonicalJson.parse(utf8(json)))
                .isInstanceOf(InvalidJsonException.class));
    }

    static Stream<Arguments> invalidUtf8() {
        return Stream.of(
                Arguments.of("C3 28 (bad continuation)", bytes(0x22, 0xC3, 0x28, 0x22)),
                Arguments.of("lone continuation byte", bytes(0x22, 0x80, 0x22)),
                Arguments.of("overlong slash", bytes(0x22, 0xC0, 0xAF, 0x22)),
                Arguments.of("truncated 3-byte sequence", bytes(0x22, 0xE2, 0x82, 0x22)),
                Arguments.of("truncated at end", bytes(0x22, 0x61, 0x22, 0x20, 0xE2)),
                Arguments.of("encoded surrogate", bytes(0x22, 0xED, 0xA0, 0x80, 0x22)),
                Arguments.of("byte FF", bytes(0x5B, 0xFF, 0x5D)),
                Arguments.of("beyond U+10FFFF", bytes(0x22, 0xF4, 0x90, 0x80, 0x80, 0x22)),
                Arguments.of("invalid byte in member name", bytes(0x7B, 0x22, 0xC3, 0x28, 0x22, 0x3A, 0x31, 0x7D)));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("invalidUtf8")
    void rejectsInvalidUtf8(String description, byte[] body) {
        assertThatThrownBy(() -> CanonicalJson.canonicalize(body)).isInstanceOf(InvalidJsonException.class);
        assertThatThrownBy(() -> CanonicalJson.parse(body)).isInstanceOf(InvalidJsonException.class);
    }

    @Test
    void rejectsUtf8ByteOrderMark() {
        assertThatThrownBy(() -> CanonicalJson.parse(bytes(0xEF, 0xBB, 0xBF, 0x7B, 0x7D)))
                .isInstanceOf(InvalidJsonException.class)
                .hasMessageContaining("character");
        assertThatThrownBy(() -> CanonicalJson.parse(bytes(0xEF, 0xBB, 0xBF, 0x31)))
                .isInstanceOf(InvalidJsonException.class);
    }

    /** The message is shown to the client: the character it names is written so that it can be read there. */
    @Test
    void errorMessagesShowTheCharacterTheyNameReadably() {
        assertThatThrownBy(() -> parse("[~]")).hasMessageEndingWith("unexpected character '~'");
        assertThatThrownBy(() -> parse("[" + (char) 1 + "]")).hasMessageEndingWith("unexpected character '\\u0001'");
        assertThatThrownBy(() -> parse("[" + (char) 0x7f + "]")).hasMessageEndingWith("unexpected character '\\u007f'");
        assertThatThrownBy(() -> parse("[\u00e9]")).hasMessageEndingWith("unexpected character '\\u00e9'");
        assertThatThrownBy(() -> parse("\"\\ \"")).hasMessageEndingWith("invalid escape \\ ");
        assertThatThrownBy(() -> parse("\"\\" + (char) 0x1f + "\"")).hasMessageEndingWith("invalid escape \\\\u001f");
    }

    @Test
    void aByteOrderMarkAfterWhitespaceIsNamedAsSuch() {
        assertThatThrownBy(() -> parse(" \n\uFEFF{}")).hasMessageContaining("character 3")
                .hasMessageEndingWith("a byte order mark is not allowed");
    }

    @Test
    void errorMessageGivesThePosition() {
        assertThatThrownBy(() -> parse("[1,2,x]"))
                .isInstanceOf(InvalidJsonException.class)
                .hasMessageContaining("character 6");
        assertThatThrownBy(() -> parse("{\"a\":1,\"a\":2}"))
                .isInstanceOf(InvalidJsonException.class)
                .hasMessageContaining("character")
                .hasMessageContaining("duplicate");
    }

    // ------------------------------------------------------------------ depth

    @Nested
    class Depth {

        @Test
        void acceptsMaxDepthNestedArrays() throws Exception {
            String json = nestedArrays(CanonicalJson.MAX_DEPTH, "");
            assertThat(canon(json)).isEqualTo(json);
            String withScalar = nestedArrays(CanonicalJson.MAX_DEPTH, "1");
            assertThat(canon(withScalar)).isEqualTo(withScalar);
        }

        @Test
        void acceptsMaxDepthNestedObjects() throws Exception {
            String json = nestedObjects(CanonicalJson.MAX_DEPTH);
            assertThat(canon(json)).isEqualTo(json);
        }

        @Test
        void rejectsOneLevelTooManyEmptyArrays() {
            assertThatThrownBy(() -> parse(nestedArrays(CanonicalJson.MAX_DEPTH + 1, "")))
                    .isInstanceOf(InvalidJsonException.class)
                    .hasMessageContaining("character");
        }

        @Test
        void rejectsOneLevelTooManyArraysAroundAScalar() {
            assertThatThrownBy(() -> parse(nestedArrays(CanonicalJson.MAX_DEPTH + 1, "1")))
                    .isInstanceOf(InvalidJsonException.class)
                    .hasMessageContaining("character");
        }

        @Test
        void rejectsOneLevelTooManyObjects() {
            assertThatThrownBy(() -> parse(nestedObjects(CanonicalJson.MAX_DEPTH + 1)))
                    .isInstanceOf(InvalidJsonException.class)
                    .hasMessageContaining("character");
        }

        @Test
        void rejectsVeryDeepNestingWithoutStackOverflow() {
            assertTimeoutPreemptively(NO_HANG, () -> {
                assertThatThrownBy(() -> parse(nestedArrays(200_000, "")))
                        .isInstanceOf(InvalidJsonException.class);
                assertThatThrownBy(() -> parse("[".repeat(200_000)))
                        .isInstanceOf(InvalidJsonException.class);
                assertThatThrownBy(() -> parse("{\"a\":".repeat(200_000)))
                        .isInstanceOf(InvalidJsonException.class);
            });
        }
    }

    // ------------------------------------------------------------------ extreme numbers

    @ParameterizedTest
    @ValueSource(strings = {"1e999999999", "-1e-999999999", "10e2147483647", "100e2147483647",
        "12345678901234567890e2147483647", "[1e2147483647]", "1e-2147483647"})
    void extremeExponentsAreRejectedCleanlyOrRoundTrip(String json) {
        assertTimeoutPreemptively(NO_HANG, () -> {
            byte[] canonical;
            try {
                canonical = CanonicalJson.canonicalize(utf8(json));
            } catch (InvalidJsonException rejected) {
                assertThat(rejected).hasMessageContaining("character");
                return;
            } catch (RuntimeException unexpected) {
                fail("canonicalize(" + json + ") threw " + unexpected + " instead of InvalidJsonException");
                return;
            }
            try {
                assertCanonicalFormIsStable(canonical);
            } catch (InvalidJsonException notReparseable) {
                fail("canonical form " + new String(canonical, UTF_8) + " of " + json
                        + " is not valid JSON: " + notReparseable.getMessage());
            }
        });
    }

    /**
     * Numbers are compared as exact decimals, so the range a number must be in is one of its value: every spelling of
     * one value is read alike, or refused alike, whatever exponent and digits it is written with.
     */
    @Test
    void aNumberIsReadOrRefusedByItsValueNotByHowItIsWritten() throws Exception {
        // 1.5 × 10^-100000 and 10^100000: within the exponents accepted, however they are written
        for (String json : List.of("1.5e-100000", "15e-100001", "0.15e-99999", "1500e-100003")) {
            assertThat(canon(json)).as(json).isEqualTo("1.5E-100000");
        }
        for (String json : List.of("1e100000", "10e99999", "0.1e100001", "1.000e100000")) {
            assertThat(canon(json)).as(json).isEqualTo("1E+100000");
        }
        // 10^100001: beyond them, however it is written
        for (String json : List.of("1e100001", "10e100000", "0.1e100002", "100e99999")) {
            assertThatThrownBy(() -> parse(json)).as(json)
                    .isInstanceOf(InvalidJsonException.class).hasMessageContaining("out of range");
        }
        // and so is every other number beyond them, whatever its digits: never read as zero
        for (String json : List.of("9e100001", "-9e-100001", "0.9e-100000")) {
            assertThatThrownBy(() -> parse(json)).as(json)
                    .isInstanceOf(InvalidJsonException.class).hasMessageContaining("out of range");
        }
        // zero is zero whatever its exponent
        for (String json : List.of("0e-100001", "-0.0e100001", "0e99999999999", "[0E-2147483649]")) {
            assertThat(canon(json)).as(json).isEqualTo(json.startsWith("[") ? "[0]" : "0");
        }
    }

    @Test
    void aNumberOfAtMostAThousandCharactersIsRead() throws Exception {
        String digits = "1" + "0".repeat(CanonicalJson.MAX_NUMBER_LENGTH - 1);
        assertThat(canon(digits)).isEqualTo("1E+" + (CanonicalJson.MAX_NUMBER_LENGTH - 1));
        String fraction = "-0." + "0".repeat(CanonicalJson.MAX_NUMBER_LENGTH - 4) + "1";
        assertThat(fraction).hasSize(CanonicalJson.MAX_NUMBER_LENGTH);
        assertThat(canon(fraction)).isEqualTo("-1E-" + (CanonicalJson.MAX_NUMBER_LENGTH - 3));
        // counted from the number's own first character, wherever it stands in the body
        assertThat(canon("{\"amount\": " + digits + "}"))
                .isEqualTo("{\"amount\":1E+" + (CanonicalJson.MAX_NUMBER_LENGTH - 1) + "}");
        assertThatThrownBy(() -> parse("{\"amount\": " + digits + "0}"))
                .isInstanceOf(InvalidJsonException.class).hasMessageContaining("number longer");
    }

    /**
     * Jackson's {@code maxNumberLength} counts a number's digits, not its sign, its point, nor the letter and sign of
     * its exponent: a number of 1000 digits so written is read into a typed {@code @RequestBody} (a
     * {@code BigDecimal} or {@code BigInteger} field), and must not be refused here as a body that cannot be
     * fingerprinted, with 400, for a request the handler reads.
     */
    @Test
    void aNumberIsMeasuredByItsDigitsAsJacksonMeasuresIt() throws Exception {
        String thousandDigits = "1".repeat(CanonicalJson.MAX_NUMBER_LENGTH);
        assertThat(canon("-" + thousandDigits)).isEqualTo("-" + thousandDigits);
        String fraction = "-1." + "1".repeat(CanonicalJson.MAX_NUMBER_LENGTH - 1);
        assertThat(canon(fraction)).isEqualTo(fraction);
        String scientific = "-1." + "1".repeat(CanonicalJson.MAX_NUMBER_LENGTH - 3) + "E-12";
        assertThat(canon("[" + scientific + "]")).isEqualTo("[" + new BigDecimal(scientific) + "]");
        // a digit more is refused, as Jackson refuses it, however it is written
        for (String longer : List.of("-1" + thousandDigits, "1." + thousandDigits, "-1." + thousandDigits,
                "-1." + "1".repeat(CanonicalJson.MAX_NUMBER_LENGTH - 2) + "e-12", thousandDigits + "e+1")) {
            assertThatThrownBy(() -> parse(longer)).as(longer)
                    .isInstanceOf(InvalidJsonException.class).hasMessageContaining("number longer");
        }
    }

    @Test
    void aLongerNumberIsRefusedBeforeItsValueIsComputed() {
        // converting a number of n digits costs time in n squared: a body of the default 1 MB cap holding one number
        // took seconds of CPU, before any database work, also when the handler reads the body as text
        assertThatThrownBy(() -> parse("1" + "0".repeat(CanonicalJson.MAX_NUMBER_LENGTH)))
                .isInstanceOf(InvalidJsonException.class)
                .hasMessageContaining("number");
        assertThatThrownBy(() -> parse("[0." + "1".repeat(CanonicalJson.MAX_NUMBER_LENGTH) + "]"))
                .isInstanceOf(InvalidJsonException.class);
        assertThatThrownBy(() -> parse("1e" + "0".repeat(CanonicalJson.MAX_NUMBER_LENGTH) + "1"))
                .isInstanceOf(InvalidJsonException.class);
        String tenLongNumbers = "[" + String.join(",", Collections.nCopies(10, "1" + "0".repeat(99_990))) + "]";
        assertTimeoutPreemptively(NO_HANG, () -> assertThatThrownBy(() -> parse(tenLongNumbers))
                .isInstanceOf(InvalidJsonException.class));
        String oneMegabyteNumber = "9".repeat(1_000_000);
        assertTimeoutPreemptively(NO_HANG, () -> assertThatThrownBy(() -> parse(oneMegabyteNumber))
                .isInstanceOf(InvalidJsonException.class));
    }

    @Test
    void javaArraysAreWrittenByTheirElementsAndNotFiniteNumbersAsText() throws Exception {
        // values of fingerprint expressions: an array's toString() names the instance, so a retry would not match
        assertThat(new String(CanonicalJson.canonicalize(new String[] {"a", "b"}), UTF_8)).isEqualTo("[\"a\",\"b\"]");
        assertThat(CanonicalJson.canonicalize(new int[] {1, 2})).isEqualTo(CanonicalJson.canonicalize(List.of(1, 2)));
        assertThat(CanonicalJson.canonicalize(new Object[] {new long[] {3}}))
                .isEqualTo(CanonicalJson.canonicalize(new Object[] {new long[] {3}}));
        assertThat(new String(CanonicalJson.canonicalize(java.util.Set.of(1.50)), UTF_8)).isEqualTo("[1.5]");
        assertThat(new String(CanonicalJson.canonicalize(
                Arrays.asList(Double.NaN, Double.NEGATIVE_INFINITY, Float.POSITIVE_INFINITY, 2.0)), UTF_8))
                .isEqualTo("[\"NaN\",\"-Infinity\",\"Infinity\",2]");
    }

    @Test
    void finiteFloatsAndDoublesAreWrittenAsTheNumbersTheyAreNotAsText() {
        // a fingerprint expression's value: the float 1.5 is the number 1.5, and not the string "1.5"
        assertThat(new String(CanonicalJson.canonicalize(List.of(1.5f, -0.25d, 2.0f)), UTF_8)).isEqualTo("[1.5,-0.25,2]");
        assertThat(CanonicalJson.canonicalize(1.5f)).isEqualTo(CanonicalJson.canonicalize(new BigDecimal("1.50")))
                .isNotEqualTo(CanonicalJson.canonicalize("1.5"));
        assertThat(new String(CanonicalJson.canonicalize(Float.NaN), UTF_8)).isEqualTo("\"NaN\"");
    }

    @Test
    void aNumberWhoseTextIsNoDecimalIsWrittenAsTextAsTheNotFiniteDoublesAre() {
        // a fingerprint expression's value: a DoubleAdder that summed to NaN, or a Number of the application's whose
        // toString() is a name, is not refused with a NumberFormatException (an error page for every such request)
        java.util.concurrent.atomic.DoubleAdder notANumber = new java.util.concurrent.atomic.DoubleAdder();
        notANumber.add(Double.NaN);
        assertThat(CanonicalJson.canonicalize(notANumber)).isEqualTo(CanonicalJson.canonicalize(Double.NaN));
        Number named = new Number() {
            @Override
            public int intValue() {
                return 1;
            }

            @Override
            public long longValue() {
                return 1;
            }

            @Override
            public float floatValue() {
                return 1;
            }

            @Override
            public double doubleValue() {
                return 1;
            }

            @Override
            public String toString() {
                return "one";
            }
        };
        assertThat(new String(CanonicalJson.canonicalize(List.of(named)), UTF_8)).isEqualTo("[\"one\"]");
    }

    @Test
    void anOptionalIsWrittenAsTheValueItHolds() {
        // a parameter such as @RequestParam Optional<List<String>>: its toString() would write "[a, b]" for the one
        // element "a, b" too, and a number as it is spelt
        assertThat(new String(CanonicalJson.canonicalize(java.util.Optional.of(List.of("a, b", "c"))), UTF_8))
                .isEqualTo("[\"a, b\",\"c\"]");
        assertThat(CanonicalJson.canonicalize(java.util.Optional.of(List.of("a", "b", "c"))))
                .isNotEqualTo(CanonicalJson.canonicalize(java.util.Optional.of(List.of("a, b", "c"))));
        assertThat(CanonicalJson.canonicalize(java.util.Optional.of(new BigDecimal("1.25e3"))))
                .isEqualTo(CanonicalJson.canonicalize(new BigDecimal("1250")));
        assertThat(new String(CanonicalJson.canonicalize(List.of(java.util.Optional.empty(),
                java.util.Optional.of(Map.of("b", 1, "a", 2)))), UTF_8)).isEqualTo("[null,{\"a\":2,\"b\":1}]");
    }

    /**
     * A set gives its members in an order of its own: a HashSet in the order they were added when their hash codes
     * meet, Set.of in one salted at each start of the JVM. The same members are one value whatever that order, so
     * that a retry on another instance is not refused as a different request; a sorted set and a list keep theirs.
     */
    @Test
    void aSetIsWrittenByItsMembersWhateverTheOrderItGivesThem() {
        java.util.Set<String> one = new java.util.HashSet<>();
        one.add("Aa");
        one.add("BB"); // the same hash code as "Aa": the two iterate in the order they were added
        java.util.Set<String> other = new java.util.HashSet<>();
        other.add("BB");
        other.add("Aa");
        assertThat(new String(CanonicalJson.canonicalize(Map.of("rails", one)), UTF_8))
                .isEqualTo("{\"rails\":[\"Aa\",\"BB\"]}");
        assertThat(CanonicalJson.canonicalize(Map.of("rails", other)))
                .isEqualTo(CanonicalJson.canonicalize(Map.of("rails", one)));
        assertThat(new String(CanonicalJson.canonicalize(java.util.Set.of(3, "b", List.of(1))), UTF_8))
                .isEqualTo("[\"b\",3,[1]]");
        java.util.Set<String> reversed = new java.util.TreeSet<>(java.util.Comparator.reverseOrder());
        reversed.addAll(List.of("a", "b"));
        assertThat(new String(CanonicalJson.canonicalize(reversed), UTF_8)).isEqualTo("[\"b\",\"a\"]");
        assertThat(CanonicalJson.canonicalize(List.of("b", "a")))
                .isNotEqualTo(CanonicalJson.canonicalize(List.of("a", "b")));
    }

    /**
     * Half of a surrogate pair (a parameter decoded from a charset that gives one, CESU-8's) is no character UTF-8
     * holds: encoded as it is, it would become "?", and a request naming "?" would be the same request.
     */
    @Test
    void halfOfASurrogatePairIsWrittenEscapedNotAsAQuestionMark() {
        assertThat(new String(CanonicalJson.canonicalize("\uD800"), UTF_8)).isEqualTo("\"\\ud800\"");
        assertThat(CanonicalJson.canonicalize("\uD800")).isNotEqualTo(CanonicalJson.canonicalize("?"));
        assertThat(CanonicalJson.canonicalize(Map.of("payee", List.of("\uDC00"))))
                .isNotEqualTo(CanonicalJson.canonicalize(Map.of("payee", List.of("?"))));
        assertThat(CanonicalJson.canonicalize(Map.of("\uDC00", 1)))
                .isNotEqualTo(CanonicalJson.canonicalize(Map.of("?", 1)));
        assertThat(new String(CanonicalJson.canonicalize("a\uDE00\uD83Db"), UTF_8))
                .as("a pair in the wrong order is two halves").isEqualTo("\"a\\ude00\\ud83db\"");
        assertThat(CanonicalJson.canonicalize("\uD83D\uDE00"))
                .as("a whole pair is the character it makes").isEqualTo("\"\uD83D\uDE00\"".getBytes(UTF_8));
    }

    /**
     * A map whose names are written alike (an expression's map of the number 1 and the text "1") is refused: written
     * with one of them only, it would be the same value as another map, and two different requests one.
     */
    @Test
    void aMapWhoseNamesAreWrittenAlikeIsRefusedNotMerged() {
        Map<Object, Object> mixed = new LinkedHashMap<>();
        mixed.put(1, "a");
        mixed.put("1", "b");
        assertThatThrownBy(() -> CanonicalJson.canonicalize(mixed)).isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("same text");
        assertThatThrownBy(() -> CanonicalJson.canonicalize(List.of(Map.of("order", mixed))))
                .as("at any depth").isInstanceOf(IllegalArgumentException.class);
        Map<Object, Object> nullValues = new LinkedHashMap<>();
        nullValues.put(1, null);
        nullValues.put("1", null);
        assertThatThrownBy(() -> CanonicalJson.canonicalize(nullValues)).as("also when the values are null")
                .isInstanceOf(IllegalArgumentException.class);
        // names of other types that are written differently are kept apart, as before
        Map<Object, Object> distinct = new LinkedHashMap<>();
        distinct.put(1, "a");
        distinct.put("2", "b");
        assertThat(new String(CanonicalJson.canonicalize(distinct), UTF_8)).isEqualTo("{\"1\":\"a\",\"2\":\"b\"}");
    }

    /**
     * The canonical text of a number is what {@link BigDecimal#stripTrailingZeros()} gives, also for the long numbers
     * whose zeros are counted on the digits: numbers of 1 to 1000 digits, with and without trailing zeros, both signs,
     * every scale, from a fixed seed.
     */
    @Test
    void longNumbersAreCanonicalExactlyAsStrippingTheirZerosWouldMakeThem() {
        java.util.Random random = new java.util.Random(20261130);
        for (int i = 0; i < 3000; i++) {
            int length = 1 + random.nextInt(i % 10 == 0 ? 1000 : 40);
            StringBuilder digits = new StringBuilder().append(1 + random.nextInt(9));
            int zeros = random.nextInt(3) == 0 ? 0 : random.nextInt(length);
            for (int d = 1; d < length; d++) {
                digits.append(d >= length - zeros ? '0' : (char) ('0' + random.nextInt(10)));
            }
            BigDecimal number = new BigDecimal(new java.math.BigInteger((random.nextBoolean() ? "-" : "") + digits),
                    random.nextInt(2401) - 1200);
            assertThat(CanonicalJson.canonicalNumber(number)).as(number.toString())
                    .isEqualTo(number.stripTrailingZeros().toString());
        }
        assertThat(CanonicalJson.canonicalNumber(new BigDecimal("0E+5"))).isEqualTo("0");
        assertThat(CanonicalJson.canonicalNumber(new BigDecimal("1" + "0".repeat(999)))).isEqualTo("1E+999");
        assertThat(CanonicalJson.canonicalNumber(new BigDecimal("-12.50" + "0".repeat(990)))).isEqualTo("-12.5");
    }

    /**
     * A value with more trailing zeros than the scale has room to drop, as a method parameter may hold (JSON bodies cap
     * their exponents): written as stripping its zeros would write it, had a BigDecimal such a scale.
     */
    @Test
    void numbersBeyondTheScalesOfABigDecimalAreWrittenInExponentialNotation() {
        assertThat(CanonicalJson.canonicalNumber(new BigDecimal("100e2147483647"))).isEqualTo("1E+2147483649");
        assertThat(CanonicalJson.canonicalNumber(new BigDecimal("1000e2147483646"))).isEqualTo("1E+2147483649");
        assertThat(CanonicalJson.canonicalNumber(new BigDecimal("-2500e2147483647"))).isEqualTo("-2.5E+2147483650");
        assertThat(CanonicalJson.canonicalNumber(new BigDecimal("12" + "0".repeat(30) + "e2147483647")))
                .isEqualTo("1.2E+2147483678");
        // just within: as stripping the zeros makes it
        assertThat(CanonicalJson.canonicalNumber(new BigDecimal("10e2147483647")))
                .isEqualTo(new BigDecimal("10e2147483647").stripTrailingZeros().toString());
    }

    /** A duplicate member name is decoded: its message shows it on one line, escaped, and cut if long. */
    @Test
    void aDuplicateMemberNameIsShownEscapedAndCut() {
        assertThatThrownBy(() -> CanonicalJson.canonicalize("{\"a\\nINFO forged\":1,\"a\\nINFO forged\":2}".getBytes(
                java.nio.charset.StandardCharsets.UTF_8))).hasMessageContaining("a\\nINFO forged")
                .hasMessageNotContaining("\n");
        String longName = "n".repeat(10_000);
        byte[] body = ("{\"" + longName + "\":1,\"" + longName + "\":2}").getBytes(UTF_8);
        assertThatThrownBy(() -> CanonicalJson.canonicalize(body))
                .satisfies(e -> assertThat(e.getMessage()).hasSizeLessThan(200));
    }

    /**
     * The canonical form written as the text is read (what fingerprinting a body uses) is the canonical form of the
     * parsed value, byte for byte, and refuses what parsing refuses with the same message: checked on thousands of
     * generated texts, valid ones and the same broken (cut, a character dropped, doubled or replaced). The seed is
     * random per run and named in every failure; -Didempotency.json.seed=… replays a run.
     */
    @Test
    void theCanonicalFormWrittenAsTheTextIsReadIsTheParsedValuesForm() {
        long seed = Long.getLong("idempotency.json.seed", new java.util.Random().nextLong());
        java.util.Random random = new java.util.Random(seed);
        int valid = 0;
        int refused = 0;
        for (int i = 0; i < 3000; i++) {
            String text = randomJson(random, 0);
            if (i % 2 == 1) {
                text = broken(random, text);
            }
            byte[] body = utf8(text);
            String what = "seed " + seed + ", text " + i + ": " + text;
            byte[] parsedForm;
            String parseFailure = null;
            try {
                parsedForm = CanonicalJson.canonicalize(CanonicalJson.parse(body), body.length);
            } catch (InvalidJsonException e) {
                parsedForm = null;
                parseFailure = e.getMessage();
            }
            byte[] streamed;
            String streamFailure = null;
            try {
                streamed = CanonicalJson.canonicalize(body);
            } catch (InvalidJsonException e) {
                streamed = null;
                streamFailure = e.getMessage();
            }
            assertThat(streamFailure).as(what).isEqualTo(parseFailure);
            assertThat(streamed).as(what).isEqualTo(parsedForm);
            if (parsedForm != null) {
                valid++;
            } else {
                refused++;
            }
        }
        // both sides are reached, or the comparison proves nothing
        assertThat(valid).as("texts read, seed " + seed).isGreaterThan(1000);
        assertThat(refused).as("texts refused, seed " + seed).isGreaterThan(500);
    }

    /**
     * Objects nested as deep as the fingerprint takes, each with its members out of order, inside objects out of order
     * and arrays: written as the text is read, every object is put in order, inner ones within outer ones.
     */
    @Test
    void deeplyNestedObjectsOutOfOrderAreWrittenAsTheirParsedValuesAre() throws Exception {
        // the outer array and object, then an object and an array each time, and the objects in the last array: 128 levels
        int repeats = (CanonicalJson.MAX_DEPTH - 4) / 2;
        String text = "[{\"y\":1,\"x\":" + "{\"z\":[{\"d\":0,\"c\":1},".repeat(repeats) + "\"innermost\""
                + ",{\"b\":0,\"a\":1}],\"a\":0}".repeat(repeats) + "}]";
        byte[] body = utf8(text);
        byte[] streamed = CanonicalJson.canonicalize(body);
        assertThat(streamed).isEqualTo(CanonicalJson.canonicalize(CanonicalJson.parse(body), body.length));
        assertThat(new String(streamed, UTF_8)).startsWith("[{\"x\":{\"a\":0,\"z\":[{\"c\":1,\"d\":0},{\"a\":0,");
    }

    /** Members in any order (names of every kind, duplicates now and then), any spacing, values of every kind. */
    private static String randomJson(java.util.Random random, int depth) {
        String[] names = {"a", "b", "B", "aa", "", "\\u00e9", "\u00e9", "e\\u0301", "\\n", "\\\"", "z\ud83d\ude00",
                "\\ud83d\\ude00", "\\/", "10", "9", "\u20ac"};
        int kind = random.nextInt(depth < 4 ? 12 : 8);
        switch (kind) {
            case 0: return "true";
            case 1: return "false";
            case 2: return "null";
            case 3: // now and then long enough for the objects around it to be put in order at the end, not at once
                return "\"" + names[random.nextInt(names.length)] + "y".repeat(random.nextInt(6) == 0 ? 300 : 0)
                        + "\\t x\"";
            case 4: return Long.toString(random.nextLong());
            case 5: return (random.nextBoolean() ? "-" : "") + random.nextInt(1000) + "." + "0".repeat(random.nextInt(3))
                    + random.nextInt(100) + (random.nextBoolean() ? "e" + (random.nextInt(40) - 20) : "");
            case 6: return random.nextBoolean() ? "0" : "-0.0e5";
            case 7: return "\"\"";
            case 8: case 9: {
                StringBuilder array = new StringBuilder("[").append(space(random));
                int elements = random.nextInt(5);
                for (int i = 0; i < elements; i++) {
                    array.append(i > 0 ? "," + space(random) : "").append(randomJson(random, depth + 1));
                }
                return array.append(space(random)).append("]").toString();
            }
            default: {
                StringBuilder object = new StringBuilder("{").append(space(random));
                int members = random.nextInt(6);
                java.util.Set<String> used = new java.util.HashSet<>();
                boolean first = true;
                for (int i = 0; i < members; i++) {
                    String name = names[random.nextInt(names.length)];
                    if (!used.add(name) && random.nextInt(10) > 0) {
                        continue; // a duplicate name now and then only
                    }
                    object.append(first ? "" : ",").append(space(random)).append('"').append(name).append('"').append(space(random))
                            .append(':').append(space(random)).append(randomJson(random, depth + 1));
                    first = false;
                }
                return object.append(space(random)).append("}").toString();
            }
        }
    }

    private static String space(java.util.Random random) {
        return switch (random.nextInt(5)) {
            case 0 -> " ";
            case 1 -> "\n\t";
            default -> "";
        };
    }

    /** {@code text} cut, with a character dropped, doubled or replaced by a JSON-significant one. */
    private static String broken(java.util.Random random, String text) {
        if (text.isEmpty()) {
            return "{";
        }
        int at = random.nextInt(text.length());
        return switch (random.nextInt(4)) {
            case 0 -> text.substring(0, at);
            case 1 -> text.substring(0, at) + text.substring(at + 1);
            case 2 -> text.substring(0, at) + text.charAt(at) + text.substring(at);
            default -> {
                String significant = "{}[],:\"\\0-e.";
                yield text.substring(0, at) + significant.charAt(random.nextInt(significant.length()))
                        + text.substring(at + 1);
            }
        };
    }
}
