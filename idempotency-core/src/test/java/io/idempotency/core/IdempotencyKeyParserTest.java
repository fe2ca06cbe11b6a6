package io.idempotency.core;

import static org.assertj.core.api.Assertions.assertThat;

import io.idempotency.core.IdempotencyKeyParser.Malformed;
import io.idempotency.core.IdempotencyKeyParser.Missing;
import io.idempotency.core.IdempotencyKeyParser.Result;
import io.idempotency.core.IdempotencyKeyParser.Valid;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

class IdempotencyKeyParserTest {

    private static Result parse(String value) {
        return IdempotencyKeyParser.parse(value);
    }

    private static void assertValid(String fieldValue, String expectedKey) {
        assertThat(parse(fieldValue)).as("parse(%s)", fieldValue).isEqualTo(new Valid(expectedKey));
    }

    private static void assertMalformed(String fieldValue) {
        assertThat(parse(fieldValue)).as("parse(%s)", fieldValue).isInstanceOf(Malformed.class);
    }

    @Test
    void bareUuidIsValid() {
        assertValid("550e8400-e29b-41d4-a716-446655440000", "550e8400-e29b-41d4-a716-446655440000");
    }

    @Test
    void quotedAndBareFormsGiveTheSameKey() {
        assertThat(parse("\"abc\"")).isEqualTo(parse("abc")).isEqualTo(new Valid("abc"));
    }

    @Test
    void quotedStringEscapesAreUnescaped() {
        assertValid("\"a\\\"b\"", "a\"b");
        assertValid("\"a\\\\b\"", "a\\b");
    }

    @ParameterizedTest
    @ValueSource(strings = {
            "\"a\\b\"",     // \b is not an sf-string escape
            "\"a\\n\"",
            "\"abc\\\"",    // the escape swallows the closing quote: unterminated
            "\"abc\\",      // ends inside an escape
            "\"abc",        // no closing quote
            "\"",           // a lone quote
            "\"abc\";x=1",  // parameters after the string
            "\"abc\"x",
            "\"a\"\"b\"",   // an unescaped quote ends the string early
    })
    void malformedQuotedStrings(String value) {
        assertMalformed(value);
    }

    @ParameterizedTest
    @ValueSource(strings = {"", "\"\"", "   ", "\t", " \"\" "})
    void emptyKeysAreMalformed(String value) {
        assertThat(parse(value)).isEqualTo(new Malformed("the key is empty"));
    }

    @Test
    void bareKeyOf255CharactersIsValidAnd256IsNot() {
        assertValid("k".repeat(255), "k".repeat(255));
        assertMalformed("k".repeat(256));
    }

    @Test
    void quotedKeyOf255CharactersIsValidAnd256IsNot() {
        assertValid("\"" + "k".repeat(255) + "\"", "k".repeat(255));
        assertMalformed("\"" + "k".repeat(256) + "\"");
    }

    @Test
    void quotedKeyLengthCountsParsedCharactersNotRawOnes() {
        // 255 parsed characters, written as 300 raw characters between the quotes
        String raw = "\"" + "\\\"".repeat(45) + "k".repeat(210) + "\"";
        assertThat(raw.length() - 2).isGreaterThan(255);
        assertValid(raw, "\"".repeat(45) + "k".repeat(210));

        String tooLong = "\"" + "\\\\".repeat(46) + "k".repeat(210) + "\"";
        assertMalformed(tooLong);
    }

    @ParameterizedTest
    @ValueSource(strings = {
            "a\u0001b", "\"a\u0001b\"",
            "a\tb", "\"a\tb\"",          // a tab inside the value (not around it)
            "a\u007Fb", "\"a\u007Fb\"",  // DEL
            "a\u0000b", "\"a\u0000b\"",
            "a\nb", "\"a\rb\"",
    })
    void controlCharactersAreMalformed(String value) {
        assertMalformed(value);
    }

    @ParameterizedTest
    @ValueSource(strings = {"caf\u00e9", "\"caf\u00e9\"", "key-\u20ac", "\"\uD83D\uDE00\""})
    void nonAsciiIsMalformed(String value) {
        assertMalformed(value);
    }

    @Test
    void commaInBareValueIsMalformedAsAMergedRepeatedHeader() {
        assertThat(parse("abc, def")).isInstanceOfSatisfying(Malformed.class,
                m -> assertThat(m.reason()).contains("comma"));
        assertMalformed("abc,def");
    }

    @Test
    void commaInsideQuotedStringIsPartOfTheKey() {
        assertValid("\"a,b\"", "a,b");
    }

    @Test
    void quoteInsideBareValueIsMalformed() {
        assertMalformed("ab\"c");
    }

    @Test
    void spaceInsideBareValueIsMalformedButInsideQuotedIsKept() {
        assertMalformed("a b");
        assertValid("\"a b\"", "a b");
        assertValid("\" a \"", " a ");
    }

    @Test
    void surroundingSpacesAndTabsAreTrimmed() {
        assertValid("  abc\t ", "abc");
        assertValid("\t\"abc\"  ", "abc");
    }

    @Test
    void otherVisibleAsciiIsAllowedInABareKey() {
        String allVisible = "!#$%&'()*+-./0123456789:;<=>?@ABCXYZ[\\]^_`abcxyz{|}~";
        assertValid(allVisible, allVisible);
    }

    @Test
    void repeatedHeaderIsMalformedAndSaysHowOften() {
        Result result = IdempotencyKeyParser.parse(List.of("abc", "abc"));
        assertThat(result).isInstanceOfSatisfying(Malformed.class,
                m -> assertThat(m.reason()).contains("2 times"));
    }

    @Test
    void singleValueListIsParsedLikeTheValue() {
        assertThat(IdempotencyKeyParser.parse(List.of(" \"k\" "))).isEqualTo(new Valid("k"));
        assertThat(IdempotencyKeyParser.parse(List.of("a b"))).isInstanceOf(Malformed.class);
    }

    @Test
    void absentHeaderIsMissing() {
        assertThat(IdempotencyKeyParser.parse(List.of())).isEqualTo(new Missing());
        assertThat(parse(null)).isEqualTo(new Missing());
        assertThat(IdempotencyKeyParser.parse(Arrays.asList((String) null))).isEqualTo(new Missing());
    }
}
