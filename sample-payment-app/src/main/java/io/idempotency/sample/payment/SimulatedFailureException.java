package io.idempotency.sample.payment;

/**
 * The failure that {@code X-Chaos: fail-after-write} raises after the payment row was written. Answered with 500
 * by {@link PaymentExceptionHandler}: an exception, whatever status it maps to, makes the starter roll back the
 * payment and release the key, so a retry runs afresh.
 *
 * <p>On {@code POST /charges} ({@code fail-before-charge}, {@code fail-after-charge}) it is an unknown outcome for the
 * starter's intent-first mode: the local writes roll back, but the claim stays PROCESSING until its lease runs out,
 * and then {@link GatewayChargeResolver} asks the gateway whether the charge was made.
 */
public class SimulatedFailureException extends RuntimeException {

    /** @param message what failed, for the log and the problem detail */
    public SimulatedFailureException(String message) {
        super(message);
    }
}
