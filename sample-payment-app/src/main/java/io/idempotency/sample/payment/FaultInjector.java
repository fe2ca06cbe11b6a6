package io.idempotency.sample.payment;

import io.idempotency.core.IdempotencyContext;
import io.idempotency.core.ScopedKey;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.http.HttpStatus;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.stereotype.Component;
import org.springframework.transaction.support.TransactionSynchronization;
import org.springframework.transaction.support.TransactionSynchronizationManager;
import org.springframework.web.server.ResponseStatusException;

import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Set;

/**
 * Fault injection for demos and crash tests, driven by the {@value #HEADER} request header on {@code POST /payments},
 * {@code POST /charges} and {@code POST /provider/notifications}. Honoured only when {@code sample.chaos.enabled=true}; otherwise the header is ignored.
 *
 * <p>On {@code POST /payments} the header holds one or more comma-separated faults, applied in order right after the
 * payment row is written (or, when the second wall finds the payer's existing payment for the order, right after it
 * is read), but for {@code crash-before-write}:
 * <ul>
 *   <li>{@code crash-before-write}: halt the JVM as the handler starts, the key claimed in the request's transaction
 *       and nothing written yet; the halt's log line shows the status of the request's idempotency record inside
 *       that transaction;</li>
 *   <li>{@code fail-after-write}: throw an exception (the app answers 500; the starter rolls everything back);</li>
 *   <li>{@code fail-at-commit}: write an audit row whose deferred foreign key points nowhere, and return normally,
 *       so the database refuses the COMMIT (23503) after the answer was rendered;</li>
 *   <li>{@code crash-after-write}: halt the JVM before the commit;</li>
 *   <li>{@code crash-before-commit}: halt the JVM at the last moment before the commit, when the answer has been
 *       rendered and stored in the (uncommitted) transaction; the halt's log line shows the status the request's
 *       idempotency record has inside that transaction;</li>
 *   <li>{@code crash-after-commit}: halt the JVM right after the commit, before the client gets the answer;</li>
 *   <li>{@code delay-ms=N}: sleep N milliseconds (at most {@value #MAX_DELAY_MS}), to make requests overlap.</li>
 * </ul>
 * On {@code POST /charges} each fault has its own point in the handler ({@link #parseForCharges}):
 * <ul>
 *   <li>{@code crash-before-charge}: halt the JVM after the claim was committed, before the gateway is called;</li>
 *   <li>{@code fail-before-charge}: throw at that same point instead (the app answers 500 and stays up; nothing was
 *       charged, but for the starter the outcome is unknown);</li>
 *   <li>{@code crash-after-charge}: halt the JVM after the gateway answered (the charge is booked there), before the
 *       application records it;</li>
 *   <li>{@code fail-after-charge}: throw at that same point instead (the app answers 500 and stays up; for the starter
 *       the outcome is unknown);</li>
 *   <li>{@code crash-before-commit}: halt the JVM with the charge recorded and the answer stored in the handler's
 *       (uncommitted) transaction, at the last moment before its commit;</li>
 *   <li>{@code crash-after-commit}: halt the JVM right after that commit, before the client gets the answer;</li>
 *   <li>{@code delay-ms=N}: sleep N milliseconds after the charge was recorded, before answering.</li>
 * </ul>
 * On {@code POST /provider/notifications}, after the event was recorded ({@link #afterNotification}):
 * {@code fail-after-write} (throw: the app answers 500, the starter rolls the event back, and the provider's next
 * delivery records it) and {@code delay-ms=N}.
 * A fault the endpoint does not know is refused with 400 before anything is claimed or written.
 * Halting uses {@link Runtime#halt(int)}: no shutdown hooks, no graceful close, like {@code kill -9}.
 */
@Component
public class FaultInjector {

    /** The request header that selects the faults. */
    public static final String HEADER = "X-Chaos";

    /** Exit status of a halted JVM, the one a shell reports for a process killed by SIGKILL. */
    public static final int HALT_STATUS = 137;

    static final long MAX_DELAY_MS = 60_000;

    /** The faults {@code POST /payments} accepts. */
    static final Set<Kind> PAYMENT_FAULTS = EnumSet.of(Kind.FAIL_AFTER_WRITE, Kind.FAIL_AT_COMMIT,
            Kind.CRASH_BEFORE_WRITE, Kind.CRASH_AFTER_WRITE, Kind.CRASH_BEFORE_COMMIT, Kind.CRASH_AFTER_COMMIT,
            Kind.DELAY);

    /** The faults {@code POST /provider/notifications} accepts. */
    static final Set<Kind> NOTIFICATION_FAULTS = EnumSet.of(Kind.FAIL_AFTER_WRITE, Kind.DELAY);

    /** The faults {@code POST /charges} accepts. */
    static final Set<Kind> CHARGE_FAULTS = EnumSet.of(Kind.CRASH_BEFORE_CHARGE, Kind.FAIL_BEFORE_CHARGE,
            Kind.CRASH_AFTER_CHARGE, Kind.FAIL_AFTER_CHARGE, Kind.CRASH_BEFORE_COMMIT, Kind.CRASH_AFTER_COMMIT,
            Kind.DELAY);

