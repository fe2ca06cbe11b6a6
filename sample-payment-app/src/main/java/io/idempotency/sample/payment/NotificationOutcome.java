package io.idempotency.sample.payment;

/**
 * The answer to an acknowledged provider notification (200): what was done about the event, and the payment's state
 * afterwards.
 *
 * @param eventId       the event
 * @param transactionId the provider's payment
 * @param outcome       what was done about the event
 * @param status        the payment's status afterwards
 * @param version       the version of the event that status came from
 */
public record NotificationOutcome(String eventId, String transactionId, Outcome outcome, ProviderStatus status,
                                  long version) {

    /** What was done about an event. */
    public enum Outcome {
        /** Its status was recorded. */
        APPLIED,
        /** Nothing: a newer event was applied before it (a late "closed" after "succeeded", say). */
        SUPERSEDED,
        /**
         * Nothing: it is newer, but its status can never follow the recorded one (a "succeeded" after a "closed").
         * Acknowledged, so that the provider stops re-sending it, and logged for a person to look into.
         */
        CONTRADICTED
    }
}
