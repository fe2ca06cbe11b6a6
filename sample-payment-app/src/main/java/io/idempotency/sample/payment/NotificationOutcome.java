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
        /**
         * Nothing: a newer event was applied before it, and its status could have led to the recorded one (a late
         * "pending" after "succeeded", or a "disputed" after the dispute was won).
         */
        SUPERSEDED,
        /**
         * Nothing: its status and the recorded one cannot both be true in the order of their versions — a
         * "succeeded" newer than a recorded "closed", or one older than it; or it names another order than the one
         * recorded for the payment. Acknowledged, so that the provider stops re-sending it, and logged for a person
         * to look into.
         */
        CONTRADICTED
    }
}