    private static final Logger log = LoggerFactory.getLogger(FaultInjector.class);

    private final boolean enabled;
    private final PaymentRepository payments;
    private final JdbcClient jdbc;

    /**
     * @param properties whether fault injection is on
     * @param payments   used by {@code fail-at-commit} to write the offending audit row
     * @param jdbc       used by {@code crash-before-commit} to read the request's idempotency record inside its
     *                   transaction
     */
    public FaultInjector(ChaosProperties properties, PaymentRepository payments, JdbcClient jdbc) {
        this.enabled = properties.enabled();
        this.payments = payments;
        this.jdbc = jdbc;
    }

    /**
     * Parses the header of a {@code POST /payments} before anything is written, so that a typo in it is a 400 and not
     * a half-applied fault.
     *
     * @return the faults to apply; empty when the header is absent or fault injection is off
     * @throws ResponseStatusException 400 for an unknown fault
     */
    public List<Fault> parse(String header) {
        return parse(header, PAYMENT_FAULTS);
    }

    /**
     * Parses the header of a {@code POST /charges}. Called while Spring MVC binds the handler's arguments (see
     * {@link ChargeWebConfiguration}), so a typo is a 400 before the starter claims the key.
     *
     * @return the faults to apply; empty when the header is absent or fault injection is off
     * @throws ResponseStatusException 400 for a fault {@code POST /charges} does not know
     */
    public List<Fault> parseForCharges(String header) {
        return parse(header, CHARGE_FAULTS);
    }

    /**
     * Parses the header of a {@code POST /provider/notifications}.
     *
     * @return the faults to apply; empty when the header is absent or fault injection is off
     * @throws ResponseStatusException 400 for a fault that endpoint does not know
     */
    public List<Fault> parseForNotifications(String header) {
        return parse(header, NOTIFICATION_FAULTS);
    }

    /**
     * {@code POST /provider/notifications}: applies the faults, in order, after the event was recorded (inside the
     * request's transaction).
     */
    public void afterNotification(List<Fault> faults, String eventId) {
        for (Fault fault : faults) {
            switch (fault.kind()) {
                case FAIL_AFTER_WRITE -> throw new SimulatedFailureException(
                        "simulated failure after recording provider event " + eventId);
                case DELAY -> sleep(fault.delayMs());
                default -> throw new IllegalStateException(fault.kind() + " is not a fault of provider notifications");
            }
        }
    }

    private List<Fault> parse(String header, Set<Kind> accepted) {
        if (!enabled || header == null || header.isBlank()) {
            return List.of();
        }
        List<Fault> faults = new ArrayList<>();
        for (String part : header.split(",")) {
            Fault fault = Fault.parse(part.trim(), accepted);
            faults.add(fault);
        }
        return faults;
    }

    /**
     * {@code POST /charges}: applies {@code crash-before-charge} and {@code fail-before-charge}, in order, after the
     * claim was committed and before the gateway is called.
     */
    public void beforeCharge(List<Fault> faults) {
        for (Fault fault : faults) {
            if (fault.kind() == Kind.CRASH_BEFORE_CHARGE) {
                halt("before calling the gateway");
            } else if (fault.kind() == Kind.FAIL_BEFORE_CHARGE) {
                throw new SimulatedFailureException("simulated failure before calling the gateway");
            }
        }
    }

    /**
     * {@code POST /charges}: applies {@code crash-after-charge} and {@code fail-after-charge}, in order, after the
     * gateway booked charge {@code gatewayChargeId} and before the application records it.
     */
    public void afterCharge(List<Fault> faults, long gatewayChargeId) {
        for (Fault fault : faults) {
            if (fault.kind() == Kind.CRASH_AFTER_CHARGE) {
                halt("after the gateway booked charge " + gatewayChargeId + ", before recording it");
            } else if (fault.kind() == Kind.FAIL_AFTER_CHARGE) {
                throw new SimulatedFailureException("simulated failure after the gateway booked charge "
                        + gatewayChargeId + ", before recording it");
            }
        }
    }

    /**
     * {@code POST /charges}: applies {@code crash-before-commit}, {@code crash-after-commit} and {@code delay-ms=N},
     * in order, after {@code charge} was recorded in the handler's transaction, before answering.
     */
    public void afterRecord(List<Fault> faults, Charge charge) {
        for (Fault fault : faults) {
            switch (fault.kind()) {
                case CRASH_BEFORE_COMMIT -> haltBeforeCommit(fault, "with charge " + charge.id()
                        + " recorded and its answer written");
                case CRASH_AFTER_COMMIT -> haltAfterCommit(fault, "after committing charge " + charge.id());
                case DELAY -> sleep(fault.delayMs());
                default -> {
                    // applied at their own points of the handler
                }
            }
        }
    }

