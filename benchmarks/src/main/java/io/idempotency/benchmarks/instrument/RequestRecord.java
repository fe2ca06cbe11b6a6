package io.idempotency.benchmarks.instrument;

import java.util.ArrayList;
import java.util.List;

/**
 * What one HTTP request did to the database: its round trips (counted on the wire), the time its claim statement
 * took, and — when traced — the statements of each round trip. Bound to the request's thread by
 * {@link RequestRecordingFilter}; pgjdbc writes to its socket on the calling thread, so every round trip a request
 * causes is counted here. Not thread-safe (one request thread).
 */
public final class RequestRecord {

    private static final ThreadLocal<RequestRecord> CURRENT = new ThreadLocal<>();

    private final String scenario;
    private final boolean traced;
    private int roundTrips;
    private int syncs;
    private int flushes;
    private long claimNanos = -1;
    private final List<List<String>> trace;
    private List<String> pendingStatements;
    private List<String> pendingDescribed;
    private StringBuilder pendingMessages;

    RequestRecord(String scenario, boolean traced) {
        this.scenario = scenario;
        this.traced = traced;
        this.trace = traced ? new ArrayList<>() : null;
    }

    /** The record of the request running on this thread, or null outside requests. */
    public static RequestRecord current() {
        return CURRENT.get();
    }

    static void bind(RequestRecord record) {
        CURRENT.set(record);
    }

    static void unbind() {
        CURRENT.remove();
    }

    public String scenario() {
        return scenario;
    }

    boolean traced() {
        return traced;
    }

    /** The client wrote and now waits: the statements sent since the last round trip belong to this one. */
    void roundTrip() {
        roundTrips++;
        if (traced) {
            List<String> statements = pendingStatements == null ? new ArrayList<>() : pendingStatements;
            if (pendingDescribed != null) { // described without being executed in this round trip: a round trip of its own
                for (String sql : pendingDescribed) {
                    if (!statements.contains(sql)) {
                        statements.add("(describe only: parameter/result types) " + sql);
                    }
                }
                pendingDescribed = null;
            }
            if (statements.isEmpty()) {
                statements.add("<no statement>");
            }
            if (pendingMessages != null) { // the frontend message types of this round trip, e.g. [Q P B D E S]
                statements.add("[" + pendingMessages.toString().trim() + "]");
                pendingMessages = null;
            }
            trace.add(statements);
            pendingStatements = null;
        }
    }

    /** What was sent since the last round trip was not the request's (the pool's liveness check): forget it. */
    void discardPending() {
        pendingStatements = null;
        pendingDescribed = null;
        pendingMessages = null;
    }

    void readyForQueryRequested(char kind) {
        syncs++;
    }

    void flush() {
        flushes++;
    }

    void statement(String sql) {
        if (pendingStatements == null) {
            pendingStatements = new ArrayList<>();
        }
        pendingStatements.add(sql);
    }

    void message(char type) {
        if (pendingMessages == null) {
            pendingMessages = new StringBuilder();
        }
        pendingMessages.append(type).append(' ');
    }

    void described(String sql) {
        if (pendingDescribed == null) {
            pendingDescribed = new ArrayList<>();
        }
        pendingDescribed.add(sql);
    }

    void claimTook(long nanos) {
        claimNanos = claimNanos < 0 ? nanos : claimNanos + nanos;
    }

    int roundTrips() {
        return roundTrips;
    }

    int syncs() {
        return syncs;
    }

    int flushes() {
        return flushes;
    }

    long claimNanos() {
        return claimNanos;
    }

    List<List<String>> trace() {
        return trace;
    }
}
