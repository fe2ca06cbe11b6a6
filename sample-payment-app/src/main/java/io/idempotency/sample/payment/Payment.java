package io.idempotency.sample.payment;

import java.time.OffsetDateTime;

/**
 * A stored payment, as the API returns it.
 *
 * @param id        the database id
 * @param orderId   the order the payment belongs to
 * @param amount    the exact amount with two fraction digits, e.g. {@code "12.50"}; a string so that no JSON client
 *                  reads it through a binary floating-point number
 * @param currency  the ISO 4217 currency code
 * @param createdAt when the payment was written (database clock)
 */
public record Payment(long id, String orderId, String amount, String currency, OffsetDateTime createdAt) {
}
