package io.idempotency.spring;

import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.UUID;
import java.util.zip.Deflater;
import java.util.zip.GZIPOutputStream;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Request bodies sent with {@code Content-Encoding: gzip} and decompressed for the handler — by a filter of the
 * application before the idempotency filter, by one after it, or by the handler itself: the request is fingerprinted
 * by what the handler reads, so two compressions of one body are one request, and two bodies that differ are not.
 */
class CompressedRequestBodiesIntegrationTest extends OrdersApplicationTest {

    @Test
    void twoCompressionsOfOneJsonBodyAreOneRequestWhereverItIsDecompressed() throws Exception {
        for (String path : new String[] {"/compressed/before/orders", "/compressed/after/orders"}) {
            String key = UUID.randomUUID().toString();
            String note = "gzip-json-" + key;

            HttpResponse<byte[]> first = postGzip(path, key, "application/json",
                    gzip("{\"note\":\"" + note + "\",\"amount\":\"1.00\"}", Deflater.BEST_COMPRESSION));
            HttpResponse<byte[]> replay = postGzip(path, key, "application/json",
                    gzip("{ \"amount\": \"1.00\", \"note\": \"" + note + "\" }", Deflater.NO_COMPRESSION));
            HttpResponse<byte[]> other = postGzip(path, key, "application/json",
                    gzip("{\"note\":\"" + note + "\",\"amount\":\"2.00\"}", Deflater.BEST_COMPRESSION));

            assertOneRequestAndAnotherRefused(path, note, first, replay, other);
        }
    }

    @Test
    void twoCompressionsOfOneTextBodyAreOneRequestWhereverItIsDecompressed() throws Exception {
        for (String path : new String[] {"/compressed/before/text", "/compressed/after/text", "/compressed/self"}) {
            String key = UUID.randomUUID().toString();
            // long enough to compress well: the handler must read all of it, not as many bytes as were sent
            String note = "gzip-text-" + key + "-" + "note ".repeat(200);

            HttpResponse<byte[]> first = postGzip(path, key, "text/plain", gzip(note, Deflater.BEST_COMPRESSION));
            HttpResponse<byte[]> replay = postGzip(path, key, "text/plain", gzip(note, Deflater.NO_COMPRESSION));
            HttpResponse<byte[]> other = postGzip(path, key, "text/plain", gzip(note + "!", Deflater.NO_COMPRESSION));

            assertThat(first.statusCode()).as(path + ": " + text(first)).isEqualTo(201);
            assertThat(replay.statusCode()).as(path + ": " + text(replay)).isEqualTo(201);
            assertThat(replay.headers().firstValue("Idempotent-Replayed")).as(path).hasValue("true");
            assertThat(other.statusCode()).as(path + ": " + text(other)).isEqualTo(422);
            assertThat(rows(note)).as(path).isEqualTo(1);
        }
    }

    @Test
    void aRawDeflateJsonBodyIsFingerprintedDecompressedToo() throws Exception {
        // HTTP's deflate is zlib-wrapped, but clients send raw deflate too, and lenient decoders read both
        for (String path : new String[] {"/compressed/before/orders", "/compressed/after/orders"}) {
            String key = UUID.randomUUID().toString();
            String note = "raw-deflate-json-" + key;

            HttpResponse<byte[]> first = postDeflate(path, key,
                    rawDeflate("{\"note\":\"" + note + "\",\"amount\":\"1.00\"}", Deflater.BEST_COMPRESSION));
            HttpResponse<byte[]> replay = postDeflate(path, key,
                    rawDeflate("{ \"amount\": \"1.00\", \"note\": \"" + note + "\" }", Deflater.NO_COMPRESSION));
            HttpResponse<byte[]> other = postDeflate(path, key,
                    rawDeflate("{\"note\":\"" + note + "\",\"amount\":\"2.00\"}", Deflater.BEST_COMPRESSION));

            assertOneRequestAndAnotherRefused(path, note, first, replay, other);
        }
    }

