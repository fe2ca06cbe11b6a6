package io.idempotency.spring;

import io.idempotency.core.CanonicalJson;
import org.junit.jupiter.api.Test;
import tools.jackson.databind.DeserializationFeature;
import tools.jackson.databind.JsonNode;
import tools.jackson.databind.json.JsonMapper;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.Optional;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A Jackson tree of a JSON text is written in canonical form exactly as the text itself is: what a key or fingerprint
 * expression that reads a {@code JsonNode} parameter is compared by is what the same expression over {@code #body}
 * would be compared by. Checked on generated texts — members in any order, objects long and short, escapes, characters
 * outside the BMP, long integers, decimals and exponents — read by Jackson 3 and 2, keeping decimals exact (the
 * application's choice: read as {@code double}s, {@code 0.1} and {@code 0.10000000000000000001} are one number to it,
 * and so to the tree's content).
 */
class JsonTreeContentTest {

    private static final JsonMapper EXACT = JsonMapper.builder()
            .enable(DeserializationFeature.USE_BIG_DECIMAL_FOR_FLOATS)
            .enable(DeserializationFeature.USE_BIG_INTEGER_FOR_INTS)
            .build();
    /** Jackson 2, whose trees an application may still bind (spring-boot-jackson2). */
    private static final com.fasterxml.jackson.databind.ObjectMapper EXACT_2 =
            new com.fasterxml.jackson.databind.ObjectMapper().enable(
                    com.fasterxml.jackson.databind.DeserializationFeature.USE_BIG_DECIMAL_FOR_FLOATS,
                    com.fasterxml.jackson.databind.DeserializationFeature.USE_BIG_INTEGER_FOR_INTS);

    @Test
    void aTreeIsWrittenAsTheTextItWasReadFrom() throws Exception {
        Random random = new Random(20261207);
        for (int i = 0; i < 2_000; i++) {
            StringBuilder text = new StringBuilder();
            value(random, text, 0);
            String json = text.toString();
            JsonNode tree = EXACT.readTree(json);

            byte[] fromText = CanonicalJson.canonicalize(json.getBytes(StandardCharsets.UTF_8));
            assertThat(new String(CanonicalJson.canonicalize(tree), StandardCharsets.UTF_8)).as(json)
                    .isEqualTo(new String(fromText, StandardCharsets.UTF_8));
            assertThat(new String(CanonicalJson.canonicalize(EXACT_2.readTree(json)), StandardCharsets.UTF_8))
                    .as("Jackson 2: %s", json).isEqualTo(new String(fromText, StandardCharsets.UTF_8));
            // at any depth: in a list an expression builds, and in an Optional
            assertThat(CanonicalJson.canonicalize(List.of(Optional.of(tree), "x"))).as(json)
                    .isEqualTo(CanonicalJson.canonicalize(Arrays.asList(CanonicalJson.parse(json.getBytes(
                            StandardCharsets.UTF_8)), "x")));
        }
    }

    /**
     * Half of a surrogate pair in a tree (a tree a binary format or the application built) is kept as it is, whether
     * or not its text needs other escapes, and written escaped: the tree's members in either order are one
     * fingerprint. (A key holding one is refused where keys are read: no text column stores it.)
     */
    @Test
    void halfASurrogatePairInATreeIsKeptAsItIs() {
        JsonNode plain = EXACT.createObjectNode().put("b", "\ud800").put("a", "x");
        // in a text that needs escapes too, which the reader takes character by character
        JsonNode escaped = EXACT.createObjectNode().put("b", "\ud800\"y\n").put("a", "x");
        JsonNode escapedReordered = EXACT.createObjectNode().put("a", "x").put("b", "\ud800\"y\n");

        assertThat(CanonicalJson.treeContent(EXACT.getNodeFactory().textNode("\ud800"))).isEqualTo("\ud800");
        assertThat(CanonicalJson.canonicalize(escaped)).isEqualTo(CanonicalJson.canonicalize(escapedReordered));
        assertThat(new String(CanonicalJson.canonicalize(plain), StandardCharsets.UTF_8))
                .isEqualTo("{\"a\":\"x\",\"b\":\"\\ud800\"}");
        assertThat(new String(CanonicalJson.canonicalize(escaped), StandardCharsets.UTF_8))
                .isEqualTo("{\"a\":\"x\",\"b\":\"\\ud800\\\"y\\u000a\"}");
    }

    @Test
    void aTextNodeIsItsTextAndANullNodeIsNull() throws Exception {
        assertThat(CanonicalJson.treeContent(EXACT.readTree("\"a \\\"quoted\\\" \\u00e9 \\ud83d\\ude00\"")))
                .isEqualTo("a \"quoted\" é \uD83D\uDE00");
        assertThat(CanonicalJson.treeContent(EXACT.readTree("null"))).isNull();
        assertThat(CanonicalJson.treeContent(EXACT.readTree("1.25e3"))).isEqualTo(new java.math.BigDecimal("1.25e3"));
        Object missing = EXACT.readTree("{}").path("absent");
        assertThat(CanonicalJson.treeContent(missing)).as("a missing node's text is no JSON").isSameAs(missing);
        assertThat(CanonicalJson.treeContent("not a tree")).isEqualTo("not a tree");
    }

    private static void value(Random random, StringBuilder out, int depth) {
        int kind = depth >= 4 ? 2 + random.nextInt(4) : random.nextInt(6);
        switch (kind) {
            case 0 -> {
                out.append('{');
                // now and then an object long enough (over 256 characters) to be put in order once it has ended
                boolean large = random.nextInt(8) == 0;
                int members = large ? 20 + random.nextInt(10) : random.nextInt(5);
                for (int i = 0; i < members; i++) {
                    if (i > 0) {
                        out.append(',');
                    }
                    // distinct names, in an order of their own
                    string(random, out, (char) ('a' + random.nextInt(26)) + "-" + i);
                    out.append(random.nextBoolean() ? ":" : " : ");
                    value(random, out, large ? 4 : depth + 1);
                }
                out.append('}');
            }
            case 1 -> {
                out.append('[');
                int elements = random.nextInt(4);
                for (int i = 0; i < elements; i++) {
                    if (i > 0) {
                        out.append(random.nextBoolean() ? "," : ", ");
                    }
                    value(random, out, depth + 1);
                }
                out.append(']');
            }
            case 2 -> string(random, out, text(random));
            case 3 -> out.append(number(random));
            case 4 -> out.append(random.nextBoolean() ? "true" : "false");
            default -> out.append(random.nextInt(3) == 0 ? "null" : number(random));
        }
    }

    private static String text(Random random) {
        String[] parts = {"a", "Zürich", "\uD83D\uDE00", "\u2028", "tab\t", "quote\"", "back\\slash", "\u0001", "/",
                "日本"};
        StringBuilder text = new StringBuilder();
        for (int i = random.nextInt(4); i > 0; i--) {
            text.append(parts[random.nextInt(parts.length)]);
        }
        return text.toString();
    }

    /** Writes {@code value} as a JSON string, escaping what must be and, now and then, what may be. */
    private static void string(Random random, StringBuilder out, String value) {
        out.append('"');
        for (int i = 0; i < value.length(); i++) {
            char c = value.charAt(i);
            boolean pair = Character.isHighSurrogate(c) && i + 1 < value.length();
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20 || random.nextInt(8) == 0) {
                // a pair escaped whole: half of one escaped and half not is no text
                out.append(String.format("\\u%04x", (int) c));
                if (pair) {
                    out.append(String.format("\\u%04x", (int) value.charAt(++i)));
                }
            } else {
                out.append(c);
                if (pair) {
                    out.append(value.charAt(++i));
                }
            }
        }
        out.append('"');
    }

    private static String number(Random random) {
        return switch (random.nextInt(6)) {
            case 0 -> Integer.toString(random.nextInt(2001) - 1000);
            case 1 -> "123456789012345678901234567890";
            case 2 -> (random.nextBoolean() ? "-" : "") + random.nextInt(1000) + "." + random.nextInt(1000) + "0";
            case 3 -> random.nextInt(100) + "e" + (random.nextInt(20) - 10);
            case 4 -> "1.25E+3";
            default -> "0.10000000000000000001";
        };
    }
}
