package io.idempotency.sample.payment;

import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.Currency;
import java.util.List;
import java.util.regex.Pattern;

/**
 * The body of {@code POST /payments} and {@code POST /charges}, e.g.
 * {@code {"orderId":"o-1","amount":"12.50","currency":"EUR"}}.
 *
 * <p>The amount is taken as text and parsed into a {@link BigDecimal} here, so its value is never rounded on the
 * way in; a JSON number is accepted as well and keeps its exact digits. It must be an amount the currency can express:
 * no fraction of a yen ({@code JPY} has no minor unit), no third decimal of a euro.
 *
 * @param orderId  the order to pay, 1 to 64 characters, none of them NUL
 * @param amount   a positive decimal with at most two fraction digits, and no more than the currency has
 * @param currency an ISO 4217 code, upper case, of a currency with at most two minor digits (the {@code amount}
 *                 columns hold two): {@code EUR}, {@code USD}, {@code JPY}, …; not {@code BHD} (three), nor codes
 *                 without a minor unit such as {@code XAU}
 */
public record PaymentRequest(String orderId, String amount, String currency) {

    /** Longest order id the {@code payments.order_id} column holds. */
    static final int MAX_ORDER_ID_LENGTH = 64;

    // Plain digits only: no sign, no exponent, no grouping, so "1e3" or "+5" are refused rather than guessed at.
    private static final Pattern AMOUNT = Pattern.compile("[0-9]{1,17}(\\.[0-9]{1,2})?");
    private static final Pattern CURRENCY = Pattern.compile("[A-Z]{3}");

    /** Most minor digits a currency may have: the {@code amount} columns are {@code numeric(19, 2)}. */
    private static final int MAX_MINOR_DIGITS = 2;

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
        Currency parsedCurrency = currency(currency);
        if (parsedCurrency == null) {
            errors.add("currency must be the ISO 4217 code of a currency with at most " + MAX_MINOR_DIGITS
                    + " minor digits, in upper case, e.g. \"EUR\"");
        } else if (parsedAmount != null && parsedAmount.signum() > 0
                && parsedAmount.stripTrailingZeros().scale() > parsedCurrency.getDefaultFractionDigits()) {
            // Compared by value: "1250.00" JPY is 1250 yen, "12.50" JPY is no amount of money.
            int digits = parsedCurrency.getDefaultFractionDigits();
            errors.add("amount " + amount + " cannot be paid in " + currency + ", which has "
                    + (digits == 0 ? "no minor unit" : digits + " minor digit" + (digits == 1 ? "" : "s")));
        }
        if (!errors.isEmpty()) {
            throw new InvalidPaymentException(errors);
        }
        return new ValidPayment(orderId, parsedAmount.setScale(2), currency);
    }

    /**
     * The currency of an ISO 4217 code whose minor unit the amount columns can hold, or null: not three upper-case
     * letters, not a code the JDK knows ({@code "ABC"}), no minor unit ({@code "XAU"}, gold), or more minor digits
     * than two ({@code "BHD"}).
     */
    private static Currency currency(String code) {
        if (code == null || !CURRENCY.matcher(code).matches()) {
            return null;
        }
        Currency known;
        try {
            known = Currency.getInstance(code);
        } catch (IllegalArgumentException unknown) {
            return null;
        }
        int digits = known.getDefaultFractionDigits();
        return digits >= 0 && digits <= MAX_MINOR_DIGITS ? known : null;
    }

    /** A request that passed {@link #validate()}: the amount exact, with scale 2. */
    record ValidPayment(String orderId, BigDecimal amount, String currency) {

        /**
         * Whether a recorded amount (as the rows return it, text with two fraction digits) and currency are this
         * payment's: compared by value, so {@code "12.50"} is {@code 12.5}.
         */
        boolean sameMoneyAs(String recordedAmount, String recordedCurrency) {
            return new BigDecimal(recordedAmount).compareTo(amount) == 0 && recordedCurrency.equals(currency);
        }
    }
}
