package io.idempotency.sample.payment.gateway;

import java.time.OffsetDateTime;

/**
 * One charge booked by the fake gateway, as its API returns it.
 *
 * @param id             the gateway's id of the charge
 * @param idempotencyKey the key the charge was booked under (the one the client of the gateway sent)
 * @param orderId        the order charged
 * @param amount         the exact amount with two fraction digits, e.g. {@code "12.50"}
 * @param currency       the ISO 4217 currency code
 * @param createdAt      when the gateway booked the charge (database clock)
 */
public record LedgerEntry(long id, String idempotencyKey, String orderId, String amount, String currency,
                          OffsetDateTime createdAt) {
}
