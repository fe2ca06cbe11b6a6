package io.idempotency.sample.payment;

import io.idempotency.core.Idempotent;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.http.MediaType;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestHeader;
import org.springframework.web.bind.annotation.RestController;

import java.time.Duration;
import java.util.List;

/**
 * {@code POST /provider/notifications}: a payment provider's notifications about the payments it handles. Three
 * things a provider does make this endpoint what it is:
 *
 * <ul>
 *   <li>It sends no {@code Idempotency-Key} header, and re-sends an event with a fresh nonce and signature until it
 *       is answered 2xx. So the key is the event's own id ({@code key = "#body.eventId"}), and only the fields that
 *       make the event are fingerprinted: a re-send is a replay, while another event under the same id is refused
 *       (422).</li>
 *   <li>It delivers events out of order. Each carries the payment's status and a version, and a payment changes only
 *       for a newer event whose status may follow the recorded one ({@link ProviderPaymentRepository#advance}): a late
 *       "closed" sent before "succeeded" is acknowledged and changes nothing.</li>
 *   <li>It takes a 2xx as "done". So the endpoint answers 2xx only once the event is recorded (committed with the
 *       stored answer), and answers 409 with {@code Retry-After} for an event that came before one it follows (a
 *       "refunded" before its "succeeded"): nothing is stored, and the provider's next delivery finds the payment
 *       ready for it — as long as the versions leave room for the events it needs: one numbered right after the
 *       recorded one that cannot follow it is acknowledged as contradicting it. Any failure (a 5xx) likewise leaves
 *       nothing, and the next delivery runs afresh.</li>
 * </ul>
 *
 * <p>The signature and the fields are checked while Spring MVC reads the body ({@link ProviderNotificationChecks}),
 * before the key is claimed: a forged or malformed notification claims no key and gets no stored answer.
 */
@RestController
public class ProviderNotificationController {

    /** How long the provider is asked to wait before delivering an out-of-order event again. */
    static final Duration OUT_OF_ORDER_RETRY = Duration.ofSeconds(5);

    private static final Logger log = LoggerFactory.getLogger(ProviderNotificationController.class);

    private final ProviderPaymentRepository payments;
    private final FaultInjector faults;

    /**
     * @param payments the provider's payments and the events acknowledged
     * @param faults   fault injection ({@code X-Chaos}), inert unless enabled
     */
    public ProviderNotificationController(ProviderPaymentRepository payments, FaultInjector faults) {
        this.payments = payments;
        this.faults = faults;
    }

    /**
     * Records one event: 200 with what was done about it ({@link NotificationOutcome}); 409 problem+json with
     * {@code Retry-After} when it came too early; 400 / 401 problem+json for an invalid or unsigned notification.
     */
    @Idempotent(scope = "provider-notifications", key = "#body.eventId",
            fingerprint = {"#body.transactionId", "#body.orderId", "#body.status", "#body.version"})
    @PostMapping(path = "/provider/notifications", consumes = MediaType.APPLICATION_JSON_VALUE,
            produces = MediaType.APPLICATION_JSON_VALUE)
    public NotificationOutcome receive(@RequestBody ProviderNotification notification,
                                       @RequestHeader(name = FaultInjector.HEADER, required = false) String chaos) {
        ProviderNotification.Valid event = notification.validate(); // checked already: see the class comment
        List<FaultInjector.Fault> injected = faults.parseForNotifications(chaos);
        NotificationOutcome.Outcome outcome;
        ProviderPayment after;
        var advanced = payments.advance(event);
        if (advanced.isPresent()) {
            outcome = NotificationOutcome.Outcome.APPLIED;
            after = advanced.get();
        } else {
            after = payments.lockedState(event.transactionId());
            if (!after.orderId().equals(event.orderId())) {
                // the provider says this payment is for another order than the one recorded: not to be trusted
                // for either, in whatever order the two came
                outcome = NotificationOutcome.Outcome.CONTRADICTED;
            } else if (event.version() <= after.version()) {
                // old news only if its status could have led to the recorded one: a "succeeded" older than a
                // recorded "closed" says the payment was taken, then abandoned, as much as the reverse order would
                outcome = fitsBefore(event, after) ? NotificationOutcome.Outcome.SUPERSEDED
                        : NotificationOutcome.Outcome.CONTRADICTED;
            } else if (event.version() - after.version() > 1 && after.status().canReachThroughOthers(event.status())) {
                // an event between the two may still come, unless this one is numbered right after the recorded one
                throw NotificationRefusedException.outOfOrder(event, after, OUT_OF_ORDER_RETRY);
            } else {
                outcome = NotificationOutcome.Outcome.CONTRADICTED;
            }
            if (outcome == NotificationOutcome.Outcome.CONTRADICTED) {
                log.warn("provider event {} says payment {} of order {} is {} (version {}), which contradicts the"
                                + " recorded {} (version {}) of order {}: acknowledged without change, to be looked"
                                + " into", event.eventId(), event.transactionId(), event.orderId(), event.status(),
                        event.version(), after.status(), after.version(), after.orderId());
            }
        }
        payments.logEvent(event, outcome);
        faults.afterNotification(injected, event.eventId());
        return new NotificationOutcome(event.eventId(), event.transactionId(), outcome, after.status(),
                after.version());
    }

    /** Whether an event no newer than the payment's state fits in the history that led to it. */
    private static boolean fitsBefore(ProviderNotification.Valid event, ProviderPayment after) {
        if (event.version() == after.version() && event.status() == after.status()) {
            return true; // the event applied, delivered again after its idempotency record was deleted
        }
        return event.status().canLeadTo(after.status());
    }
}
