package io.idempotency.spring;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.zip.DataFormatException;
import java.util.zip.GZIPInputStream;
import java.util.zip.Inflater;
import java.util.zip.InflaterInputStream;

/**
 * Undoes the content codings a request body declares in its {@code Content-Encoding} ({@code gzip}, {@code x-gzip},
 * {@code deflate}, zlib-wrapped as specified or raw as some clients send it), so that the body is fingerprinted as the handler reads it once the application has decompressed
 * it (a filter of its own, or the handler): two compressions of one body are one request. A body that a filter
 * before the library has decompressed already, leaving the header, is recognised by its first bytes and left as it
 * is. The decoded body is capped like the recorded one. A gzip body that begins as gzip but does not decompress (cut
 * short, or damaged) is refused: whoever decompresses it for the handler fails as well, after the claim. Stateless.
 */
final class ContentCodings {

    /** Thrown when a body in gzip coding cannot be decompressed: it is cut short or damaged. */
    static final class UndecodableBodyException extends Exception {
        UndecodableBodyException(String coding, IOException cause) {
            super("the body is not valid " + coding + " (cut short or damaged)", cause);
        }
    }

    /** The body with every coding undone ({@code coded} false), or with a coding the library cannot undo left on. */
    record Decoded(byte[] bytes, boolean coded) {
    }

    private ContentCodings() {
    }

    /**
     * @param headers the values of the request's {@code Content-Encoding} headers, codings in the order applied
     * @throws BodyRecordingRequest.BodyTooLargeException if the decoded body is larger than {@code limit}
     * @throws UndecodableBodyException if a body in gzip coding does not decompress
     */
    static Decoded decode(byte[] body, List<String> headers, int limit)
            throws BodyRecordingRequest.BodyTooLargeException, UndecodableBodyException {
        List<String> codings = new ArrayList<>();
        for (String header : headers) {
            for (String coding : header.split(",")) {
                String name = coding.trim().toLowerCase(Locale.ROOT);
                if (!name.isEmpty() && !name.equals("identity")) {
                    codings.add(name);
                }
            }
        }
        byte[] bytes = body;
        // what was decompressed only to be decompressed again: each layer is capped, and so are the layers together,
        // or a body coded hundreds of times over, every layer stored and as large as the cap, would make a request of
        // a few kilobytes cost the cap's worth of decompressing for each coding its header names
        long between = 0;
        boolean decoded = false;
        for (int i = codings.size() - 1; i >= 0 && bytes.length > 0; i--) {
            if (decoded) {
                between += bytes.length;
                if (between > limit) {
                    throw new BodyRecordingRequest.BodyTooLargeException(limit);
                }
            }
            decoded = true;
            String coding = codings.get(i);
            boolean gzip = coding.equals("gzip") || coding.equals("x-gzip");
            if (!gzip && !coding.equals("deflate")) {
                return new Decoded(bytes, true); // br, zstd, compress: compared as the bytes they are
            }
            if (!gzip && !isZlib(bytes)) {
                // HTTP's deflate is zlib-wrapped, but clients send raw deflate too, and lenient decoders read both
                byte[] inflated = inflateRaw(bytes, limit);
                if (inflated != null) {
                    bytes = inflated;
                    continue;
                }
            }
            if (gzip ? !isGzip(bytes) : !isZlib(bytes)) {
                // not in the coding the header names: undone already, by a filter before the library (an inner
                // coding with it)
                return new Decoded(bytes, false);
            }
            try (InputStream in = gzip ? new GZIPInputStream(new ByteArrayInputStream(bytes))
                    : new InflaterInputStream(new ByteArrayInputStream(bytes))) {
                bytes = readCapped(in, limit);
            } catch (IOException e) {
                if (gzip) {
                    // no text begins with gzip's magic bytes: this body is gzip, cut short or damaged, and the
                    // handler would fail to read it only after the claim
                    throw new UndecodableBodyException(coding, e);
                }
                // two bytes of text can pass for a zlib header ("x ", "80"): a body a filter before the library has
                // inflated already may still carry them, so a deflate body that fails is compared as its bytes
                return new Decoded(body, true);
            }
        }
        return new Decoded(bytes, false);
    }

    private static byte[] readCapped(InputStream in, int limit)
            throws IOException, BodyRecordingRequest.BodyTooLargeException {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        byte[] buffer = new byte[8192];
        int n;
        while ((n = in.read(buffer)) != -1) {
            if (out.size() + n > limit) {
                throw new BodyRecordingRequest.BodyTooLargeException(limit);
            }
            out.write(buffer, 0, n);
        }
        return out.toByteArray();
    }

    /**
     * {@code bytes} inflated as raw deflate (RFC 1951), or null if they are no such stream: one that ends exactly at
     * their end. Text is not: its first bytes read as a block that breaks off, or that does not end where they do.
     */
    private static byte[] inflateRaw(byte[] bytes, int limit) throws BodyRecordingRequest.BodyTooLargeException {
        Inflater inflater = new Inflater(true);
        try {
            inflater.setInput(bytes);
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            byte[] buffer = new byte[8192];
            while (!inflater.finished()) {
                int n = inflater.inflate(buffer);
                if (n == 0 && (inflater.needsInput() || inflater.needsDictionary())) {
                    return null; // broken off before its end
                }
                if (out.size() + n > limit) {
                    throw new BodyRecordingRequest.BodyTooLargeException(limit);
                }
                out.write(buffer, 0, n);
            }
            return inflater.getRemaining() == 0 ? out.toByteArray() : null;
        } catch (DataFormatException e) {
            return null;
        } finally {
            inflater.end();
        }
    }

    /** Whether {@code bytes} begin as a gzip member does (RFC 1952). */
    private static boolean isGzip(byte[] bytes) {
        return bytes.length >= 2 && (bytes[0] & 0xff) == 0x1f && (bytes[1] & 0xff) == 0x8b;
    }

    /**
     * Whether {@code bytes} begin with a zlib header of the deflate method (RFC 1950), as HTTP's deflate is: without a
     * preset dictionary, which HTTP has no way to name. Text can begin like a header that asks for one ({@code "80"},
     * {@code "x "}), and inflating it would stop at once, as if the body were empty.
     */
    private static boolean isZlib(byte[] bytes) {
        if (bytes.length < 2) {
            return false;
        }
        int cmf = bytes[0] & 0xff;
        int flg = bytes[1] & 0xff;
        boolean presetDictionary = (flg & 0x20) != 0;
        return (cmf & 0x0f) == 8 && (cmf >> 4) <= 7 && ((cmf << 8) | flg) % 31 == 0 && !presetDictionary;
    }
}
