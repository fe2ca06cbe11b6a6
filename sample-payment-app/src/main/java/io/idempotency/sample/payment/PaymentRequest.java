package io.idempotency.sample.payment;

import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Pattern;

/**
 * The body of {@code POST /payments} and {@code POST /charges}, e.g.
 * {@code {"orderId":"o-1","amount":"12.50","currency":"EUR"}}.
 *
 * <p>The amount is taken as text and parsed into a {@link BigDecimal} here, so its value is never rounded on the
 * way in; a JSON number is accepted as well and keeps its exact digits.
 *
 * @param orderId  the order to pay, 1 to 64 characters, none of them NUL
 * @param amount   a positive decimal with at most two fraction digits
 * @param currency three upper-case letters (ISO 4217)
 */
public record PaymentRequest(String orderId, String amount, String currency) {

    /** Longest order id the {@code payments.order_id} column holds. */
    static final int MAX_ORDER_ID_LENGTH = 64;

    // Plain digits only: no sign, no exponent, no grouping, so "1e3" or "+5" are refused rather than guessed at.
    private static final Pattern AMOUNT = Pattern.compile("[0-9]{1,17}(\\.[0-9]{1,2})?");
    private static final Pattern CURRENCY = Pattern.compile("[A-Z]{3}");

    /**
     * Checks every field and returns the payment to write.
     *
     * @throws InvalidPaymentException listing every problem found, before anything is written
     */
    ValidPayment validate() {
        List<String> errors = new ArrayList<>();
        if (orderId == null || orderId.isBlank()) {
            errors.add("orderId must not be blank");
        } else if (orderId.length() > MAX_ORDER_ID_LENGTH) {
            errors.add("orderId must be at most " + MAX_ORDER_ID_LENGTH + " characters");
        } else if (orderId.indexOf('\0') >= 0) {
            // Valid JSON, but PostgreSQL text cannot hold it: refused here rather than failing the INSERT with a 5xx.
            errors.add("orderId must not contain the NUL character");
        }
        BigDecimal parsedAmount = null;
        if (amount == null || !AMOUNT.matcher(amount).matches()) {
            errors.add("amount must be a positive decimal with at most two fraction digits, e.g. \"12.50\"");
        } else {
            parsedAmount = new BigDecimal(amount);
            if (parsedAmount.signum() <= 0) {
                errors.add("amount must be greater than zero");
            }
        }
        if (currency == null || !CURRENCY.matcher(currency).matches()) {
            errors.add("currency must be three upper-case letters (ISO 4217), e.g. \"EUR\"");
        }
        if (!errors.isEmpty()) {
            throw new InvalidPaymentException(errors);
        }
        return new ValidPayment(orderId, parsedAmount.setScale(2), currency);
    }

    /** A request that passed {@link #validate()}: the amount exact, with scale 2. */
    record ValidPayment(String orderId, BigDecimal amount, String currency) {
    }
}
