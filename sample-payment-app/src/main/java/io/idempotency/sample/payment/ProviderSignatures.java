package io.idempotency.sample.payment;

import org.springframework.boot.context.properties.ConfigurationProperties;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.util.HexFormat;

/**
 * How the provider signs its notifications: HMAC-SHA256, keyed by a secret the provider and the app share, over the
 * event's fields and the delivery's nonce, each on a line of its own; sent as lower-case hex.
 *
 * @param notificationSecret the shared secret ({@code sample.provider.notification-secret})
 */
@ConfigurationProperties("sample.provider")
public record ProviderSignatures(String notificationSecret) {

    public ProviderSignatures {
        if (notificationSecret == null || notificationSecret.isEmpty()) {
            throw new IllegalArgumentException("sample.provider.notification-secret must be set");
        }
    }

    /** The signature the provider sends with {@code notification} (its own {@code signature} field left out). */
    public String sign(ProviderNotification notification) {
        String signed = String.join("\n", notification.eventId(), notification.transactionId(),
                notification.orderId(), notification.status(), String.valueOf(notification.version()),
                String.valueOf(notification.nonce()));
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(notificationSecret.getBytes(StandardCharsets.UTF_8), "HmacSHA256"));
            return HexFormat.of().formatHex(mac.doFinal(signed.getBytes(StandardCharsets.UTF_8)));
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 is not available", e);
        }
    }

    /** Whether {@code notification} carries the signature the provider would have sent, compared in constant time. */
    public boolean verify(ProviderNotification notification) {
        if (notification.signature() == null || notification.nonce() == null || notification.nonce().isEmpty()) {
            return false;
        }
        return MessageDigest.isEqual(sign(notification).getBytes(StandardCharsets.US_ASCII),
                notification.signature().getBytes(StandardCharsets.US_ASCII));
    }

    /** Without the secret, which must not reach a log. */
    @Override
    public String toString() {
        return "ProviderSignatures[HmacSHA256]";
    }
}
