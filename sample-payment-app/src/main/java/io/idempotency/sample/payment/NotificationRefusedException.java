package io.idempotency.sample.payment;

import org.springframework.http.HttpStatus;

import java.net.URI;
import java.time.Duration;
import java.util.List;

/**
 * A provider notification the app does not acknowledge, answered as {@code application/problem+json} by
 * {@link ProviderNotificationExceptionHandler}. Being an exception, it is never stored: the provider's next delivery
 * of the event is handled afresh.
 */
public class NotificationRefusedException extends RuntimeException {

    private static final String PROBLEM_TYPE_BASE = "https://idempotency-starter.github.io/problems/sample/";

    /** Problem type of a notification whose fields are invalid (400). */
    public static final URI INVALID_NOTIFICATION = URI.create(PROBLEM_TYPE_BASE + "invalid-notification");

    /** Problem type of a notification whose signature does not match (401). */
    public static final URI INVALID_SIGNATURE = URI.create(PROBLEM_TYPE_BASE + "invalid-signature");

    /** Problem type of an event that came before one it follows (409): the provider is to deliver it again later. */
    public static final URI OUT_OF_ORDER = URI.create(PROBLEM_TYPE_BASE + "notification-out-of-order");

    private final HttpStatus status;
    private final URI type;
    private final String title;
    private final List<String> errors;
    private final Duration retryAfter;

    private NotificationRefusedException(HttpStatus status, URI type, String title, String detail,
                                         List<String> errors, Duration retryAfter) {
        super(detail);
        this.status = status;
        this.type = type;
        this.title = title;
        this.errors = List.copyOf(errors);
        this.retryAfter = retryAfter;
    }

    /** 400: {@code errors} names every invalid field. */
    public static NotificationRefusedException invalid(List<String> errors) {
        return new NotificationRefusedException(HttpStatus.BAD_REQUEST, INVALID_NOTIFICATION, "Invalid notification",
                String.join("; ", errors), errors, null);
    }

    /** 401: the signature is missing or is not the provider's. */
    public static NotificationRefusedException badSignature() {
        return new NotificationRefusedException(HttpStatus.UNAUTHORIZED, INVALID_SIGNATURE, "Invalid signature",
                "The notification's signature is missing or does not match its fields.", List.of(), null);
    }

    /**
     * 409 with {@code Retry-After}: the event follows a status the payment has not reached here yet, because an
     * event between the two has not arrived.
     */
    public static NotificationRefusedException outOfOrder(ProviderNotification.Valid event, ProviderPayment current,
                                                          Duration retryAfter) {
        return new NotificationRefusedException(HttpStatus.CONFLICT, OUT_OF_ORDER, "Notification out of order",
                "Payment " + event.transactionId() + " is " + current.status() + " (version " + current.version()
                        + "); " + event.status() + " cannot follow that directly, so an earlier event has not arrived"
                        + " yet. Deliver this one again later.", List.of(), retryAfter);
    }

    HttpStatus status() {
        return status;
    }

    URI type() {
        return type;
    }

    String title() {
        return title;
    }

    List<String> errors() {
        return errors;
    }

    /** How long the provider should wait before delivering again; null when a new delivery cannot help. */
    Duration retryAfter() {
        return retryAfter;
    }
}
