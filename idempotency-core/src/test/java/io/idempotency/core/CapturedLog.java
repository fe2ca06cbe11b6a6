package io.idempotency.core;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.logging.Logger;

/**
 * What the library's class logs through {@link System.Logger} (which writes to java.util.logging here) while this is
 * open: {@code try (CapturedLog log = CapturedLog.of(Leases.class)) { …; assertThat(log.records()) … }}.
 */
final class CapturedLog implements AutoCloseable {

    private final Logger logger;
    private final List<LogRecord> records = new CopyOnWriteArrayList<>();
    private final Handler handler = new Handler() {
        @Override
        public void publish(LogRecord record) {
            records.add(record);
        }

        @Override
        public void flush() {
        }

        @Override
        public void close() {
        }
    };

    private CapturedLog(Class<?> source) {
        this.logger = Logger.getLogger(source.getName());
        logger.addHandler(handler);
    }

    static CapturedLog of(Class<?> source) {
        return new CapturedLog(source);
    }

    /** The records logged since this was opened, in order. */
    List<LogRecord> records() {
        return records;
    }

    @Override
    public void close() {
        logger.removeHandler(handler);
    }
}