    /** The replay got the first answer byte for byte, the other body 422, and one row was written. */
    private void assertOneRequestAndAnotherRefused(String path, String note, HttpResponse<byte[]> first,
                                                   HttpResponse<byte[]> replay, HttpResponse<byte[]> other) {
        assertThat(first.statusCode()).as(path + ": " + text(first)).isEqualTo(201);
        assertThat(replay.statusCode()).as(path + ": " + text(replay)).isEqualTo(201);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).as(path).hasValue("true");
        assertThat(replay.body()).isEqualTo(first.body());
        assertThat(other.statusCode()).as(path + ": " + text(other)).isEqualTo(422);
        assertThat(rows(note)).as(path).isEqualTo(1);
    }

    private HttpResponse<byte[]> postDeflate(String path, String key, byte[] body)
            throws IOException, InterruptedException {
        return send(HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                .header("Content-Type", "application/json").header("Content-Encoding", "deflate")
                .header("Idempotency-Key", key).POST(HttpRequest.BodyPublishers.ofByteArray(body)).build());
    }

    static byte[] rawDeflate(String text, int level) {
        Deflater deflater = new Deflater(level, true);
        deflater.setInput(text.getBytes(StandardCharsets.UTF_8));
        deflater.finish();
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        byte[] buffer = new byte[1024];
        while (!deflater.finished()) {
            bytes.write(buffer, 0, deflater.deflate(buffer));
        }
        deflater.end();
        return bytes.toByteArray();
    }

    @Test
    void aCompressedBodyLargerThanTheCapOnceDecompressedIsTooLarge() throws Exception {
        // a few kilobytes on the wire, 2 MB for the handler: the cap holds for what the handler reads
        for (String path : new String[] {"/compressed/before/text", "/compressed/after/text", "/compressed/self"}) {
            String key = UUID.randomUUID().toString();
            byte[] bomb = gzip("b".repeat(2 * 1024 * 1024), Deflater.BEST_COMPRESSION);
            assertThat(bomb.length).isLessThan(1024 * 1024);

            HttpResponse<byte[]> answer = postGzip(path, key, "text/plain", bomb);

            assertThat(answer.statusCode()).as(path).isEqualTo(413);
            assertProblem(answer, "idempotency-request-too-large");
            assertThat(keyRows(key)).isZero();
        }
    }

    @Test
    void aGzipBodyThatDoesNotDecompressIsRefusedBeforeAnythingIsClaimed() throws Exception {
        // cut short on its way, or damaged: a handler that decompresses its body itself would fail only after the
        // claim, and the client would not learn that its request was at fault
        String key = UUID.randomUUID().toString();
        String note = "broken-gzip-" + key;
        byte[] whole = gzip(note, Deflater.BEST_COMPRESSION);
        byte[] truncated = java.util.Arrays.copyOf(whole, whole.length - 6);
        byte[] damaged = whole.clone();
        damaged[whole.length - 9] ^= 0x55; // the last byte of the compressed data: inflates wrong, fails its CRC

        for (byte[] broken : new byte[][] {truncated, damaged}) {
            HttpResponse<byte[]> answer = postGzip("/compressed/self", key, "text/plain", broken);

            assertThat(answer.statusCode()).as(text(answer)).isEqualTo(400);
            assertProblem(answer, "idempotency-body-invalid");
            assertThat(keyRows(key)).isZero();
        }
        HttpResponse<byte[]> whole201 = postGzip("/compressed/self", key, "text/plain", whole);

        assertThat(whole201.statusCode()).as(text(whole201)).isEqualTo(201);
        assertThat(whole201.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(rows(note)).isEqualTo(1);
    }

    @Test
    void aGzipBodyOfTwoMembersReachesTheHandlerWhole() throws Exception {
        // a gzip body may be several members one after the other (RFC 1952), as clients that compress as they stream
        // send it; the JDK's GZIPInputStream reads past a member that ends where its buffer does only when its stream
        // says that more bytes are available, as the container's does
        String key = UUID.randomUUID().toString();
        String second = ", and the rest of " + key;
        String first = firstMemberEndingWhereItsReaderRefills(second);

        HttpResponse<byte[]> answer = postGzip("/compressed/self", key, "text/plain", twoMembers(first, second));

        assertThat(answer.statusCode()).as(text(answer)).isEqualTo(201);
        assertThat(rows(first + second)).as("the handler read both members").isEqualTo(1);
    }

    private static byte[] twoMembers(String first, String second) {
        ByteArrayOutputStream body = new ByteArrayOutputStream();
        body.writeBytes(gzip(first, Deflater.BEST_COMPRESSION));
        body.writeBytes(gzip(second, Deflater.BEST_COMPRESSION));
        return body.toByteArray();
    }

    /**
     * Letters whose gzip member, followed by one of {@code second}, a stream with nothing available cuts short; on a
     * JDK that never cuts such a stream short, ordinary letters.
     */
    private static String firstMemberEndingWhereItsReaderRefills(String second) throws IOException {
        java.util.Random random = new java.util.Random(20261130);
        StringBuilder letters = new StringBuilder();
        while (letters.length() < 10_000) {
            letters.append((char) ('a' + random.nextInt(26)));
        }
        for (int length = 1; length <= letters.length(); length++) {
            String first = letters.substring(0, length);
            java.io.InputStream nothingAvailable = new java.io.FilterInputStream(
                    new java.io.ByteArrayInputStream(twoMembers(first, second))) {
                @Override
                public int available() {
                    return 0;
                }
            };
            byte[] read = new java.util.zip.GZIPInputStream(nothingAvailable).readAllBytes();
            if (read.length < (first + second).length()) {
                return first;
            }
        }
        // a newer JDK's GZIPInputStream (25, for one) reads on past a member whatever available() says: no member is
        // cut short, and two ordinary members are what is left to send; Java 17's does cut one short
        assertThat(Runtime.version().feature()).as("every first member was read on past").isGreaterThan(17);
        return letters.substring(0, 1_000);
    }

    @Test
    void textInflatedBeforeTheLibraryThatBeginsLikeAZlibHeaderIsFingerprintedAsItIs() throws Exception {
        // "80" reads as a zlib header asking for a preset dictionary, which HTTP's deflate never uses: taken for one,
        // every such body would be fingerprinted as nothing at all, and another body would be replayed this answer
        String key = UUID.randomUUID().toString();
        String note = "80 units for " + key;

        HttpResponse<byte[]> first = postText("/compressed/before/text", key, "deflate", zlib(note));
        HttpResponse<byte[]> other = postText("/compressed/before/text", key, "deflate", zlib(note + " and 5 more"));

        assertThat(first.statusCode()).as(text(first)).isEqualTo(201);
        assertThat(other.statusCode()).as(text(other)).isEqualTo(422);
        assertThat(rows(note)).isEqualTo(1);
    }

    private HttpResponse<byte[]> postText(String path, String key, String coding, byte[] body)
            throws IOException, InterruptedException {
        return send(HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                .header("Content-Type", "text/plain").header("Content-Encoding", coding)
                .header("Idempotency-Key", key).POST(HttpRequest.BodyPublishers.ofByteArray(body)).build());
    }

    /** HTTP's deflate as specified: zlib-wrapped (RFC 1950). */
    static byte[] zlib(String text) throws IOException {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        try (java.util.zip.DeflaterOutputStream out = new java.util.zip.DeflaterOutputStream(bytes)) {
            out.write(text.getBytes(StandardCharsets.UTF_8));
        }
        return bytes.toByteArray();
    }

    private HttpResponse<byte[]> postGzip(String path, String key, String type, byte[] body)
            throws IOException, InterruptedException {
        return send(HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                .header("Content-Type", type).header("Content-Encoding", "gzip").header("Idempotency-Key", key)
                .POST(HttpRequest.BodyPublishers.ofByteArray(body)).build());
    }

    private static String text(HttpResponse<byte[]> response) {
        return new String(response.body(), StandardCharsets.UTF_8);
    }

    static byte[] gzip(String text, int level) {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        try (GZIPOutputStream out = new GZIPOutputStream(bytes) {
            {
                def.setLevel(level);
            }
        }) {
            out.write(text.getBytes(StandardCharsets.UTF_8));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return bytes.toByteArray();
    }
}
