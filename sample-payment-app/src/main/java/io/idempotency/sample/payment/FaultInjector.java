package io.idempotency.sample.payment;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.http.HttpStatus;
import org.springframework.stereotype.Component;
import org.springframework.transaction.support.TransactionSynchronization;
import org.springframework.transaction.support.TransactionSynchronizationManager;
import org.springframework.web.server.ResponseStatusException;

import java.util.ArrayList;
import java.util.List;

/**
 * Fault injection for demos and crash tests, driven by the {@value #HEADER} request header on {@code POST /payments}.
 * Honoured only when {@code sample.chaos.enabled=true}; otherwise the header is ignored.
 *
 * <p>The header holds one or more comma-separated faults, applied in order right after the payment row is written
 * (or, when the second wall finds the payer's existing payment for the order, right after it is read):
 * <ul>
 *   <li>{@code fail-after-write}: throw an exception (the app answers 500; the starter rolls everything back);</li>
 *   <li>{@code fail-at-commit}: write an audit row whose deferred foreign key points nowhere, and return normally,
 *       so the database refuses the COMMIT (23503) after the answer was rendered;</li>
 *   <li>{@code crash-after-write}: halt the JVM before the commit;</li>
 *   <li>{@code crash-after-commit}: halt the JVM right after the commit, before the client gets the answer;</li>
 *   <li>{@code delay-ms=N}: sleep N milliseconds (at most {@value #MAX_DELAY_MS}), to make requests overlap.</li>
 * </ul>
 * Halting uses {@link Runtime#halt(int)}: no shutdown hooks, no graceful close, like {@code kill -9}.
 */
@Component
public class FaultInjector {

    /** The request header that selects the faults. */
    public static final String HEADER = "X-Chaos";

    /** Exit status of a halted JVM, the one a shell reports for a process killed by SIGKILL. */
    public static final int HALT_STATUS = 137;

    static final long MAX_DELAY_MS = 60_000;

    private static final Logger log = LoggerFactory.getLogger(FaultInjector.class);

    private final boolean enabled;
    private final PaymentRepository payments;

    /**
     * @param properties whether fault injection is on
     * @param payments   used by {@code fail-at-commit} to write the offending audit row
     */
    public FaultInjector(ChaosProperties properties, PaymentRepository payments) {
        this.enabled = properties.enabled();
        this.payments = payments;
    }

    /**
     * Parses the header before anything is written, so that a typo in it is a 400 and not a half-applied fault.
     *
     * @return the faults to apply; empty when the header is absent or fault injection is off
     * @throws ResponseStatusException 400 for an unknown fault
     */
    public List<Fault> parse(String header) {
        if (!enabled || header == null || header.isBlank()) {
            return List.of();
        }
        List<Fault> faults = new ArrayList<>();
        for (String part : header.split(",")) {
            faults.add(Fault.parse(part.trim()));
        }
        return faults;
    }

    /**
     * Applies the faults, in order, after {@code payment} has been written or found by the second wall (inside the
     * request's transaction).
     */
    public void afterWrite(List<Fault> faults, Payment payment) {
        for (Fault fault : faults) {
            apply(fault, payment);
        }
    }

    private void apply(Fault fault, Payment payment) {
        switch (fault.kind()) {
            case FAIL_AFTER_WRITE -> throw new SimulatedFailureException(
                    "simulated failure after writing payment " + payment.id());
            case FAIL_AT_COMMIT ->
                // Payment ids come from a bigserial and are never negative, so this row's foreign key can never
                // be satisfied; being deferred, it is checked only when the transaction commits.
                    payments.insertAudit(-payment.id(), "chaos:fail-at-commit");
            case CRASH_AFTER_WRITE -> halt("after writing payment " + payment.id() + ", before the commit");
            case CRASH_AFTER_COMMIT -> {
                if (!TransactionSynchronizationManager.isSynchronizationActive()) {
                    throw new IllegalStateException("crash-after-commit needs a transaction around the handler;"
                            + " is the idempotency starter enabled?");
                }
                TransactionSynchronizationManager.registerSynchronization(new TransactionSynchronization() {
                    @Override
                    public void afterCommit() {
                        halt("after committing payment " + payment.id() + ", before answering");
                    }
                });
            }
            case DELAY -> sleep(fault.delayMs());
        }
    }

    private static void halt(String when) {
        log.warn("X-Chaos: halting the JVM {}", when);
        System.err.println("X-Chaos: halting the JVM " + when);
        System.err.flush();
        Runtime.getRuntime().halt(HALT_STATUS);
    }

    private static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted during X-Chaos delay", e);
        }
    }

    /** The kinds of fault the header can ask for. */
    public enum Kind {
        /** Throw after the write. */
        FAIL_AFTER_WRITE,
        /** Make the commit fail in the database. */
        FAIL_AT_COMMIT,
        /** Halt the JVM before the commit. */
        CRASH_AFTER_WRITE,
        /** Halt the JVM after the commit, before the answer is sent. */
        CRASH_AFTER_COMMIT,
        /** Sleep inside the handler. */
        DELAY
    }

    /**
     * One requested fault.
     *
     * @param kind    what to do
     * @param delayMs how long to sleep, for {@link Kind#DELAY}
     */
    public record Fault(Kind kind, long delayMs) {

        static Fault parse(String value) {
            switch (value) {
                case "fail-after-write":
                    return new Fault(Kind.FAIL_AFTER_WRITE, 0);
                case "fail-at-commit":
                    return new Fault(Kind.FAIL_AT_COMMIT, 0);
                case "crash-after-write":
                    return new Fault(Kind.CRASH_AFTER_WRITE, 0);
                case "crash-after-commit":
                    return new Fault(Kind.CRASH_AFTER_COMMIT, 0);
                default:
                    break;
            }
            if (value.startsWith("delay-ms=")) {
                try {
                    long millis = Long.parseLong(value.substring("delay-ms=".length()));
                    if (millis >= 0 && millis <= MAX_DELAY_MS) {
                        return new Fault(Kind.DELAY, millis);
                    }
                } catch (NumberFormatException e) {
                    // reported below
                }
            }
            throw new ResponseStatusException(HttpStatus.BAD_REQUEST, "unknown " + HEADER + " value '" + value
                    + "'; expected fail-after-write, fail-at-commit, crash-after-write, crash-after-commit"
                    + " or delay-ms=N (0.." + MAX_DELAY_MS + ")");
        }
    }
}
