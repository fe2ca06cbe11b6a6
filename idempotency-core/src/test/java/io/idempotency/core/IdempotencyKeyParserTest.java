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
            "\"abc\"x",
            "\"a\"\"b\"",   // an unescaped quote ends the string early
    })
    void malformedQuotedStrings(String value) {
        assertMalformed(value);
    }

    /** RFC 9651 lets every Item carry parameters; none is defined for the field, so they are ignored. */
    @ParameterizedTest
    @ValueSource(strings = {
            "\"abc\";x=1",
            "\"abc\";x",                          // a Boolean true, written without its value
            "\"abc\"; x=?0;y=-12.345;z=tok/en:1",  // spaces after the semicolon are allowed
            "\"abc\";s=\"a \\\"q\\\" ;, \\\\\"",   // a String holding quotes, semicolons and commas
            "\"abc\";b=:aGVsbG8=:;c=:aGVsbG8:",    // Byte Sequences, padded or not
            "\"abc\";d=@1700000000;e=%\"caf%c3%a9\"", // a Date and a Display String
            "\"abc\";*grease_1.x-y=999999999999999",
            "\"abc\";x=1;x=2",                     // a repeated parameter: the last one wins
            "\"abc\";x=?1",                        // a Boolean true, written with its value
            "\"abc\";x=123456789012.123;y=1.5",    // a Decimal of 12 integer digits, and of 1 fraction digit
            "\"abc\";t=AZaz!;b=:AZaz09+/:",        // Tokens and Byte Sequences use the whole alphabet
            "\"abc\";s=\" ~\";d=%\" ~%ef%bf%bd\"",  // Strings and Display Strings hold 0x20 to 0x7E
    })
    void parametersAfterTheStringAreNoPartOfTheKey(String value) {
        assertValid(value, "abc");
    }

    @ParameterizedTest
    @ValueSource(strings = {
            "\"abc\" ;x=1",       // no space before the semicolon
            "\"abc\";",           // a semicolon without a parameter
            "\"abc\";X=1",        // keys are lower case
            "\"abc\";1x=1",       // and begin with a letter or '*'
            "\"abc\";x=",         // '=' without a value
            "\"abc\";x=1.",       // a Decimal needs a fraction
            "\"abc\";x=1.2345",   // of at most 3 digits
            "\"abc\";x=1234567890123456", // an Integer of at most 15 digits
            "\"abc\";x=?2",       // a Boolean is ?0 or ?1
            "\"abc\";x=\"open",   // an unterminated String
            "\"abc\";x=\"a\\b\"", // a String with an escape other than \" and \\
            "\"abc\";x=:a$b:",    // a Byte Sequence outside base64
            "\"abc\";x=@1.5",     // a Date is an Integer
            "\"abc\";x=%\"%C3%A9\"", // a Display String escapes in lower-case hex
            "\"abc\";x=%\"%ff\"",  // and holds UTF-8
            "\"abc\";x=(1 2)",    // a parameter's value is a bare item, not an Inner List
            "\"abc\";x=1, \"def\"", // a second member: the header was sent twice and merged
            "\"abc\";x=tok, \"def\"", // also after a Token
            "\"abc\";x=?",         // a Boolean without its value
            "\"abc\";x=1234567890123.1", // a Decimal of at most 12 integer digits
            "\"abc\";x=@",         // a Date without its Integer
            "\"abc\";x=@;y=1",
            "\"abc\";x=;y=1",      // '=' without a value, before another parameter
            "\"abc\";x=\"a\\",     // a String that ends inside an escape
            "\"abc\";x=\"a\tb\"",  // a String with a control character
            "\"abc\";x=:aGVs",     // an unterminated Byte Sequence
            "\"abc\";x=:a:",       // base64 that does not decode, padded or not
            "\"abc\";x=%",         // a Display String is %"...", nothing else
            "\"abc\";x=%a",
            "\"abc\";x=%\"caf",    // an unterminated Display String
            "\"abc\";x=%\"a\tb\"", // a Display String with a control character
            "\"abc\";x=%\"%",      // that ends inside a %-escape
            "\"abc\";x=%\"%c3a%a9\"", // whose octets are not UTF-8 (a plain character cuts a sequence)
            "\"abc\";x=\"\t;y",      // a control character ends no String: what follows is inside it
            "\"abc\";x=%\"\t;y",     // nor a Display String
    })
    void malformedParametersMakeTheKeyMalformed(String value) {
        assertMalformed(value);
    }

    @Test
    void everyPrintableAsciiCharacterIsPartOfAQuotedKey() {
        // an sf-string holds 0x20 to 0x7E, '"' and '\\' escaped
        StringBuilder key = new StringBuilder();
        StringBuilder fieldValue = new StringBuilder("\"");
        for (char c = 0x20; c <= 0x7E; c++) {
            key.append(c);
            fieldValue.append(c == '"' || c == '\\' ? "\\" + c : String.valueOf(c));
        }
        assertValid(fieldValue.append('"').toString(), key.toString());
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

    /** The reason is shown to the client, who finds the offending character at the position it names. */
    @Test
    void theReasonNamesThePositionOfTheOffendingCharacterCountedFromOne() {
        assertThat(parse("ab c")).isInstanceOfSatisfying(Malformed.class,
                m -> assertThat(m.reason()).endsWith("(position 3)"));
        assertThat(parse("\"ab\\nc\"")).isInstanceOfSatisfying(Malformed.class,
                m -> assertThat(m.reason()).endsWith("(position 4)"));
        assertThat(parse("\"ab\tc\"")).isInstanceOfSatisfying(Malformed.class,
                m -> assertThat(m.reason()).endsWith("(position 4)"));
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
