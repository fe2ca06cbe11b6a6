package io.idempotency.sample.payment;

import java.util.ArrayList;
import java.util.List;
import java.util.regex.Pattern;

/**
 * The body of {@code POST /provider/notifications}: one event about one of the provider's payments. A re-sent event
 * carries the same event id and fields, with a fresh {@code nonce} and {@code signature}.
 *
 * @param eventId       the provider's id of the event: the idempotency key
 * @param transactionId the provider's id of the payment
 * @param orderId       the order the payment is for
 * @param status        the payment's status as of this event, a {@link ProviderStatus} name
 * @param version       the provider's sequence number of this event for the payment: a later event has a higher one
 * @param nonce         a value new with every delivery
 * @param signature     HMAC-SHA256 of the other fields, in hex (see {@link ProviderSignatures})
 */
public record ProviderNotification(String eventId, String transactionId, String orderId, String status,
                                   Long version, String nonce, String signature) {

    private static final Pattern ID = Pattern.compile("[A-Za-z0-9_.:-]{1,64}");

    /** A notification whose fields were checked. */
    public record Valid(String eventId, String transactionId, String orderId, ProviderStatus status, long version) {
    }

    /**
     * Checks every field, so that one answer names every problem.
     *
     * @throws NotificationRefusedException 400 {@code invalid-notification}
     */
    public Valid validate() {
        List<String> errors = new ArrayList<>();
        checkId("eventId", eventId, errors);
        checkId("transactionId", transactionId, errors);
        checkId("orderId", orderId, errors);
        ProviderStatus parsed = null;
        if (status == null) {
            errors.add("status is required");
        } else {
            try {
                parsed = ProviderStatus.valueOf(status);
            } catch (IllegalArgumentException e) {
                errors.add("status must be one of " + List.of(ProviderStatus.values()) + ", in upper case");
            }
        }
        if (version == null || version < 1) {
            errors.add("version is required and must be at least 1");
        }
        if (!errors.isEmpty()) {
            throw NotificationRefusedException.invalid(errors);
        }
        return new Valid(eventId, transactionId, orderId, parsed, version);
    }

    private static void checkId(String field, String value, List<String> errors) {
        if (value == null || !ID.matcher(value).matches()) {
            errors.add(field + " is required: 1 to 64 letters, digits or . _ : -");
        }
    }
}
