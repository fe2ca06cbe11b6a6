package io.idempotency.spring;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import org.junit.jupiter.api.Test;
import org.slf4j.LoggerFactory;
import org.springframework.test.context.TestPropertySource;
import tools.jackson.databind.json.JsonMapper;

import java.io.IOException;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.Charset;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.ThreadLocalRandom;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The HTTP semantics of the IETF Idempotency-Key draft and of Stripe: key syntax, fingerprints, expression keys,
 * methods, storage policies and the stored-body cap — over real HTTP on real PostgreSQL.
 */
@TestPropertySource(properties = "idempotency.max-stored-body-size=64KB")
class HttpSemanticsIntegrationTest extends OrdersApplicationTest {

    // ---------------------------------------------------------------- key syntax

    @Test
    void escapesInQuotedKeysAreUnderstood() throws Exception {
        String id = UUID.randomUUID().toString();
        String note = "escapes-" + id;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> quoted = post("/orders", "\"" + id + "\\\\x\"", body); // "<id>\\x" is the key <id>\x
        HttpResponse<byte[]> bare = post("/orders", id + "\\x", body);

        assertThat(quoted.statusCode()).isEqualTo(201);
        assertThat(bare.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(rows(note)).isEqualTo(1);
    }

    /**
     * The field is an RFC 9651 Item, and every Item may carry parameters (a client's structured-field serializer may
     * add some): they are no part of the key, and only parameters that do not parse make the header malformed.
     */
    @Test
    void parametersOnAQuotedKeyAreIgnoredAndOnlyMalformedOnesRefused() throws Exception {
        String id = UUID.randomUUID().toString();
        String note = "parameters-" + id;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> withParameters = post("/orders", "\"" + id + "\";v=1; grease=?0", body);
        HttpResponse<byte[]> without = post("/orders", "\"" + id + "\"", body);
        HttpResponse<byte[]> malformed = post("/orders", "\"" + UUID.randomUUID() + "\";V=1", body);

        assertThat(withParameters.statusCode()).isEqualTo(201);
        assertThat(without.headers().firstValue("Idempotent-Replayed")).as("the same key").hasValue("true");
        assertThat(malformed.statusCode()).isEqualTo(400);
        assertProblem(malformed, "idempotency-key-malformed");
        assertThat(rows(note)).isEqualTo(1);
    }

    /** The key is validated before anything of the request is processed: a missing or bad key is what is told. */
    @Test
    void aMissingOrMalformedKeyIsToldWhateverTheBody() throws Exception {
        String note = "key-first-" + UUID.randomUUID();
        String duplicateMembers = "{\"note\":\"" + note + "\",\"note\":\"" + note + "\"}";
        String tooLarge = "{\"note\":\"" + note + "\",\"padding\":\"" + "x".repeat(1_100_000) + "\"}";

        HttpResponse<byte[]> missing = send(request("/orders", duplicateMembers).build());
        HttpResponse<byte[]> malformed = post("/orders", "a b", tooLarge);

        assertThat(missing.statusCode()).isEqualTo(400);
        assertProblem(missing, "idempotency-key-missing");
        assertThat(malformed.statusCode()).isEqualTo(400);
        assertProblem(malformed, "idempotency-key-malformed");
        assertThat(rows(note)).isZero();
    }

    @Test
    void anEmptyKeyOrOneWithControlCharactersIsMalformed() throws Exception {
        String note = "control-" + UUID.randomUUID();
        String body = "{\"note\":\"" + note + "\"}";

        for (String key : new String[] {"", "\"\"", "a\tb", "\"a\tb\"", "a b", "caf\u00e9"}) {
            String answer = rawPost(key, body);
            assertThat(answer).as("key %s", key).startsWith("HTTP/1.1 400");
            assertThat(answer).as("key %s", key).contains("idempotency-key-malformed");
        }
        // other control characters never get past the servlet container's own header parser
        for (String key : new String[] {"a\u0001b", "a\u007fb"}) {
            assertThat(rawPost(key, body)).startsWith("HTTP/1.1 400");
        }
        assertThat(rows(note)).isZero();
    }

    /** The problem's detail tells a client why its key was refused in one sentence, whichever the reason. */
    @Test
    void theDetailOfAMalformedKeyIsOneSentence() throws Exception {
        String note = "detail-" + UUID.randomUUID();
        String body = "{\"note\":\"" + note + "\"}";

        for (String key : new String[] {"a,b", "a b", "\"a", "\"a\\b\"", "\"a\" x", "k".repeat(256)}) {
            HttpResponse<byte[]> malformed = post("/orders", key, body);

            assertProblem(malformed, "idempotency-key-malformed");
            String detail = JsonMapper.builder().build().readTree(malformed.body()).get("detail").asString();
            assertThat(detail).as("key %s", key).startsWith("The Idempotency-Key header is malformed: ")
                    .endsWith(".").doesNotMatch("(?s).*[.?!]\\.");
        }
        assertThat(rows(note)).isZero();
    }

    private String rawPost(String key, String body) throws IOException {
        return raw("POST /orders HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                + "Idempotency-Key: " + key + "\r\nContent-Length: " + body.length()
                + "\r\nConnection: close\r\n\r\n" + body);
    }

    // ---------------------------------------------------------------- fingerprints

    @Test
    void theSameJsonWrittenDifferentlyIsTheSameRequest() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "canonical-" + key;

        HttpResponse<byte[]> first = post("/orders", key, "{\"note\":\"" + note + "\",\"amount\":\"12.50\",\"n\":12.50}");
        HttpResponse<byte[]> reordered = post("/orders", key,
                "{ \"n\" : 1.25e1,\n  \"amount\":\"12.50\",   \"note\" : \"" + note + "\" }");
        HttpResponse<byte[]> changed = post("/orders", key, "{\"note\":\"" + note + "\",\"amount\":\"12.51\",\"n\":12.50}");

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(reordered.statusCode()).isEqualTo(201);
        assertThat(reordered.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(reordered.body()).isEqualTo(first.body());
        assertThat(changed.statusCode()).isEqualTo(422);
        assertThat(changed.statusCode()).isEqualTo(422);
        assertProblem(changed, "idempotency-key-mismatch");
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void aBodyOfAJsonSuffixTypeIsComparedCanonicallyAsJson() throws Exception {
        // application/merge-patch+json is JSON to Spring MVC's JSON reader, as every +json type: two writings of one
        // patch are one request, and another value is another request
        String key = UUID.randomUUID().toString();
        String note = "merge-patch-" + key;
        HttpRequest.Builder patch = HttpRequest.newBuilder(java.net.URI.create("http://localhost:" + port + "/orders"))
                .header("Content-Type", "application/merge-patch+json").header("Idempotency-Key", key);

        HttpResponse<byte[]> first = send(patch.POST(HttpRequest.BodyPublishers.ofString(
                "{\"note\":\"" + note + "\",\"amount\":\"1\"}")).build());
        HttpResponse<byte[]> rewritten = send(patch.POST(HttpRequest.BodyPublishers.ofString(
                "{ \"amount\" : \"1\",\n \"note\":\"" + note + "\" }")).build());
        HttpResponse<byte[]> other = send(patch.POST(HttpRequest.BodyPublishers.ofString(
                "{\"note\":\"" + note + "\",\"amount\":\"2\"}")).build());

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(rewritten.statusCode()).isEqualTo(201);
        assertThat(rewritten.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(rewritten.body()).isEqualTo(first.body());
        assertThat(other.statusCode()).isEqualTo(422);
        assertProblem(other, "idempotency-key-mismatch");
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void aJsonNullBodyIsCanonicalLikeAnyOtherJson() throws Exception {
        // the JSON text null is a JSON body like an object: whitespace around it does not make it another request
        String key = UUID.randomUUID().toString();

        HttpResponse<byte[]> first = post("/orders/streams", key, "null");
        HttpResponse<byte[]> spaced = post("/orders/streams", key, " null\n");
        HttpResponse<byte[]> other = post("/orders/streams", key, "{}");

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(spaced.statusCode()).as(new String(spaced.body(), StandardCharsets.UTF_8)).isEqualTo(201);
        assertThat(spaced.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(spaced.body()).isEqualTo(first.body());
        assertThat(other.statusCode()).isEqualTo(422);
        assertThat(keyRows(key)).isEqualTo(1);
    }

    @Test
    void numbersAreComparedExactlyNeverAsDoubles() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "exact-" + key;
        post("/orders", key, "{\"note\":\"" + note + "\",\"n\":0.1}");

        HttpResponse<byte[]> close = post("/orders", key, "{\"note\":\"" + note + "\",\"n\":0.10000000000000000001}");

        assertThat(close.statusCode()).isEqualTo(422);
    }

    @Test
    void aJsonBodyIsComparedAsTheCharsetItDeclaresIsRead() throws Exception {
        // the handler's JSON reader decodes ISO-8859-1: the bytes C3 A9 are the two characters \u00c3\u00a9 there,
        // not the \u00e9 they would be in UTF-8
        String key = UUID.randomUUID().toString();
        String note = "charset-" + key;
        byte[] latin1 = ("{\"note\":\"\u00c3\u00a9" + note + "\"}").getBytes(StandardCharsets.ISO_8859_1);

        HttpResponse<byte[]> first = send(request("/orders", "").header("Idempotency-Key", key)
                .setHeader("Content-Type", "application/json;charset=ISO-8859-1")
                .POST(HttpRequest.BodyPublishers.ofByteArray(latin1)).build());
        HttpResponse<byte[]> other = post("/orders", key, "{\"note\":\"\\u00e9" + note + "\"}");
        HttpResponse<byte[]> same = post("/orders", key, "{\"note\":\"\\u00c3\\u00a9" + note + "\"}");

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(rows("\u00c3\u00a9" + note)).isEqualTo(1);
        assertThat(other.statusCode()).as("another note under the key").isEqualTo(422);
        assertProblem(other, "idempotency-key-mismatch");
        assertThat(rows("\u00e9" + note)).isZero();
        assertThat(same.headers().firstValue("Idempotent-Replayed")).as("the same note, written in UTF-8")
                .hasValue("true");
    }

    @Test
    void aJsonBodyWhoseCharsetGivesHalfASurrogatePairIsRefused() throws Exception {
        // CESU-8 decodes ED A0 80 to the lone surrogate \ud800, which the handler's JSON reader takes, and which no
        // UTF-8 text holds: written as UTF-8 it would become '?', the canonical form of another body
        String key = UUID.randomUUID().toString();
        String note = "cesu-" + key;
        byte[] body = ("{\"note\":\"\u00ed\u00a0\u0080" + note + "\"}").getBytes(StandardCharsets.ISO_8859_1);

        HttpResponse<byte[]> lone = send(request("/orders", "").header("Idempotency-Key", key)
                .setHeader("Content-Type", "application/json;charset=CESU-8")
                .POST(HttpRequest.BodyPublishers.ofByteArray(body)).build());
        HttpResponse<byte[]> question = post("/orders", key, "{\"note\":\"?" + note + "\"}");

        assertThat(lone.statusCode()).isEqualTo(400);
        assertProblem(lone, "idempotency-body-invalid");
        assertThat(question.statusCode()).as("another body, run as its own request").isEqualTo(201);
        assertThat(question.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(rows("?" + note)).isEqualTo(1);
    }

    @Test
    void aJsonBodyIsReadInTheEncodingTheHandlersJsonReaderDetects() throws Exception {
        // for UTF-8 (also the charset Spring MVC adds to a type that names none), US-ASCII, UTF-16 and UTF-32, Spring
        // MVC hands the bytes to Jackson, which detects their encoding itself (RFC 4627): a body in UTF-16 is read
        // as the text it holds, and bytes that are no ASCII are read as UTF-8, whatever the type names
        String key = UUID.randomUUID().toString();
        String note = "utf16-" + key;
        byte[] utf16 = ("{\"note\":\"" + note + "\"}").getBytes(StandardCharsets.UTF_16LE);
        byte[] unguardedUtf16 = ("{\"note\":\"unguarded-" + note + "\"}").getBytes(StandardCharsets.UTF_16LE);
        HttpResponse<byte[]> unguarded = send(request("/orders/json-text/unguarded", "")
                .setHeader("Content-Type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofByteArray(unguardedUtf16)).build());
        assertThat(unguarded.statusCode()).as("the handler's JSON reader takes it").isEqualTo(201);
        assertThat(rows("unguarded-" + note)).isEqualTo(1);

        HttpResponse<byte[]> first = send(request("/orders", "").header("Idempotency-Key", key)
                .setHeader("Content-Type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofByteArray(utf16)).build());
        HttpResponse<byte[]> same = post("/orders", key, "{\"note\":\"" + note + "\"}");

        assertThat(first.statusCode()).as("a body the handler reads").isEqualTo(201);
        assertThat(rows(note)).isEqualTo(1);
        assertThat(same.headers().firstValue("Idempotent-Replayed")).as("the same note, in UTF-8")
                .hasValue("true");

        String asciiKey = UUID.randomUUID().toString();
        String accented = "\u00e9ascii-" + asciiKey;
        HttpResponse<byte[]> unguardedAscii = send(request("/orders/json-text/unguarded", "")
                .setHeader("Content-Type", "application/json;charset=US-ASCII")
                .POST(HttpRequest.BodyPublishers.ofByteArray(
                        ("{\"note\":\"unguarded-" + accented + "\"}").getBytes(StandardCharsets.UTF_8))).build());
        assertThat(unguardedAscii.statusCode()).isEqualTo(201);
        assertThat(rows("unguarded-" + accented)).as("read as UTF-8").isEqualTo(1);
        HttpResponse<byte[]> ascii = send(request("/orders", "").header("Idempotency-Key", asciiKey)
                .setHeader("Content-Type", "application/json;charset=US-ASCII")
                .POST(HttpRequest.BodyPublishers.ofByteArray(
                        ("{\"note\":\"" + accented + "\"}").getBytes(StandardCharsets.UTF_8))).build());
        HttpResponse<byte[]> sameAscii = post("/orders", asciiKey, "{\"note\":\"" + accented + "\"}");

        assertThat(ascii.statusCode()).as("a body the handler reads as UTF-8").isEqualTo(201);
        assertThat(rows(accented)).isEqualTo(1);
        assertThat(sameAscii.headers().firstValue("Idempotent-Replayed")).hasValue("true");
    }

    @Test
    void aJsonBodyWithAByteOrderMarkIsReadInTheEncodingTheMarkShowsAsTheHandlersJsonReaderDoes() throws Exception {
        // for the charsets whose bodies Spring MVC hands to Jackson as bytes, Jackson takes a byte order mark as the
        // encoding, skips it and reads the rest, whatever charset the type names: the handler reads these bodies
        String[][] cases = {
                {"application/json", "EFBBBF", "UTF-8"},
                {"application/json;charset=US-ASCII", "EFBBBF", "UTF-8"},
                {"application/json", "FFFE", "UTF-16LE"},
                {"application/json;charset=UTF-16LE", "FFFE", "UTF-16LE"},
                {"application/json;charset=UTF-16LE", "FEFF", "UTF-16BE"},
                {"application/json;charset=UTF-16", "FFFE0000", "UTF-32LE"},
                {"application/json", "0000FEFF", "UTF-32BE"},
        };
        for (String[] c : cases) {
            String key = UUID.randomUUID().toString();
            String note = "bom-" + key;
            String what = c[2] + " with a mark, as " + c[0];
            HttpResponse<byte[]> unguarded = send(request("/orders/json-text/unguarded", "")
                    .setHeader("Content-Type", c[0])
                    .POST(HttpRequest.BodyPublishers.ofByteArray(marked(c[1], "unguarded-" + note, c[2]))).build());
            assertThat(unguarded.statusCode()).as("the handler's JSON reader takes " + what).isEqualTo(201);
            assertThat(rows("unguarded-" + note)).isEqualTo(1);

            HttpResponse<byte[]> first = send(request("/orders", "").header("Idempotency-Key", key)
                    .setHeader("Content-Type", c[0])
                    .POST(HttpRequest.BodyPublishers.ofByteArray(marked(c[1], note, c[2]))).build());
            HttpResponse<byte[]> same = post("/orders", key, "{\"note\":\"" + note + "\"}");

            assertThat(first.statusCode()).as(what).isEqualTo(201);
            assertThat(rows(note)).isEqualTo(1);
            assertThat(same.headers().firstValue("Idempotent-Replayed")).as("the same note, in UTF-8 without a mark")
                    .hasValue("true");
        }
    }

    private static byte[] marked(String mark, String note, String charset) {
        byte[] prefix = HexFormat.of().parseHex(mark);
        byte[] text = ("{\"note\":\"" + note + "\"}").getBytes(Charset.forName(charset));
        byte[] body = Arrays.copyOf(prefix, prefix.length + text.length);
        System.arraycopy(text, 0, body, prefix.length, text.length);
        return body;
    }

    @Test
    void aBodyComparedAsBytesIsComparedWithTheCharsetItDeclares() throws Exception {
        // a String argument reads the bytes C3 A9 as the two characters \u00c3\u00a9 in ISO-8859-1, and as the one
        // character \u00e9 in UTF-8: the same bytes, two requests
        String key = UUID.randomUUID().toString();
        String note = "text-charset-" + key;
        byte[] bytes = ("\u00c3\u00a9" + note).getBytes(StandardCharsets.ISO_8859_1);

        HttpResponse<byte[]> first = postText(key, "text/plain;charset=ISO-8859-1", bytes);
        HttpResponse<byte[]> other = postText(key, "text/plain;charset=UTF-8", bytes);
        HttpResponse<byte[]> same = postText(key, "text/plain; charset=iso-8859-1", bytes);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(rows("\u00c3\u00a9" + note)).isEqualTo(1);
        assertThat(other.statusCode()).as("the same bytes in another charset").isEqualTo(422);
        assertProblem(other, "idempotency-key-mismatch");
        assertThat(rows("\u00e9" + note)).isZero();
        assertThat(same.headers().firstValue("Idempotent-Replayed")).as("the same charset, spelled otherwise")
                .hasValue("true");
    }

    private HttpResponse<byte[]> postText(String key, String type, byte[] body)
            throws IOException, InterruptedException {
        return postText("/orders/text-note", key, type, body);
    }

    private HttpResponse<byte[]> postText(String path, String key, String type, byte[] body)
            throws IOException, InterruptedException {
        return send(request(path, "").header("Idempotency-Key", key).setHeader("Content-Type", type)
                .POST(HttpRequest.BodyPublishers.ofByteArray(body)).build());
    }

    /**
     * An expression reads a text body ({@code #body}) as the handler's {@code String} argument reads it: in the charset
     * its type names. Two bodies in ISO-8859-1 that differ in a letter outside ASCII are two requests; read as UTF-8,
     * each such letter was one replacement character, and the second request was answered with the first's answer.
     */
    @Test
    void aTextBodyAnExpressionReadsIsReadInTheCharsetItDeclares() throws Exception {
        String key = UUID.randomUUID().toString();
        String first = "M\u00fcller-" + key;
        String second = "M\u00e4ller-" + key;

        HttpResponse<byte[]> answer = postText("/orders/text-fingerprint", key, "text/plain;charset=ISO-8859-1",
                first.getBytes(StandardCharsets.ISO_8859_1));
        HttpResponse<byte[]> other = postText("/orders/text-fingerprint", key, "text/plain;charset=ISO-8859-1",
                second.getBytes(StandardCharsets.ISO_8859_1));
        HttpResponse<byte[]> retry = postText("/orders/text-fingerprint", key, "text/plain;charset=ISO-8859-1",
                first.getBytes(StandardCharsets.ISO_8859_1));

        assertThat(answer.statusCode()).isEqualTo(201);
        assertThat(rows(first)).isEqualTo(1);
        assertThat(other.statusCode()).as("another text under the key").isEqualTo(422);
        assertProblem(other, "idempotency-key-mismatch");
        assertThat(rows(second)).isZero();
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).hasValue("true");
    }

    /**
     * Bytes that are no text in the body's charset have no one text for an expression to read: read with replacement
     * characters, two bodies that differ there would be one request. Refused, as a JSON body that is not valid in its
     * charset is, before anything is claimed.
     */
    @Test
    void aBodyAnExpressionReadsThatIsNoTextInItsCharsetIsRefused() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "not-text-" + key;
        byte[] first = (note + "\u00ff").getBytes(StandardCharsets.ISO_8859_1); // a byte UTF-8 never has
        byte[] second = (note + "\u00fe").getBytes(StandardCharsets.ISO_8859_1);

        HttpResponse<byte[]> answer = postText("/orders/text-fingerprint", key, "text/plain;charset=UTF-8", first);
        HttpResponse<byte[]> other = postText("/orders/text-fingerprint", key, "text/plain;charset=UTF-8", second);

        assertThat(answer.statusCode()).isEqualTo(400);
        assertProblem(answer, "idempotency-body-invalid");
        assertThat(other.statusCode()).isEqualTo(400);
        assertProblem(other, "idempotency-body-invalid");
        assertThat(keyRows(key)).isZero();
        assertThat(DATABASE.queryLong("select count(*) from orders where note like '" + note + "%'")).isZero();
    }

    @Test
    void duplicateJsonMembersAreRefusedAndLeaveNothing() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "duplicate-" + key;

        HttpResponse<byte[]> answer = post("/orders", key, "{\"note\":\"" + note + "\",\"amount\":\"1\",\"amount\":\"2\"}");

        assertThat(answer.statusCode()).isEqualTo(400);
        assertProblem(answer, "idempotency-body-invalid");
        assertThat(new String(answer.body(), StandardCharsets.UTF_8)).contains("duplicate member name");
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
    }

    @Test
    void theQueryIsPartOfTheRequest() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"query-" + key + "\"}";
        assertThat(post("/orders/large?size=1", key, body).statusCode()).isEqualTo(200);

        assertThat(post("/orders/large?size=2", key, body).statusCode()).isEqualTo(422);
    }

    // ---------------------------------------------------------------- keys from the request

    @Test
    void aCallbackWithoutHeaderIsDeduplicatedByItsOwnTransactionId() throws Exception {
        String transaction = "tx-" + UUID.randomUUID();
        String first = "{\"transactionId\":\"" + transaction + "\",\"amount\":\"12.50\",\"currency\":\"EUR\","
                + "\"nonce\":\"n-1\",\"signature\":\"s-1\"}";
        String resent = "{\"signature\":\"s-2\",\"nonce\":\"n-2\",\"currency\":\"EUR\",\"amount\":\"12.50\","
                + "\"transactionId\":\"" + transaction + "\"}";
        String forged = "{\"transactionId\":\"" + transaction + "\",\"amount\":\"99.00\",\"currency\":\"EUR\","
                + "\"nonce\":\"n-3\",\"signature\":\"s-3\"}";

        HttpResponse<byte[]> answer = send(request("/orders/callbacks", first).build());
        HttpResponse<byte[]> again = send(request("/orders/callbacks", resent).build());
        HttpResponse<byte[]> other = send(request("/orders/callbacks", forged).build());
        HttpResponse<byte[]> keyless = send(request("/orders/callbacks", "{\"amount\":\"1\"}").build());

        assertThat(answer.statusCode()).isEqualTo(200);
        assertThat(again.statusCode()).isEqualTo(200);
        assertThat(again.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(again.body()).isEqualTo(answer.body());
        assertThat(other.statusCode()).as("same transaction, another amount").isEqualTo(422);
        assertThat(keyless.statusCode()).isEqualTo(400);
        assertProblem(keyless, "idempotency-key-missing");
        assertThat(new String(keyless.body(), StandardCharsets.UTF_8)).as("no expression internals for the client")
                .contains("does not carry the value this endpoint is keyed by").doesNotContain("EL1", "HashMap");
        assertThat(rows("callback-" + transaction)).isEqualTo(1);
    }

    @Test
    void aKeyFromTheBodyWithANulCharacterIsMalformedAndLeavesNothing() throws Exception {
        // a header cannot carry one, but a JSON string can: the database cannot store it as text
        String transaction = "tx-" + UUID.randomUUID();
        String body = "{\"transactionId\":\"" + transaction + "\\u0000\",\"amount\":\"1\",\"currency\":\"EUR\"}";

        HttpResponse<byte[]> answer = send(request("/orders/callbacks", body).build());

        assertThat(answer.statusCode()).isEqualTo(400);
        assertProblem(answer, "idempotency-key-malformed");
        assertThat(DATABASE.queryLong("select count(*) from idempotency_keys where idempotency_key like '"
                + transaction + "%'")).isZero();
    }

    @Test
    void aKeyFromTheBodyWithHalfASurrogatePairIsRefusedAndLeavesNothing() throws Exception {
        // the driver would send it as '?': "tx-…\ud800" and "tx-…?" would be one key. The body is refused before
        // the key is read (no canonical JSON has it); a key from elsewhere would be refused as malformed
        String transaction = "tx-" + UUID.randomUUID();
        String body = "{\"transactionId\":\"" + transaction + "\\ud800\",\"amount\":\"1\",\"currency\":\"EUR\","
                + "\"nonce\":\"n\"}";

        HttpResponse<byte[]> answer = send(request("/orders/callbacks", body).build());

        assertThat(answer.statusCode()).isEqualTo(400);
        assertProblem(answer, "idempotency-body-invalid");
        assertThat(new String(answer.body(), StandardCharsets.UTF_8)).contains("unpaired surrogate");
        assertThat(DATABASE.queryLong("select count(*) from idempotency_keys where idempotency_key like '"
                + transaction + "%'")).isZero();
        HttpResponse<byte[]> whole = send(request("/orders/callbacks", body.replace("\\ud800",
                "\\ud83d\\ude00")).build());
        assertThat(whole.statusCode()).as("a whole pair is a character like any other").isEqualTo(200);
    }

    @Test
    void aKeyFromAJsonNumberIsItsDecimalValueHoweverTheNumberIsWritten() throws Exception {
        // a provider whose serializer now writes 1000 as 1000.0 re-sends the same transaction
        long transaction = ThreadLocalRandom.current().nextLong(1, 1_000_000_000L) * 1000;
        String rest = ",\"amount\":\"1\",\"currency\":\"EUR\",\"nonce\":\"n\"}";

        HttpResponse<byte[]> first = send(request("/orders/callbacks", "{\"transactionId\":" + transaction + rest)
                .build());
        assertThat(first.statusCode()).isEqualTo(200);
        for (String written : List.of(transaction + ".0", transaction / 1000 + "e3", transaction / 1000 + "000.000")) {
            HttpResponse<byte[]> again = send(request("/orders/callbacks", "{\"transactionId\":" + written + rest)
                    .build());
            assertThat(again.headers().firstValue("Idempotent-Replayed")).as(written).hasValue("true");
            assertThat(again.body()).isEqualTo(first.body());
        }
        assertThat(keyRows(Long.toString(transaction))).isEqualTo(1);
    }

    @Test
    void aKeyFromAnObjectInTheBodyIsTheSameKeyHoweverTheObjectIsWritten() throws Exception {
        // a provider re-sends the callback with the members of its reference in another order, its number written
        // another way: the same transaction, to be run once
        // (the bank's part is new on every run: the suite runs twice on one database, with and without the cache)
        String note = "ref-" + UUID.randomUUID();
        String first = "{\"reference\":{\"bank\":\"" + note + "\",\"id\":1000},\"note\":\"" + note + "\"}";
        String resent = "{\"note\":\"" + note + "\",\"reference\":{\"id\":1000.0,\"bank\":\"" + note + "\"}}";

        HttpResponse<byte[]> answer = send(request("/orders/callbacks-by-reference", first).build());
        HttpResponse<byte[]> again = send(request("/orders/callbacks-by-reference", resent).build());

        assertThat(answer.statusCode()).isEqualTo(200);
        assertThat(again.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(again.body()).isEqualTo(answer.body());
        assertThat(rows("reference-callback-" + note)).isEqualTo(1);
    }

    @Test
    void anEmptyObjectOrArrayWhereTheKeyIsReadIsNoKey() throws Exception {
        // taken as its text, every callback whose reference came empty would share the key "{}" (or "[]"), and each
        // after the first be answered with the first one's answer without running
        for (String empty : List.of("{}", "[]")) {
            String note = "empty-reference-" + UUID.randomUUID();
            HttpResponse<byte[]> first = send(request("/orders/callbacks-by-reference",
                    "{\"reference\":" + empty + ",\"note\":\"" + note + "-1\"}").build());
            HttpResponse<byte[]> second = send(request("/orders/callbacks-by-reference",
                    "{\"reference\":" + empty + ",\"note\":\"" + note + "-2\"}").build());

            for (HttpResponse<byte[]> answer : List.of(first, second)) {
                assertThat(answer.statusCode()).as(empty).isEqualTo(400);
                assertProblem(answer, "idempotency-key-missing");
                assertThat(answer.headers().firstValue("Idempotent-Replayed")).as(empty).isEmpty();
            }
            assertThat(rows("reference-callback-" + note + "-1") + rows("reference-callback-" + note + "-2"))
                    .as(empty).isZero();
            assertThat(keyRows(empty)).as(empty).isZero();
        }
    }

    @Test
    void fingerprintValuesThatAreArraysOrNotFiniteNumbersFingerprintTheSameRequestAlike() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"note\":\"tagged-" + key + "\"}";

        HttpResponse<byte[]> first = post("/orders/tagged?tags=a&tags=b&weight=1.5", key, body);
        HttpResponse<byte[]> retry = post("/orders/tagged?tags=a&tags=b&weight=1.5", key, body);
        HttpResponse<byte[]> other = post("/orders/tagged?tags=a&tags=c&weight=1.5", key, body);

        assertThat(first.statusCode()).isEqualTo(200);
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).as("a retry of the same request").hasValue("true");
        assertThat(other.statusCode()).as("other tags under the key").isEqualTo(422);

        String nan = UUID.randomUUID().toString();
        String nanBody = "{\"note\":\"tagged-" + nan + "\"}";
        HttpResponse<byte[]> notANumber = post("/orders/tagged?tags=a&weight=NaN", nan, nanBody);
        HttpResponse<byte[]> again = post("/orders/tagged?tags=a&weight=NaN", nan, nanBody);
        assertThat(notANumber.statusCode()).isEqualTo(200);
        assertThat(again.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(rows("tagged-" + key) + rows("tagged-" + nan)).isEqualTo(2);
    }

    @Test
    void aBodyWithHalfASurrogatePairIsRefusedBeforeItsKeyIsTaken() throws Exception {
        // the driver would send either half as '?': two transactions would share one key, and as the endpoint
        // fingerprints only the amount, the second would be answered with the first one's stored answer
        String transaction = "tx-" + UUID.randomUUID();
        for (String half : List.of("\\ud800", "\\udc00")) {
            String body = "{\"transactionId\":\"" + transaction + half + "\",\"amount\":\"1\",\"currency\":\"EUR\"}";

            HttpResponse<byte[]> answer = send(request("/orders/callbacks", body).build());

            assertThat(answer.statusCode()).as(half).isEqualTo(400);
            assertProblem(answer, "idempotency-body-invalid");
        }
        assertThat(DATABASE.queryLong("select count(*) from idempotency_keys where idempotency_key like '"
                + transaction + "%'")).isZero();
        assertThat(DATABASE.queryLong("select count(*) from orders where note like 'callback-" + transaction + "%'"))
                .isZero();
    }

    @Test
    void anOptionalKeyTheBodyDoesNotCarryLetsTheRequestRunAsItIs() throws Exception {
        String note = UUID.randomUUID().toString();
        String body = "{\"note\":\"" + note + "\"}";

        assertThat(send(request("/orders/optional-callbacks", body).build()).statusCode()).isEqualTo(200);
        assertThat(send(request("/orders/optional-callbacks", body).build()).statusCode()).isEqualTo(200);
        assertThat(rows("optional-callback-" + note)).as("no key, no idempotency").isEqualTo(2);

        String keyed = "{\"note\":\"" + note + "-keyed\",\"transactionId\":\"tx-" + note + "\"}";
        send(request("/orders/optional-callbacks", keyed).build());
        assertThat(send(request("/orders/optional-callbacks", keyed).build()).headers()
                .firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(rows("optional-callback-" + note + "-keyed")).isEqualTo(1);
    }

    /**
     * What clients meet every day — a replay, a reused key, a malformed key, a body that cannot be fingerprinted — is
     * no incident: the library logs none of it above DEBUG, so neither floods the log nor writes keys or bodies into it.
     * (The scheduled cleanup and sweeper, which log what they removed or resolved, are left out.)
     */
    @Test
    void theOutcomesClientsMeetEveryDayAreLoggedAtNothingAboveDebug() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "quiet-" + key;
        String card = "4111" + ThreadLocalRandom.current().nextLong(100_000_000_000L, 999_999_999_999L);
        String body = "{\"note\":\"" + note + "\",\"card\":\"" + card + "\"}";
        Logger logger = (Logger) LoggerFactory.getLogger("io.idempotency");
        ListAppender<ILoggingEvent> appender = new ListAppender<>();
        appender.start();
        logger.addAppender(appender);
        HttpResponse<byte[]> first;
        HttpResponse<byte[]> replay;
        HttpResponse<byte[]> reused;
        HttpResponse<byte[]> malformed;
        HttpResponse<byte[]> invalid;
        try {
            first = post("/orders", key, body);
            replay = post("/orders", key, body);
            reused = post("/orders", key, body.replace(card, card.substring(1) + "2"));
            malformed = post("/orders", "\"" + card + "\" x", body);
            invalid = post("/orders", UUID.randomUUID().toString(), "{\"card\":\"" + card + "\",\"card\":1}");
        } finally {
            logger.detachAppender(appender);
        }

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertProblem(reused, "idempotency-key-mismatch");
        assertProblem(malformed, "idempotency-key-malformed");
        assertProblem(invalid, "idempotency-body-invalid");
        List<String> background = List.of(RetentionScheduler.class.getName(),
                StaleClaimSweepScheduler.class.getName(), PeriodicTask.class.getName());
        assertThat(appender.list).filteredOn(event -> event.getLevel().isGreaterOrEqual(Level.INFO)
                && !background.contains(event.getLoggerName())).extracting(ILoggingEvent::getFormattedMessage)
                .isEmpty();
    }

    @Test
    void aKeyExpressionThatCannotReadTheRequestsValueRefusesItWithoutLoggingTheValue() throws Exception {
        String note = UUID.randomUUID().toString();
        String account = "4111" + ThreadLocalRandom.current().nextLong(100_000_000_000L, 999_999_999_999L);
        String body = "{\"note\":\"" + note + "\",\"eventId\":\"" + account + "\",\"amount\":\"12\"}";
        Logger logger = (Logger) LoggerFactory.getLogger(IdempotentMethodInterceptor.class);
        Level level = logger.getLevel();
        ListAppender<ILoggingEvent> appender = new ListAppender<>();
        appender.start();
        logger.addAppender(appender);
        logger.setLevel(Level.DEBUG);
        HttpResponse<byte[]> refused;
        try {
            refused = send(request("/orders/events", body).build());
        } finally {
            logger.setLevel(level);
            logger.detachAppender(appender);
        }

        // UUID.fromString refused the value: the client sent a key this endpoint cannot read, as a malformed header
        assertThat(refused.statusCode()).isEqualTo(400);
        assertThat(new String(refused.body(), StandardCharsets.UTF_8)).contains("malformed").doesNotContain(account);
        assertThat(rows("event-" + note)).as("refused before the handler ran").isZero();
        List<String> lines = appender.list.stream().map(ILoggingEvent::getFormattedMessage).toList();
        assertThat(lines).anySatisfy(line -> assertThat(line)
                .contains("could not read").contains(IllegalArgumentException.class.getName()));
        assertThat(lines).noneSatisfy(line -> assertThat(line).contains(account));
    }

    @Test
    void aFingerprintExpressionThatCannotReadTheRequestsValueRefusesIt() throws Exception {
        String note = UUID.randomUUID().toString();
        String event = UUID.randomUUID().toString();

        HttpResponse<byte[]> refused = send(request("/orders/events",
                "{\"note\":\"" + note + "\",\"eventId\":\"" + event + "\",\"amount\":\"12x\"}").build());
        assertThat(refused.statusCode()).isEqualTo(400);
        assertThat(rows("event-" + note)).isZero();

        String body = "{\"note\":\"" + note + "\",\"eventId\":\"" + event + "\",\"amount\":\"12\"}";
        assertThat(send(request("/orders/events", body).build()).statusCode()).isEqualTo(200);
        assertThat(send(request("/orders/events", body).build()).headers().firstValue("Idempotent-Replayed"))
                .hasValue("true");
        assertThat(rows("event-" + note)).as("the corrected request ran once").isEqualTo(1);
    }

    @Test
    void aKeyFromThePathWithoutFingerprintReplaysWhateverTheBody() throws Exception {
        String reference = "ref-" + UUID.randomUUID();

        HttpResponse<byte[]> first = send(request("/orders/by-reference/" + reference, "{\"note\":\"a-" + reference + "\"}").build());
        HttpResponse<byte[]> second = send(request("/orders/by-reference/" + reference, "{\"note\":\"b-" + reference + "\"}").build());

        assertThat(second.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(second.body()).isEqualTo(first.body());
        assertThat(rows("a-" + reference) + rows("b-" + reference)).isEqualTo(1);
    }

    @Test
    void aKeyFromTheBodyWithoutFingerprintStillFingerprintsTheConcretePath() throws Exception {
        String transaction = "tx-" + UUID.randomUUID();

        HttpResponse<byte[]> first = send(request("/orders/provider-callbacks/acme",
                "{\"transactionId\":\"" + transaction + "\",\"nonce\":1}").build());
        HttpResponse<byte[]> resent = send(request("/orders/provider-callbacks/acme",
                "{\"transactionId\":\"" + transaction + "\",\"nonce\":2}").build());
        HttpResponse<byte[]> elsewhere = send(request("/orders/provider-callbacks/other",
                "{\"transactionId\":\"" + transaction + "\",\"nonce\":1}").build());

        assertThat(first.statusCode()).isEqualTo(200);
        assertThat(resent.headers().firstValue("Idempotent-Replayed")).as("another body: replayed")
                .hasValue("true");
        assertThat(resent.body()).isEqualTo(first.body());
        assertThat(elsewhere.statusCode()).as("another concrete path of the route: another request").isEqualTo(422);
        assertProblem(elsewhere, "idempotency-key-mismatch");
        assertThat(rows("provider-callback-" + transaction)).isEqualTo(1);
    }

    /**
     * The request's {@code #body} where the handler has a parameter named {@code body} (its raw text): the key
     * expression read the parameter once another variable had loaded the arguments, and every request was refused for
     * want of a key (400), or, were the key optional, run again on every delivery.
     */
    @Test
    void aParameterNamedBodyDoesNotHideTheRequestsBodyFromTheKeyExpression() throws Exception {
        String body = "{\"eventId\":\"ev-" + UUID.randomUUID() + "\"}";

        HttpResponse<byte[]> first = send(request("/orders/webhooks/acme", body).build());
        HttpResponse<byte[]> resent = send(request("/orders/webhooks/acme", body).build());

        assertThat(first.statusCode()).as(new String(first.body(), StandardCharsets.UTF_8)).isEqualTo(200);
        assertThat(resent.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(resent.body()).isEqualTo(first.body());
        assertThat(rows("webhook-acme-" + body)).isEqualTo(1);
    }

    @Test
    void aKeyAndAFingerprintFromTheBodyStillFingerprintTheConcretePath() throws Exception {
        String refund = "rf-" + UUID.randomUUID();
        String body = "{\"refundId\":\"" + refund + "\",\"amount\":\"5.00\"}";

        HttpResponse<byte[]> first = send(request("/orders/payments/1/refunds", body).build());
        HttpResponse<byte[]> resent = send(request("/orders/payments/1/refunds", body).build());
        HttpResponse<byte[]> otherPayment = send(request("/orders/payments/2/refunds", body).build());

        assertThat(first.statusCode()).isEqualTo(200);
        assertThat(resent.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(otherPayment.statusCode()).as("another payment's path under the key: another request")
                .isEqualTo(422);
        assertProblem(otherPayment, "idempotency-key-mismatch");
        assertThat(rows("refund-" + refund)).isEqualTo(1);
    }

    @Test
    void aKeyFromAHeaderAndAFingerprintFromTheQueryAreReadThroughHeadersAndParams() throws Exception {
        String event = "evt-" + UUID.randomUUID();
        String note = "header-" + event;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> first = send(request("/orders/by-event-header?amount=5", body)
                .header("X-Event-Id", event).build());
        HttpResponse<byte[]> again = send(request("/orders/by-event-header?amount=5", body)
                .header("x-event-id", event).build());
        HttpResponse<byte[]> changed = send(request("/orders/by-event-header?amount=6", body)
                .header("X-Event-Id", event).build());

        assertThat(first.statusCode()).isEqualTo(200);
        assertThat(again.headers().firstValue("Idempotent-Replayed")).as("the header's name in any case")
                .hasValue("true");
        assertThat(again.body()).isEqualTo(first.body());
        assertThat(changed.statusCode()).isEqualTo(422);
        assertProblem(changed, "idempotency-key-mismatch");
        assertThat(keyRows(event)).isEqualTo(1);
        assertThat(rows(note)).isEqualTo(1);
    }

    /**
     * A body no expression reads is no part of the fingerprint: what only its canonical form cannot hold (a member
     * twice, nesting deeper than it writes) is the handler's to take or refuse, as it is without the library. Refused,
     * a provider's notification that the handler would take could never be delivered.
     */
    @Test
    void aJsonBodyThatNoExpressionReadsIsNotRefusedForWhatOnlyItsCanonicalFormCannotHold() throws Exception {
        for (String shape : List.of("twice", "deep")) {
            String event = "evt-" + shape + "-" + UUID.randomUUID();
            String note = "unread-" + event;
            String body = shape.equals("twice")
                    ? "{\"note\":\"" + note + "\",\"amount\":\"1\",\"amount\":\"2\"}"
                    : "{\"note\":\"" + note + "\",\"trace\":" + "[".repeat(200) + "]".repeat(200) + "}";

            HttpResponse<byte[]> first = send(request("/orders/by-event-header?amount=5", body)
                    .header("X-Event-Id", event).build());
            HttpResponse<byte[]> again = send(request("/orders/by-event-header?amount=5", body)
                    .header("X-Event-Id", event).build());

            assertThat(first.statusCode()).as("a body with a member %s", shape).isEqualTo(200);
            assertThat(again.headers().firstValue("Idempotent-Replayed")).as(shape).hasValue("true");
            assertThat(again.body()).isEqualTo(first.body());
            assertThat(rows(note)).as(shape).isEqualTo(1);
        }
    }

    /**
     * A key read from an {@code Optional} parameter: an empty one is no key, as a null is. Taken as its text, every
     * request without the header would share the key "Optional.empty", and the second be answered with the first
     * one's answer, its own order never written.
     */
    @Test
    void anOptionalGivesTheKeyOfItsValueAndNoKeyWhenEmpty() throws Exception {
        String note = "optional-event-" + UUID.randomUUID();
        String first = "{\"note\":\"" + note + "-1\"}";
        String second = "{\"note\":\"" + note + "-2\"}";

        HttpResponse<byte[]> one = send(request("/orders/by-optional-event", first).build());
        HttpResponse<byte[]> two = send(request("/orders/by-optional-event", second).build());

        assertThat(one.statusCode()).isEqualTo(200);
        assertThat(two.statusCode()).isEqualTo(200);
        assertThat(two.headers().firstValue("Idempotent-Replayed")).as("another request without a key").isEmpty();
        assertThat(rows(note + "-2")).as("no key, no idempotency: the second order is written").isEqualTo(1);
        assertThat(keyRows("Optional.empty")).isZero();

        String event = "evt-" + UUID.randomUUID();
        String keyed = "{\"note\":\"" + note + "-keyed\"}";
        send(request("/orders/by-optional-event", keyed).header("X-Event-Id", event).build());
        HttpResponse<byte[]> again = send(request("/orders/by-optional-event", keyed).header("X-Event-Id", event)
                .build());
        assertThat(again.headers().firstValue("Idempotent-Replayed")).as("the header's value is the key")
                .hasValue("true");
        assertThat(rows(note + "-keyed")).isEqualTo(1);
        assertThat(keyRows(event)).as("stored under the header's value, not its Optional's text").isOne();
    }

    /**
     * An optional key read from elsewhere than the body (here a header, through a parameter) is looked for before the
     * body is read: a request without one runs as it would without the library, whatever its body, as on an endpoint
     * whose optional key is the Idempotency-Key header. Only a key read from the body needs the body first. With the
     * key, the body that no expression reads is no part of the fingerprint, and is not refused either.
     */
    @Test
    void withoutAnOptionalKeyReadFromAHeaderTheRequestRunsWhateverItsBody() throws Exception {
        String note = "optional-event-body-" + UUID.randomUUID();
        String duplicateMembers = "{\"note\":\"ignored\",\"note\":\"" + note + "\"}";
        String large = "{\"note\":\"" + note + "-" + "x".repeat(1_100_000) + "\"}"; // over the 1 MB cap

        HttpResponse<byte[]> duplicate = send(request("/orders/by-optional-event", duplicateMembers).build());
        HttpResponse<byte[]> tooLarge = send(request("/orders/by-optional-event", large).build());

        assertThat(duplicate.statusCode()).as("as without the library: the last member wins").isEqualTo(200);
        assertThat(rows(note)).isEqualTo(1);
        assertThat(tooLarge.statusCode()).isEqualTo(200);
        assertThat(DATABASE.queryLong("select count(*) from orders where note like '" + note + "-x%'")).isEqualTo(1);

        // with a key, the body is still no part of the fingerprint (a key expression without a fingerprint: the
        // method and the path), so the library has no reason to read it, and still none to refuse it
        String event = "evt-" + UUID.randomUUID();
        HttpResponse<byte[]> keyed = send(request("/orders/by-optional-event", duplicateMembers)
                .header("X-Event-Id", event).build());
        HttpResponse<byte[]> again = send(request("/orders/by-optional-event", duplicateMembers)
                .header("X-Event-Id", event).build());
        assertThat(keyed.statusCode()).as("with a key, as without the library").isEqualTo(200);
        assertThat(again.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(again.body()).isEqualTo(keyed.body());
        assertThat(rows(note)).isEqualTo(2);
        assertThat(keyRows(event)).isOne();
    }

    /**
     * docs/http-responses.md: the query is compared as sent, so a retry whose parameters come in another order or
     * escaped otherwise is another request; fingerprinted by {@code {"#body", "#params"}}, it is the same request.
     */
    @Test
    void aQueryIsComparedAsSentUnlessTheEndpointIsFingerprintedByItsParameters() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "query-as-sent-" + key;
        String body = "{\"note\":\"" + note + "\",\"amount\":\"1.00\"}";
        HttpResponse<byte[]> first = post("/orders?source=app&channel=web%20shop", key, body);
        HttpResponse<byte[]> reordered = post("/orders?channel=web+shop&source=app", key, body);
        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(reordered.statusCode()).as("the same parameters, sent otherwise").isEqualTo(422);
        assertProblem(reordered, "idempotency-key-mismatch");

        String byValues = UUID.randomUUID().toString();
        String valuesNote = "query-by-values-" + byValues;
        HttpResponse<byte[]> sent = post("/orders/by-values?currency=EUR&channel=web%20shop", byValues,
                "{\"note\":\"" + valuesNote + "\",\"amount\":\"1.00\"}");
        HttpResponse<byte[]> resent = post("/orders/by-values?channel=web+shop&currency=EUR", byValues,
                "{\"amount\":\"1.00\", \"note\":\"" + valuesNote + "\"}");
        HttpResponse<byte[]> otherCurrency = post("/orders/by-values?currency=USD&channel=web%20shop", byValues,
                "{\"note\":\"" + valuesNote + "\",\"amount\":\"1.00\"}");
        HttpResponse<byte[]> otherBody = post("/orders/by-values?currency=EUR&channel=web%20shop", byValues,
                "{\"note\":\"" + valuesNote + "\",\"amount\":\"2.00\"}");

        assertThat(sent.statusCode()).isEqualTo(200);
        assertThat(new String(sent.body(), StandardCharsets.UTF_8)).contains("\"channel\":\"web shop\"");
        assertThat(resent.headers().firstValue("Idempotent-Replayed")).as("the same values, sent otherwise")
                .hasValue("true");
        assertThat(resent.body()).isEqualTo(sent.body());
        assertThat(otherCurrency.statusCode()).as("another parameter's value").isEqualTo(422);
        assertThat(otherBody.statusCode()).as("another body").isEqualTo(422);
        assertThat(rows(valuesNote)).isEqualTo(1);
    }

    /** A form's fields are read through #params, as the annotation's javadoc says: a callback sent as a form. */
    @Test
    void aKeyAndAFingerprintFromAFormsFieldsAreReadThroughParams() throws Exception {
        String transaction = "tx-" + UUID.randomUUID();

        HttpResponse<byte[]> first = send(form("transactionId=" + transaction + "&amount=5&nonce=1"));
        HttpResponse<byte[]> resent = send(form("nonce=2&amount=5&transactionId=" + transaction));
        HttpResponse<byte[]> changed = send(form("transactionId=" + transaction + "&amount=6&nonce=3"));

        assertThat(first.statusCode()).isEqualTo(200);
        assertThat(resent.headers().firstValue("Idempotent-Replayed")).as("a new nonce: the same callback")
                .hasValue("true");
        assertThat(resent.body()).isEqualTo(first.body());
        assertThat(changed.statusCode()).as("another amount under the transaction id").isEqualTo(422);
        assertProblem(changed, "idempotency-key-mismatch");
        assertThat(keyRows(transaction)).isEqualTo(1);
        assertThat(rows("form-callback-" + transaction)).isEqualTo(1);
    }

    /**
     * A parameter sent more than once is bound by Spring MVC with all its values (a {@code String} argument reads
     * {@code 5,6}): an expression that read its first value alone would fingerprint {@code amount=5&amount=6} as
     * {@code amount=5}, and answer it with that request's answer.
     */
    @Test
    void aRepeatedParameterIsFingerprintedByAllItsValuesAsTheHandlerReadsThem() throws Exception {
        String transaction = "tx-" + UUID.randomUUID();

        HttpResponse<byte[]> first = send(form("transactionId=" + transaction + "&amount=5&nonce=1"));
        HttpResponse<byte[]> repeated = send(form("transactionId=" + transaction + "&amount=5&amount=6&nonce=2"));

        assertThat(first.statusCode()).isEqualTo(200);
        assertThat(new String(first.body(), StandardCharsets.UTF_8)).contains("\"amount\":\"5\"");
        assertThat(repeated.statusCode()).as("the handler reads the amount 5,6").isEqualTo(422);
        assertProblem(repeated, "idempotency-key-mismatch");

        String other = "tx-" + UUID.randomUUID();
        HttpResponse<byte[]> twice = send(form("transactionId=" + other + "&amount=5&amount=6&nonce=1"));
        HttpResponse<byte[]> joined = send(form("transactionId=" + other + "&amount=5,6&nonce=2"));
        assertThat(new String(twice.body(), StandardCharsets.UTF_8)).contains("\"amount\":\"5,6\"");
        assertThat(joined.headers().firstValue("Idempotent-Replayed")).as("the same amount, as the handler reads it")
                .hasValue("true");
        assertThat(rows("form-callback-" + other)).isEqualTo(1);
    }

    /** So is a header sent on several lines, which a {@code String} argument reads joined, as HTTP defines it. */
    @Test
    void aRepeatedHeaderIsFingerprintedByAllItsValuesAsTheHandlerReadsThem() throws Exception {
        String event = "evt-" + UUID.randomUUID();
        String note = "amount-header-" + event;
        String body = "{\"note\":\"" + note + "\"}";

        HttpResponse<byte[]> first = send(request("/orders/by-event-header/amount-header", body)
                .header("X-Event-Id", event).header("X-Amount", "5").build());
        HttpResponse<byte[]> repeated = send(request("/orders/by-event-header/amount-header", body)
                .header("X-Event-Id", event).header("X-Amount", "5").header("X-Amount", "6").build());

        assertThat(first.statusCode()).isEqualTo(200);
        assertThat(repeated.statusCode()).as("the handler reads the amount 5,6").isEqualTo(422);
        assertProblem(repeated, "idempotency-key-mismatch");
        assertThat(rows(note)).isEqualTo(1);
    }

    private HttpRequest form(String fields) {
        return request("/orders/form-callbacks", fields).setHeader("Content-Type", "application/x-www-form-urlencoded")
                .POST(HttpRequest.BodyPublishers.ofString(fields)).build();
    }

    // ---------------------------------------------------------------- methods and storage policies

    @Test
    void onlyTheConfiguredMethodsAreIdempotent() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "put-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        send(request("/orders/1", body).PUT(HttpRequest.BodyPublishers.ofString(body)).header("Idempotency-Key", key).build());
        send(request("/orders/1", body).PUT(HttpRequest.BodyPublishers.ofString(body)).header("Idempotency-Key", key).build());
        assertThat(rows(note)).as("PUT is not idempotent by default").isEqualTo(2);
        String posted = "post-" + key;
        String postedBody = "{\"note\":\"" + posted + "\"}";
        post("/orders/1", key, postedBody);
        assertThat(post("/orders/1", key, postedBody).headers().firstValue("Idempotent-Replayed"))
                .as("the same handler's POST is").hasValue("true");
        assertThat(rows(posted)).isEqualTo(1);

        String optedIn = "put-opted-" + key;
        String optedBody = "{\"note\":\"" + optedIn + "\"}";
        send(request("/orders/put-idempotent/1", optedBody).PUT(HttpRequest.BodyPublishers.ofString(optedBody))
                .header("Idempotency-Key", key).build());
        HttpResponse<byte[]> replay = send(request("/orders/put-idempotent/1", optedBody)
                .PUT(HttpRequest.BodyPublishers.ofString(optedBody)).header("Idempotency-Key", key).build());
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(rows(optedIn)).isEqualTo(1);
    }

    @Test
    void anEndpointMayStoreAnswersTheDefaultPolicyWouldNot() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "store-503-" + key;

        HttpResponse<byte[]> first = post("/orders/store-everything/503", key, "{\"note\":\"" + note + "\"}");
        HttpResponse<byte[]> second = post("/orders/store-everything/503", key, "{\"note\":\"" + note + "\"}");

        assertThat(first.statusCode()).isEqualTo(503);
        assertThat(second.statusCode()).isEqualTo(503);
        assertThat(second.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void anAnswerAboveTheStoredBodyCapIsRolledBackNotCut() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "large-" + key;

        HttpResponse<byte[]> fits = post("/orders/large?size=65536", UUID.randomUUID().toString(), "{\"note\":\"" + note + "\"}");
        HttpResponse<byte[]> tooLarge = post("/orders/large?size=65537", key, "{\"note\":\"" + note + "\"}");

        assertThat(fits.statusCode()).isEqualTo(200);
        assertThat(fits.body()).hasSize(65536);
        assertThat(tooLarge.statusCode()).isEqualTo(500);
        assertProblem(tooLarge, "idempotency-response-too-large");
        assertThat(rows(note)).as("only the answer that fits was kept").isEqualTo(1);
        assertThat(keyRows(key)).isZero();
    }

    @Test
    void anAnswerFarAboveTheStoredBodyCapIsRefusedWithoutBeingHeld() throws Exception {
        // 3 GiB streamed: held whole, it would not fit one array, let alone the heap of a service under load
        String key = UUID.randomUUID().toString();
        String note = "streamed-" + key;

        HttpResponse<byte[]> tooLarge = post("/orders/streamed?megabytes=3072", key, "{\"note\":\"" + note + "\"}");

        assertThat(tooLarge.statusCode()).isEqualTo(500);
        assertProblem(tooLarge, "idempotency-response-too-large");
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
    }

    @Test
    void anAnswerWrittenPastTheCapUnderAStatusThatIsNotStoredAndThenGivenOneThatIsIsRolledBack() throws Exception {
        // held whole while its status was one the storage policy does not keep (a 503 is never capped); once the
        // handler sets a status that is kept, the answer is too large to store, as one written under it from the start
        String key = UUID.randomUUID().toString();
        String note = "restatused-" + key;

        HttpResponse<byte[]> tooLarge = post("/orders/restatused?size=65537&first=503&then=201", key,
                "{\"note\":\"" + note + "\"}");

        assertThat(tooLarge.statusCode()).isEqualTo(500);
        assertProblem(tooLarge, "idempotency-response-too-large");
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
    }

    @Test
    void aHandlerThatFailsAfterWritingPastTheCapIsAnsweredByItsExceptionHandler() throws Exception {
        // Spring MVC resets the body before its exception handlers write: nothing of the dropped body is missed
        String key = UUID.randomUUID().toString();
        String note = "streamed-then-failed-" + key;

        HttpResponse<byte[]> failed = post("/orders/streamed?megabytes=2&thenFail=true", key,
                "{\"note\":\"" + note + "\"}");

        assertThat(failed.statusCode()).isEqualTo(422);
        assertThat(new String(failed.body(), StandardCharsets.UTF_8)).doesNotContain("idempotency-response-too-large");
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
    }

    @Test
    void anAnswerAboveTheStoredBodyCapThatIsNotStoredIsSentAsTheHandlerGaveIt() throws Exception {
        // the cap is on what is stored: an answer the storage policy does not keep rolls back and reaches the client
        // whole, as it would without the library, not replaced by the problem of an answer too large to store
        String key = UUID.randomUUID().toString();
        String note = "large-503-" + key;

        HttpResponse<byte[]> answer = post("/orders/large?size=65537&status=503", key, "{\"note\":\"" + note + "\"}");

        assertThat(answer.statusCode()).isEqualTo(503);
        assertThat(answer.body()).hasSize(65537);
        assertThat(rows(note)).isZero();
        assertThat(keyRows(key)).isZero();
    }
}
