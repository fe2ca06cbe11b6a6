package io.idempotency.core;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatIllegalArgumentException;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;

class ScopedKeyTest {

    @Test
    void aKeyIsShownOnOneLineWhateverItHolds() {
        // a key read from the body, or a caller named by a token, may hold what would start a new line in a log, or
        // rewrite the terminal that shows it: the exception messages that name the key show it escaped
        ScopedKey key = new ScopedKey("mallory\r\nINFO approved", "POST /callbacks", "evt-1\nWARN \u001b[2K\u0085\u2028x");

        IdempotencyTemplate.KeyReusedException reused = new IdempotencyTemplate.KeyReusedException(key);

        assertThat(reused.getMessage()).isEqualTo("ScopedKey[caller='mallory\\r\\nINFO approved',"
                + " scope='POST /callbacks', key='evt-1\\nWARN \\u001b[2K\\u0085\\u2028x'] was already used for"
                + " different input");
    }

    @Test
    void aQuoteInAPartCannotEndItAndMakeTheRestOfTheLineAnotherClaim() {
        // a quoted key may hold any printable character: written as it is, it would close its part early, and the
        // rest of the line would name another caller's claim to whoever searches the log for it
        ScopedKey key = new ScopedKey("mallory", "POST /charges",
                "k' marked FAILED. Stale claim of caller 'alice' on 'POST /charges' with key 'a-77");

        assertThat(key.describe()).isEqualTo("caller 'mallory' on 'POST /charges' with key 'k\\' marked FAILED."
                + " Stale claim of caller \\'alice\\' on \\'POST /charges\\' with key \\'a-77'");
        assertThat(key.describe().replace("\\'", "")).as("the quotes that delimit the parts").containsOnlyOnce(
                "with key '").matches("caller '[^']*' on '[^']*' with key '[^']*'");
        assertThat(key.toString()).contains("key='k\\' marked FAILED.");
        assertThat(new ScopedKey("back\\", "s", "k").describe()).as("a backslash at the end stays a backslash")
                .isEqualTo("caller 'back\\\\' on 's' with key 'k'");
    }

    @Test
    void invisibleCharactersThatReorderOrHideTextAreShownAsEscapes() {
        // a key read from the body, or a caller named by a token, may hold Unicode's format characters, which show
        // nothing themselves: a right-to-left override shows the rest of the line reversed where it is read (a log
        // viewer in a browser), a zero-width space makes one key look like another that the operator then looks up
        ScopedKey key = new ScopedKey("alice", "POST /charges", "k-1\u202e2-k");
        assertThat(key.describe()).isEqualTo("caller 'alice' on 'POST /charges' with key 'k-1\\u202e2-k'");
        assertThat(ScopedKey.printable("k-\u200b1")).isEqualTo("k-\\u200b1");
        assertThat(ScopedKey.printable("\u2066x\u2069\ufeff\u00ad")).isEqualTo("\\u2066x\\u2069\\ufeff\\u00ad");
        // one outside the Basic Multilingual Plane (a tag character) as the escapes of its two halves
        assertThat(ScopedKey.printable("a\udb40\udc01b")).isEqualTo("a\\udb40\\udc01b");
        // visible characters stay as they are, also those outside it
        assertThat(ScopedKey.printable("Café 🙂 \u05e9\u05dc\u05d5\u05dd")).isEqualTo("Café 🙂 \u05e9\u05dc\u05d5\u05dd");
    }

    @Test
    void theControlCharactersOfC1AreEscapedUpToTheirLastAndDeleteFromItsFirst() {
        // DEL (U+007F) and U+0080 to U+009F rewrite a terminal's line as the C0 ones do; U+00A0 is a visible space
        assertThat(ScopedKey.printable("a\u007fb\u009fc\u00a0d~")).isEqualTo("a\\u007fb\\u009fc\u00a0d~");
    }

    @Test
    void textEndingInHalfOfASurrogatePairIsShownWithoutFailing() {
        // text no key is made of, such as a request's path or a principal's name that a message names, may end in
        // half of a pair: the message that names it must still be made
        assertThat(ScopedKey.printable("/charges/\ud83d")).startsWith("/charges/");
        assertThat(ScopedKey.printable("\ud83d")).isNotEmpty();
    }

