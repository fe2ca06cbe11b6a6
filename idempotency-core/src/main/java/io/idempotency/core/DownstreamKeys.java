package io.idempotency.core;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.util.Base64;

/**
 * Derives the idempotency key a handler sends to a third party: HMAC-SHA256 over (caller, scope, key) with a secret
 * of the application, base64url without padding (43 characters). Never the client's raw key: two callers using the
 * same key must not collide at the third party, and the third party should not learn the client's keys. The same
 * request always derives the same key — across retries, instances and restarts — so the third party deduplicates a
 * rerun. Thread-safe.
 */
public final class DownstreamKeys {

    private final SecretKeySpec secret;

    /** @param secret the application's secret; the same on every instance, and kept across restarts */
    public DownstreamKeys(String secret) {
        if (secret == null || secret.isEmpty()) {
            throw new IllegalArgumentException("the downstream key secret must not be empty");
        }
        this.secret = new SecretKeySpec(secret.getBytes(StandardCharsets.UTF_8), "HmacSHA256");
    }

    /** The downstream key for {@code key}. */
    public String derive(ScopedKey key) {
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(secret);
            for (String part : new String[] {key.caller(), key.scope(), key.key()}) {
                byte[] bytes = part.getBytes(StandardCharsets.UTF_8);
                mac.update(ByteBuffer.allocate(Integer.BYTES).putInt(bytes.length).array());
                mac.update(bytes);
            }
            return Base64.getUrlEncoder().withoutPadding().encodeToString(mac.doFinal());
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("every Java platform has HmacSHA256", e);
        }
    }
}
