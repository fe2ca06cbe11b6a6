package io.idempotency.core;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;

/**
 * The SHA-256 fingerprint of a request: method, concrete path (not the route template, so
 * {@code /payments/1/refunds} and {@code /payments/2/refunds} differ), query string and body, and the API version it
 * names, if any. Each part is length-prefixed, so no two different requests can produce the same input to the hash.
 * Stateless and thread-safe.
 */
public final class RequestFingerprint {

    private static final byte API_VERSION_MARKER = (byte) 0xFF;

    private RequestFingerprint() {
    }

    /**
     * @param method HTTP method, e.g. {@code POST}
     * @param path   the request path as received, without the query
     * @param query  the raw query string, or {@code null} when there is none
     * @param body   the body bytes (empty when there is none)
     * @return 64 lowercase hex characters
     */
    public static String of(String method, String path, String query, byte[] body) {
        return of(method, path, query, body, null);
    }

    /**
     * {@link #of(String, String, String, byte[])} for a body that the application reads as text in {@code charset}:
     * the same bytes in another charset are other text, so another request.
     *
     * @param charset the charset's name, or {@code null} for a body fingerprinted as its bytes alone (as by the
     *                method without it)
     */
    public static String of(String method, String path, String query, byte[] body, String charset) {
        return of(method, path, query, body, charset, null);
    }

    /**
     * {@link #of(String, String, String, byte[], String)} for a request that names the version of the API it calls
     * (in a header, say), which selects the code that handles it: the same request for another version is another
     * request.
     *
     * @param apiVersion the version as the request names it, or {@code null} when it names none (the fingerprint is
     *                   then that of the method without it)
     */
    public static String of(String method, String path, String query, byte[] body, String charset,
                            String apiVersion) {
        MessageDigest sha256 = newSha256();
        update(sha256, method.getBytes(StandardCharsets.UTF_8));
        update(sha256, path.getBytes(StandardCharsets.UTF_8));
        if (query == null) {
            sha256.update((byte) 0);
        } else {
            sha256.update((byte) 1);
            update(sha256, query.getBytes(StandardCharsets.UTF_8));
        }
        update(sha256, body);
        if (charset != null) {
            // one part more, after the last one: never the input of a request without it
            update(sha256, charset.getBytes(StandardCharsets.UTF_8));
        }
        if (apiVersion != null) {
            // after a marker byte that no length prefix of a charset's name starts with: a version is never read as
            // a charset, nor a charset as a version
            sha256.update(API_VERSION_MARKER);
            update(sha256, apiVersion.getBytes(StandardCharsets.UTF_8));
        }
        return HexFormat.of().formatHex(sha256.digest());
    }

    /** SHA-256 of {@code text} in UTF-8, as 64 lowercase hex characters. */
    public static String sha256Hex(String text) {
        return sha256Hex(text.getBytes(StandardCharsets.UTF_8));
    }

    /** The SHA-256 digest of {@code bytes}, in lower-case hex. */
    public static String sha256Hex(byte[] bytes) {
        return HexFormat.of().formatHex(newSha256().digest(bytes));
    }

    private static void update(MessageDigest digest, byte[] part) {
        int length = part.length; // big-endian, as ByteBuffer.putInt writes it
        digest.update((byte) (length >>> 24));
        digest.update((byte) (length >>> 16));
        digest.update((byte) (length >>> 8));
        digest.update((byte) length);
        digest.update(part);
    }

    /** Cloned for each digest: looking the algorithm up among the security providers costs more than hashing. */
    private static final MessageDigest SHA_256 = lookUpSha256();

    private static MessageDigest newSha256() {
        try {
            return (MessageDigest) SHA_256.clone();
        } catch (CloneNotSupportedException e) {
            return lookUpSha256(); // a provider whose digests cannot be cloned
        }
    }

    private static MessageDigest lookUpSha256() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every Java platform has SHA-256", e);
        }
    }
}