    /** {@code POST /payments}: applies {@code crash-before-write}, as the handler starts, before it writes anything. */
    public void beforeWrite(List<Fault> faults) {
        for (Fault fault : faults) {
            if (fault.kind() == Kind.CRASH_BEFORE_WRITE) {
                halt("with the key claimed, before writing the payment (idempotency record in the transaction: "
                        + recordStatus(IdempotencyContext.current().map(IdempotencyContext::key).orElse(null)) + ")");
            }
        }
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
            case CRASH_BEFORE_COMMIT -> haltBeforeCommit(fault, "with payment " + payment.id()
                    + " and its answer written");
            case CRASH_AFTER_COMMIT -> haltAfterCommit(fault, "after committing payment " + payment.id());
            case DELAY -> sleep(fault.delayMs());
            case CRASH_BEFORE_WRITE -> {
                // applied before the write
            }
            case CRASH_BEFORE_CHARGE, FAIL_BEFORE_CHARGE, CRASH_AFTER_CHARGE, FAIL_AFTER_CHARGE ->
                    throw new IllegalStateException(fault.kind() + " is not a fault of POST /payments");
        }
    }

    /**
     * Halts the JVM when the request's transaction is about to commit: after the starter stored the answer in it, which
     * it does after the callbacks that run before the commit — so this halts in the ones that run after those, before
     * the transaction completes. The log line says which status the request's idempotency record has in the
     * transaction at that moment (the table's default name), so that a test can tell that the answer was stored before
     * the halt, uncommitted.
     */
    private void haltBeforeCommit(Fault fault, String what) {
        ScopedKey key = IdempotencyContext.current().map(IdempotencyContext::key).orElse(null);
        onTransaction(fault, new TransactionSynchronization() {
            @Override
            public void beforeCompletion() {
                halt(what + ", before the commit (idempotency record in the transaction: " + recordStatus(key)
                        + ")");
            }
        });
    }

    private void haltAfterCommit(Fault fault, String what) {
        onTransaction(fault, new TransactionSynchronization() {
            @Override
            public void afterCommit() {
                halt(what + ", before answering");
            }
        });
    }

    private String recordStatus(ScopedKey key) {
        if (key == null) {
            return "no key";
        }
        try {
            return jdbc.sql("SELECT status FROM idempotency_keys"
                            + " WHERE caller = :caller AND scope = :scope AND idempotency_key = :key")
                    .param("caller", key.caller())
                    .param("scope", key.scope())
                    .param("key", key.key())
                    .query(String.class)
                    .optional()
                    .orElse("none");
        } catch (RuntimeException e) {
            return "unknown (" + e.getMessage() + ")";
        }
    }

    private static void onTransaction(Fault fault, TransactionSynchronization synchronization) {
        if (!TransactionSynchronizationManager.isSynchronizationActive()) {
            throw new IllegalStateException(Fault.name(fault.kind()) + " needs a transaction around the handler;"
                    + " is the idempotency starter enabled?");
        }
        TransactionSynchronizationManager.registerSynchronization(synchronization);
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
        /** Halt the JVM as the handler starts, the key claimed and nothing written. */
        CRASH_BEFORE_WRITE,
        /** Halt the JVM before the commit. */
        CRASH_AFTER_WRITE,
        /** Halt the JVM when the transaction is about to commit, everything written but not committed. */
        CRASH_BEFORE_COMMIT,
        /** Halt the JVM after the commit, before the answer is sent (also on {@code POST /charges}). */
        CRASH_AFTER_COMMIT,
        /** {@code POST /charges}: halt the JVM before the gateway is called. */
        CRASH_BEFORE_CHARGE,
        /** {@code POST /charges}: throw before the gateway is called. */
        FAIL_BEFORE_CHARGE,
        /** {@code POST /charges}: halt the JVM after the gateway booked the charge, before it is recorded. */
        CRASH_AFTER_CHARGE,
        /** {@code POST /charges}: throw after the gateway booked the charge, before it is recorded. */
        FAIL_AFTER_CHARGE,
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

        static Fault parse(String value, Set<Kind> accepted) {
            Fault fault = parseAny(value);
            if (fault == null || !accepted.contains(fault.kind())) {
                List<String> expected = new ArrayList<>();
                for (Kind kind : accepted) {
                    expected.add(kind == Kind.DELAY ? "delay-ms=N (0.." + MAX_DELAY_MS + ")" : name(kind));
                }
                throw new ResponseStatusException(HttpStatus.BAD_REQUEST, "unknown " + HEADER + " value '" + value
                        + "'; expected " + String.join(", ", expected));
            }
            return fault;
        }

        /** The header's name of a fault, e.g. {@code crash-after-charge}. */
        static String name(Kind kind) {
            return kind.name().toLowerCase(java.util.Locale.ROOT).replace('_', '-');
        }

        private static Fault parseAny(String value) {
            for (Kind kind : Kind.values()) {
                if (kind != Kind.DELAY && name(kind).equals(value)) {
                    return new Fault(kind, 0);
                }
            }
            if (value.startsWith("delay-ms=")) {
                try {
                    long millis = Long.parseLong(value.substring("delay-ms=".length()));
                    if (millis >= 0 && millis <= MAX_DELAY_MS) {
                        return new Fault(Kind.DELAY, millis);
                    }
                } catch (NumberFormatException e) {
                    // reported by the caller
                }
            }
            return null;
        }
    }
}
