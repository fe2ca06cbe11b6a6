package io.idempotency.benchmarks;

import java.math.BigDecimal;

/** A stored order, as answered (about 300 bytes of JSON). */
public record Order(long id, String reference, String customer, BigDecimal amount, String currency, String status,
                    String description, String createdAt, String self) {
}
