package io.idempotency.spring;

import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.zip.DeflaterOutputStream;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** How a compressed request body is decoded to be fingerprinted, and when it is left as it is. */
class ContentCodingsTest {

    private static final byte[] TEXT = "{\"note\":\"coded\"}".getBytes(StandardCharsets.UTF_8);

    @Test
    void undoesEveryCodingInTheReverseOrderOfTheirListing() throws Exception {
        byte[] twice = gzipBytes(deflate(TEXT));

        ContentCodings.Decoded decoded = ContentCodings.decode(twice, List.of("deflate", "GZIP"), 1024);

        assertThat(decoded.coded()).isFalse();
        assertThat(decoded.bytes()).isEqualTo(TEXT);
        assertThat(ContentCodings.decode(twice, List.of("identity, deflate, x-gzip"), 1024).bytes()).isEqualTo(TEXT);
    }

    @Test
    void aRawDeflateBodyIsUndoneAsAZlibOneIs() throws Exception {
        byte[] raw = CompressedRequestBodiesIntegrationTest.rawDeflate(new String(TEXT, StandardCharsets.UTF_8),
                java.util.zip.Deflater.BEST_COMPRESSION);

        ContentCodings.Decoded decoded = ContentCodings.decode(raw, List.of("deflate"), 1024);

        assertThat(decoded.coded()).isFalse();
        assertThat(decoded.bytes()).isEqualTo(TEXT);
        assertThat(ContentCodings.decode(raw, List.of("deflate"), TEXT.length).bytes())
                .as("a body of exactly the cap's size once inflated").isEqualTo(TEXT);
        assertThatThrownBy(() -> ContentCodings.decode(raw, List.of("deflate"), TEXT.length - 1))
                .isInstanceOf(BodyRecordingRequest.BodyTooLargeException.class);
    }

    @Test
    void aBodyNotInTheCodingItsHeaderNamesWasDecodedBeforeAndIsLeftAsItIs() throws Exception {
        ContentCodings.Decoded decoded = ContentCodings.decode(TEXT, List.of("gzip"), 1024);

        assertThat(decoded.coded()).isFalse();
        assertThat(decoded.bytes()).isEqualTo(TEXT);
        assertThat(ContentCodings.decode(TEXT, List.of("deflate"), 1024).bytes()).isEqualTo(TEXT);
    }

    @Test
    void textThatBeginsLikeAZlibHeaderWithAPresetDictionaryIsLeftAsItIs() throws Exception {
        for (String text : new String[] {"80 units", "x marks the spot", "hb"}) {
            byte[] bytes = text.getBytes(StandardCharsets.UTF_8);

            ContentCodings.Decoded decoded = ContentCodings.decode(bytes, List.of("deflate"), 1024);

            assertThat(decoded.bytes()).as(text).isEqualTo(bytes);
        }
    }

    @Test
    void aCodingTheLibraryCannotUndoAndACorruptDeflateBodyAreLeftCoded() throws Exception {
        byte[] corrupt = Arrays.copyOf(deflate(TEXT), 6);

        assertThat(ContentCodings.decode(TEXT, List.of("br"), 1024).coded()).isTrue();
        ContentCodings.Decoded decoded = ContentCodings.decode(corrupt, List.of("deflate"), 1024);
        assertThat(decoded.coded()).isTrue();
        assertThat(decoded.bytes()).isEqualTo(corrupt);
    }

    @Test
    void aGzipBodyCutShortIsRefused() throws Exception {
        byte[] cut = Arrays.copyOf(gzipBytes(TEXT), 12);

        assertThatThrownBy(() -> ContentCodings.decode(cut, List.of("gzip"), 1024))
                .isInstanceOf(ContentCodings.UndecodableBodyException.class)
                .hasMessage("the body is not valid gzip (cut short or damaged)");
    }

    @Test
    void theDecodedBodyIsCapped() throws Exception {
        byte[] large = gzipBytes(new byte[4096]);

        assertThat(ContentCodings.decode(large, List.of("gzip"), 4096).bytes()).hasSize(4096);
        assertThatThrownBy(() -> ContentCodings.decode(large, List.of("gzip"), 4095))
                .isInstanceOf(BodyRecordingRequest.BodyTooLargeException.class);
    }

    @Test
    void theLayersDecodedBeforeTheBodyCountTogetherAgainstTheCap() throws Exception {
        // a body coded again and again, each layer stored rather than compressed, so that every layer is as large as
        // the body and compresses well from outside: a few kilobytes on the wire, the cap's worth of decompressing
        // for each of its codings, as many as the header names (hundreds fit in the request's header section)
        byte[] body = new byte[1000];
        byte[] layers = body;
        for (int i = 1; i < 10; i++) {
            layers = gzipBytes(layers, java.util.zip.Deflater.NO_COMPRESSION);
        }
        byte[] coded = gzipBytes(layers, java.util.zip.Deflater.BEST_COMPRESSION);
        String header = String.join(", ", java.util.Collections.nCopies(10, "gzip"));
        assertThat(layers.length).as("each layer is under the cap").isLessThan(2048);

        assertThat(ContentCodings.decode(coded, List.of(header), 16 * 1024).bytes()).isEqualTo(body);
        assertThatThrownBy(() -> ContentCodings.decode(coded, List.of(header), 2048))
                .isInstanceOf(BodyRecordingRequest.BodyTooLargeException.class);
        // twice coded the usual way, the layer between is smaller than the body: the cap is the body's
        byte[] text = "{\"note\":\"coded twice\"}".repeat(80).getBytes(StandardCharsets.UTF_8);
        assertThat(ContentCodings.decode(gzipBytes(deflate(text)), List.of("deflate, gzip"), text.length).bytes())
                .isEqualTo(text);
    }

    @Test
    void aLayerBetweenOfExactlyTheCapsSizeIsDecoded() throws Exception {
        // the layer between is stored rather than compressed: larger than the body, it is what meets the cap
        byte[] body = "{\"note\":\"layered\"}".getBytes(StandardCharsets.UTF_8);
        byte[] between = gzipBytes(body, java.util.zip.Deflater.NO_COMPRESSION);
        byte[] coded = gzipBytes(between);
        assertThat(between.length).isGreaterThan(body.length);

        assertThat(ContentCodings.decode(coded, List.of("gzip, gzip"), between.length).bytes()).isEqualTo(body);
        assertThatThrownBy(() -> ContentCodings.decode(coded, List.of("gzip, gzip"), between.length - 1))
                .isInstanceOf(BodyRecordingRequest.BodyTooLargeException.class);
    }

    private static byte[] deflate(byte[] bytes) throws IOException {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        try (DeflaterOutputStream deflater = new DeflaterOutputStream(out)) {
            deflater.write(bytes);
        }
        return out.toByteArray();
    }

    private static byte[] gzipBytes(byte[] bytes) throws IOException {
        return gzipBytes(bytes, java.util.zip.Deflater.DEFAULT_COMPRESSION);
    }

    private static byte[] gzipBytes(byte[] bytes, int level) throws IOException {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        try (java.util.zip.GZIPOutputStream gzip = new java.util.zip.GZIPOutputStream(out) {
            {
                def.setLevel(level);
            }
        }) {
            gzip.write(bytes);
        }
        return out.toByteArray();
    }
}
