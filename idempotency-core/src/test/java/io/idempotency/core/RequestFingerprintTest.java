package io.idempotency.core;

import static java.nio.charset.StandardCharsets.ISO_8859_1;
import static java.nio.charset.StandardCharsets.UTF_8;
import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.api.Test;

class RequestFingerprintTest {

    private static final byte[] BODY = "{\"amount\":100}".getBytes(UTF_8);

    private static String fp(String method, String path, String query, String body) {
        return RequestFingerprint.of(method, path, query, body.getBytes(UTF_8));
    }

    @Test
    void isDeterministicLowercaseHexSha256() {
        String first = RequestFingerprint.of("POST", "/payments", "a=1", BODY);
        String second = RequestFingerprint.of("POST", "/payments", "a=1", BODY.clone());
        assertThat(first).isEqualTo(second).hasSize(64).matches("[0-9a-f]{64}");
    }

    @Test
    void isTheDocumentedDigestAndStaysTheSameAcrossVersions() {
        // computed outside the library: SHA-256 over the method, the path, 0 (no query) or 1 and the query, the body,
        // then the charset and 0xFF and the API version when given, each part as its length (four bytes, big-endian)
        // and its UTF-8 bytes. Records live for weeks: a digest made otherwise by the next version would refuse every
        // retry of a request completed before the upgrade with 422 instead of replaying it
        assertThat(RequestFingerprint.of("POST", "/payments", null,
                "{\"amount\":\"12.50\",\"currency\":\"EUR\",\"orderId\":\"o-1\"}".getBytes(UTF_8)))
                .isEqualTo("5bb28b873e9e7b458858a1e99650a4c896581fe1e04485ca14df06a9730eadc9");
        assertThat(RequestFingerprint.of("POST", "/payments/1/refunds", "a=1&b=%C3%A9", new byte[0]))
                .isEqualTo("69d5fac6a730c4837561b2ccb8099e2112dd9037be3372f627df072085812ac5");
        assertThat(RequestFingerprint.of("POST", "/notes", null, "caf\u00e9".getBytes(ISO_8859_1), "ISO-8859-1"))
                .isEqualTo("a13c7a59388093984d4c25e32ab9b73cb1eab42f0d7adab813e03dd6e3c7ba3c");
        assertThat(RequestFingerprint.of("POST", "/payments", "", "{}".getBytes(UTF_8), null, "1.2"))
                .isEqualTo("5701664aaaca4e6447c983d33785dd342e8c48215811a24053012494407adb9c");
    }

    @Test
    void differsByMethod() {
        assertThat(fp("POST", "/p", null, "x")).isNotEqualTo(fp("PUT", "/p", null, "x"));
    }

    @Test
    void differsByConcretePath() {
        assertThat(fp("POST", "/payments/1/refunds", null, "x"))
                .isNotEqualTo(fp("POST", "/payments/2/refunds", null, "x"));
    }

    @Test
    void differsByQuery() {
        assertThat(fp("POST", "/p", "a=1", "x")).isNotEqualTo(fp("POST", "/p", "a=2", "x"));
    }

    @Test
    void absentQueryDiffersFromEmptyQuery() {
        // "/p" and "/p?" are different requests
        assertThat(fp("POST", "/p", null, "x")).isNotEqualTo(fp("POST", "/p", "", "x"));
    }

    @Test
    void differsByBody() {
        assertThat(fp("POST", "/p", null, "{\"a\":1}")).isNotEqualTo(fp("POST", "/p", null, "{\"a\":2}"));
        assertThat(fp("POST", "/p", null, "")).isNotEqualTo(fp("POST", "/p", null, "\0"));
    }

    @Test
    void lengthPrefixesPreventBoundaryShifts() {
        // same concatenated bytes, split differently between the parts
        assertThat(fp("POST", "/a", "b", "")).isNotEqualTo(fp("POST", "/ab", null, ""));
        assertThat(fp("POST", "/a", "b", "")).isNotEqualTo(fp("POST", "/ab", "", ""));
        assertThat(fp("POST", "/ab", "", "c")).isNotEqualTo(fp("POST", "/ab", "c", ""));
        assertThat(fp("POST", "/x", null, "")).isNotEqualTo(fp("POS", "T/x", null, ""));
        assertThat(fp("GET", "/x", null, "")).isNotEqualTo(fp("GET/", "x", null, ""));
        assertThat(fp("POST", "/p", null, "a")).isNotEqualTo(fp("POST", "/pa", null, ""));
    }

