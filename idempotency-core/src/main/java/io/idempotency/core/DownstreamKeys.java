package io.idempotency.core;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.util.Base64;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Derives the idempotency key a handler sends to a third party: HMAC-SHA256 over (caller, scope, key) with a secret
 * of the application, base64url without padding (43 characters). Never the client's raw key: two callers using the
 * same key must not collide at the third party, and the third party should not learn the client's keys. The same
 * request always derives the same key — across retries, instances and restarts — so the third party deduplicates a
 * rerun. Thread-safe.
 */
public final class DownstreamKeys {

    private static final System.Logger log = System.getLogger(DownstreamKeys.class.getName());

    private final SecretKeySpec secret;
    /** Whether the secret is the library's public default, of which the first derivation warns. */
    private final boolean publicDefault;
    private final AtomicBoolean warned = new AtomicBoolean();

    /** @param secret the application's secret; the same on every instance, and kept across restarts */
    public DownstreamKeys(String secret) {
        if (secret == null || secret.isEmpty()) {
            throw new IllegalArgumentException("the downstream key secret must not be empty");
        }
        this.secret = new SecretKeySpec(secret.getBytes(StandardCharsets.UTF_8), "HmacSHA256");
        this.publicDefault = IdempotencyEngine.DEFAULT_DOWNSTREAM_SECRET.equals(secret);
    }

    /**
     * The downstream key for {@code key}. The first one derived with the library's public default secret is logged as
     * a warning: whoever asked for it (an endpoint, a call of {@link IdempotencyTemplate}, a message consumer) sends it
     * to a third party, where another application with the default derives the same keys.
     */
    public String derive(ScopedKey key) {
        if (publicDefault && !warned.get() && warned.compareAndSet(false, true)) {
            log.log(System.Logger.Level.WARNING, () -> "A downstream key (scope '" + ScopedKey.printable(key.scope())
                    + "') was derived with the library's public default secret: another application that keeps the"
                    + " default and calls the same third party derives the same key for the same caller, scope and"
                    + " key, and the third party would take its call for a rerun of this one. Set"
                    + " idempotency.downstream-key-secret (or give DownstreamKeys a secret) of this application's own,"
                    + " the same on every instance. Said once.");
        }
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
