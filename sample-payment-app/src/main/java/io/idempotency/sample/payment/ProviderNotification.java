package io.idempotency.sample.payment;

import tools.jackson.core.JsonParser;
import tools.jackson.core.JsonToken;
import tools.jackson.databind.DeserializationContext;
import tools.jackson.databind.ValueDeserializer;
import tools.jackson.databind.annotation.JsonDeserialize;

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
 * @param version       the provider's sequence number of this event for the payment, one more with each of its events;
 *                      a JSON integer (see {@link JsonInteger})
 * @param nonce         a value new with every delivery
 * @param signature     HMAC-SHA256 of the other fields, in hex (see {@link ProviderSignatures})
 */
public record ProviderNotification(String eventId, String transactionId, String orderId, String status,
                                   @JsonDeserialize(using = JsonInteger.class) Long version, String nonce,
                                   String signature) {

    private static final Pattern ID = Pattern.compile("[A-Za-z0-9_.:-]{1,64}");

    private static final String VERSION_PROBLEM = "version is required: a JSON integer from 1 to " + Long.MAX_VALUE;

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
            errors.add(VERSION_PROBLEM);
        }
        if (!errors.isEmpty()) {
            throw NotificationRefusedException.invalid(errors);
        }
        return new Valid(eventId, transactionId, orderId, parsed, version);
    }

    /**
     * Reads {@code version} from a JSON integer only. Jackson would also take {@code 2.5} (as 2), {@code 1e3},
     * {@code 2.0} and {@code "2"}; the signature covers the number as the app reads it, so each of those bodies would
     * pass under the signature of another, and a version the provider did not mean would be recorded. Refused while
     * the body is read (400 {@code invalid-notification}), before the signature is checked: nothing is claimed.
     */
    static final class JsonInteger extends ValueDeserializer<Long> {

        @Override
        public Long deserialize(JsonParser parser, DeserializationContext context) {
            if (parser.currentToken() == JsonToken.VALUE_NUMBER_INT
                    && parser.getNumberType() != JsonParser.NumberType.BIG_INTEGER) {
                return parser.getLongValue();
            }
            // found by Spring MVC as the cause of the unreadable body, and answered as it is
            throw NotificationRefusedException.invalid(List.of(VERSION_PROBLEM));
        }
    }

    private static void checkId(String field, String value, List<String> errors) {
        if (value == null || !ID.matcher(value).matches()) {
            errors.add(field + " is required: 1 to 64 letters, digits or . _ : -");
        }
    }
}