    @Test
    void lengthPrefixesPreventTheQueryMarkerFromBeingForged() {
        // without length prefixes, a path ending in the marker byte could imitate "query present"
        assertThat(fp("POST", "/p\u0001", null, "")).isNotEqualTo(fp("POST", "/p", "", ""));
        assertThat(fp("POST", "/p", null, "\u0001")).isNotEqualTo(fp("POST", "/p", "", ""));
    }

    @Test
    void theCharsetOfABodyReadAsTextMakesTheSameBytesAnotherRequest() {
        byte[] body = "\u00c3\u00a9".getBytes(java.nio.charset.StandardCharsets.ISO_8859_1);
        String bytesAlone = RequestFingerprint.of("POST", "/p", null, body);

        assertThat(RequestFingerprint.of("POST", "/p", null, body, null)).isEqualTo(bytesAlone);
        assertThat(RequestFingerprint.of("POST", "/p", null, body, "ISO-8859-1")).isNotEqualTo(bytesAlone)
                .isNotEqualTo(RequestFingerprint.of("POST", "/p", null, body, "windows-1252"))
                .isEqualTo(RequestFingerprint.of("POST", "/p", null, body.clone(), "ISO-8859-1"));
        // a body ending in what a charset part would look like is still a body without a charset
        byte[] forged = java.nio.ByteBuffer.allocate(body.length + 4 + 10).put(body).putInt(10)
                .put("ISO-8859-1".getBytes(UTF_8)).array();
        assertThat(RequestFingerprint.of("POST", "/p", null, forged))
                .isNotEqualTo(RequestFingerprint.of("POST", "/p", null, body, "ISO-8859-1"));
    }

    @Test
    void theApiVersionARequestNamesMakesItAnotherRequest() {
        byte[] body = "{}".getBytes(UTF_8);
        String unversioned = RequestFingerprint.of("POST", "/p", null, body, null);

        assertThat(RequestFingerprint.of("POST", "/p", null, body, null, null)).as("no version: as before")
                .isEqualTo(unversioned);
        assertThat(RequestFingerprint.of("POST", "/p", null, body, null, "1.0")).isNotEqualTo(unversioned)
                .isNotEqualTo(RequestFingerprint.of("POST", "/p", null, body, null, "2.0"))
                .isEqualTo(RequestFingerprint.of("POST", "/p", null, body.clone(), null, "1.0"));
        // a version is never read as a charset, nor a charset as a version
        assertThat(RequestFingerprint.of("POST", "/p", null, body, null, "UTF-8"))
                .isNotEqualTo(RequestFingerprint.of("POST", "/p", null, body, "UTF-8", null));
        assertThat(RequestFingerprint.of("POST", "/p", null, body, "UTF-8", "1.0"))
                .isNotEqualTo(RequestFingerprint.of("POST", "/p", null, body, "UTF-8", null))
                .isNotEqualTo(RequestFingerprint.of("POST", "/p", null, body, null, "1.0"));
    }

    @Test
    void emptyBodyIsAccepted() {
        assertThat(RequestFingerprint.of("GET", "/p", null, new byte[0])).hasSize(64);
    }

    @Test
    void sha256HexIsTheDigestOfTheUtf8Text() {
        // FIPS 180-2 test vector
        assertThat(RequestFingerprint.sha256Hex("abc"))
                .isEqualTo("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
                .isEqualTo(RequestFingerprint.sha256Hex("abc".getBytes(UTF_8)));
        assertThat(RequestFingerprint.sha256Hex("caf\u00e9")).isEqualTo(RequestFingerprint.sha256Hex(
                new byte[] {'c', 'a', 'f', (byte) 0xC3, (byte) 0xA9}));
    }
}