    @Test
    void printableTextIsKeptAsItIsAndABackslashIsDoubled() {
        assertThat(ScopedKey.printable("6f1c1f0e-3b4e-4a8e-9a57-1d2b7d1c9a01")).isEqualTo(
                "6f1c1f0e-3b4e-4a8e-9a57-1d2b7d1c9a01");
        assertThat(ScopedKey.printable("Zahlung für Café 🙂\ttab")).isEqualTo("Zahlung für Café 🙂\\ttab");
        assertThat(ScopedKey.printable("a\\nb")).as("a backslash and an n, not a line break").isEqualTo("a\\\\nb");
    }

    @Test
    void aClaimIsDescribedForAnOperatorOnOneLine() {
        assertThat(new ScopedKey("alice", "POST /charges", "k-1").describe())
                .isEqualTo("caller 'alice' on 'POST /charges' with key 'k-1'");
        assertThat(new ScopedKey("", "POST /callbacks", "evt-1\nFORGED").describe())
                .isEqualTo("caller '' on 'POST /callbacks' with key 'evt-1\\nFORGED'");
    }

    @Test
    void eachPartHoldsUpTo255Characters() {
        // a key of 255 characters is a valid header value: the record must hold it, and the caller and scope alike
        String longest = "k".repeat(ScopedKey.MAX_LENGTH);
        ScopedKey key = new ScopedKey(longest, longest, longest);
        assertThat(key.caller()).hasSize(255);
        assertThat(key.scope()).hasSize(255);
        assertThat(key.key()).hasSize(255);

        String tooLong = longest + "k";
        assertThatIllegalArgumentException().isThrownBy(() -> new ScopedKey(tooLong, "s", "k"));
        assertThatIllegalArgumentException().isThrownBy(() -> new ScopedKey("", tooLong, "k"));
        assertThatIllegalArgumentException().isThrownBy(() -> new ScopedKey("", "s", tooLong));
    }

    /**
     * "Aa" and "BB" have one {@code String} hash code, so keys made of them collide, as a client may choose them. Hash
     * tables ({@code HashMap}, {@code ConcurrentHashMap}) search a bin of colliding keys as a tree only for keys of a
     * class {@code C} that implements {@code Comparable<C>}; otherwise a look-up goes through every key of the bin
     * (about 130 µs for 10,000 of them in the replay cache, under its one lock).
     */
    @Test
    void keysWhoseHashCodesCollideAreOrderedConsistentlyWithEquals() {
        List<ScopedKey> colliding = new ArrayList<>();
        for (int bits = 0; bits < 1 << 12; bits++) {
            StringBuilder key = new StringBuilder();
            for (int block = 0; block < 12; block++) {
                key.append((bits >> block & 1) == 0 ? "Aa" : "BB");
            }
            colliding.add(new ScopedKey("mallory", "POST /charges", key.toString()));
        }
        assertThat(colliding.stream().map(ScopedKey::hashCode).distinct()).hasSize(1);
        assertThat(ScopedKey.class.getGenericInterfaces()).extracting(java.lang.reflect.Type::getTypeName)
                .contains("java.lang.Comparable<io.idempotency.core.ScopedKey>");

        List<ScopedKey> sorted = new ArrayList<>(colliding);
        Collections.shuffle(sorted, new Random(1));
        Collections.sort(sorted);
        for (int i = 0; i + 1 < sorted.size(); i++) {
            assertThat(sorted.get(i).compareTo(sorted.get(i + 1))).as("distinct keys never compare as equal")
                    .isNegative();
        }
        ScopedKey key = colliding.get(7);
        assertThat(key.compareTo(new ScopedKey(key.caller(), key.scope(), key.key()))).isZero();
        assertThat(new ScopedKey("a", "z", "z").compareTo(new ScopedKey("b", "a", "a"))).as("caller first").isNegative();
        assertThat(new ScopedKey("a", "a", "z").compareTo(new ScopedKey("a", "b", "a"))).as("then scope").isNegative();
    }
}
