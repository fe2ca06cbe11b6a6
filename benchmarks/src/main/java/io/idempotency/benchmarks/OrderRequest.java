package io.idempotency.benchmarks;

import java.math.BigDecimal;

/** The body of an order request. */
public record OrderRequest(String reference, String customer, BigDecimal amount, String currency,
                           String description) {
}
