package io.idempotency.sample.payment;

import org.springframework.boot.context.properties.ConfigurationProperties;
import org.springframework.boot.context.properties.bind.DefaultValue;

/**
 * Switches the second wall ({@code sample.second-wall.enabled}): the business rule "one payment per payer and order",
 * enforced by a unique index, behind the idempotency key. On by default.
 *
 * <p>The idempotency record is the first wall, and it is only kept for {@code idempotency.retention.ttl}: a request
 * replayed after its record was deleted runs again. The second wall makes that replay harmless, because the payment
 * it would create already exists. Tests that must prove the idempotency layer <em>alone</em> gives one payment switch
 * it off, since with the wall on a double execution would not show up as a second payment row.
 *
 * @param enabled whether {@code POST /payments} answers a second payment for the same payer and order with the
 *                existing payment (200) or a conflict (409) instead of writing it
 */
@ConfigurationProperties("sample.second-wall")
public record SecondWallProperties(@DefaultValue("true") boolean enabled) {
}
