package io.idempotency.benchmarks.instrument;

import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.atomic.LongAdder;

/**
 * Totals of the PostgreSQL traffic of this JVM, fed by every {@link CountingSocketFactory} connection: round trips
 * inside requests go to the request's {@link RequestRecord} (pgjdbc writes and reads on the thread that uses the
 * connection), the others (pool start-up, keepalive, and the pool's liveness check of a connection it is about to lend,
 * which runs on the borrowing request's thread) only to {@link #outsideRequests}. Thread-safe.
 */
public final class WireTraffic {

    private static final LongAdder ROUND_TRIPS = new LongAdder();
    private static final LongAdder OUTSIDE_REQUESTS = new LongAdder();
    private static final LongAdder FLUSHES = new LongAdder();
    private static final LongAdder SYNCS = new LongAdder();
    private static final AtomicReference<String> UNREADABLE = new AtomicReference<>();

    private WireTraffic() {
    }

    /** The tap of one new connection. */
    static WireTap newTap() {
        return new WireTap(new FrontendMessageParser.Listener() {
            @Override
            public void readyForQueryRequested(char kind) {
                SYNCS.increment();
                RequestRecord record = RequestRecord.current();
                if (record != null) {
                    record.readyForQueryRequested(kind);
                }
            }

            @Override
            public void flush() {
                FLUSHES.increment();
                RequestRecord record = RequestRecord.current();
                if (record != null) {
                    record.flush();
                }
            }

            @Override
            public boolean wantsStatements() {
                RequestRecord record = RequestRecord.current();
                return record != null && record.traced();
            }

            @Override
            public void statement(String sql) {
                RequestRecord record = RequestRecord.current();
                if (record != null) {
                    record.statement(sql.strip().replaceAll("\\s+", " "));
                }
            }

            @Override
            public void message(char type) {
                RequestRecord record = RequestRecord.current();
                if (record != null) {
                    record.message(type);
                }
            }

            @Override
            public void described(String sql) {
                RequestRecord record = RequestRecord.current();
                if (record != null) {
                    record.described(sql.strip().replaceAll("\\s+", " "));
                }
            }

            @Override
            public void unreadable(String reason) {
                UNREADABLE.compareAndSet(null, reason);
            }
        }, new WireTap.TurnListener() {
            @Override
            public void roundTrip() {
                ROUND_TRIPS.increment();
                RequestRecord record = RequestRecord.current();
                if (record == null) {
                    OUTSIDE_REQUESTS.increment();
                } else {
                    record.roundTrip();
                }
            }

            @Override
            public void livenessCheck() {
                // the pool's upkeep, even on a request's thread (Hikari checks an idle connection before lending it)
                ROUND_TRIPS.increment();
                OUTSIDE_REQUESTS.increment();
                RequestRecord record = RequestRecord.current();
                if (record != null) {
                    record.discardPending();
                }
            }
        });
    }

    public static long roundTrips() {
        return ROUND_TRIPS.sum();
    }

    public static long outsideRequests() {
        return OUTSIDE_REQUESTS.sum();
    }

    /** Sync, Query and FunctionCall messages: requests for a ReadyForQuery, pipelined or not. */
    public static long syncs() {
        return SYNCS.sum();
    }

    public static long flushes() {
        return FLUSHES.sum();
    }

    /** Why some connection could not be counted, or null when every connection was. */
    public static String unreadable() {
        return UNREADABLE.get();
    }
}
