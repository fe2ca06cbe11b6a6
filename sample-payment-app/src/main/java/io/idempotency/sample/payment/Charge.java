package io.idempotency.sample.payment;

import java.time.OffsetDateTime;

/**
 * A charge made through the payment gateway and recorded by the application, as {@code POST /charges} and
 * {@code GET /charges} return it.
 *
 * @param id              the application's id of the charge
 * @param orderId         the order charged
 * @param amount          the exact amount with two fraction digits, e.g. {@code "12.50"}
 * @param currency        the ISO 4217 currency code
 * @param gatewayChargeId the gateway's id of the charge
 * @param createdAt       when the application recorded the charge (database clock)
 */
public record Charge(long id, String orderId, String amount, String currency, long gatewayChargeId,
                     OffsetDateTime createdAt) {
}
