package io.idempotency.benchmarks.instrument;

import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;

/**
 * Reads the bytes a PostgreSQL client sends (the frontend side of protocol 3.0), however they are split into writes,
 * and reports what they carry:
 *
 * <ul>
 *   <li>the statement each message executes: a Bind names a statement whose SQL text comes from the Parse that
 *       prepared it on this connection; a simple Query carries its text — when the listener asks for them;</li>
 *   <li>the messages that ask the server for a ReadyForQuery: {@code S} Sync (end of an extended-protocol batch),
 *       {@code Q} Query, {@code F} FunctionCall; and {@code H} Flush.</li>
 * </ul>
 *
 * These messages are <em>not</em> round trips by themselves: pgjdbc sends its implicit {@code BEGIN} as a simple
 * Query and, without waiting, the first statement's batch and its Sync after it. A round trip is the client waiting
 * for an answer, which {@link WireTap} sees on the socket. The startup phase (untyped messages: StartupMessage,
 * SSLRequest, GSSENCRequest, CancelRequest) is skipped; an SSL or GSS encryption request makes the rest of the stream
 * unreadable, so the parser then reports {@link Listener#unreadable} once and stops. Not thread-safe: one parser per
 * connection.
 */
public final class FrontendMessageParser {

    /** Receives what the parser finds, on the thread that writes to the connection. */
    public interface Listener {

        /** A message the server answers with ReadyForQuery: {@code 'S'} Sync, {@code 'Q'} Query, {@code 'F'} FunctionCall. */
        void readyForQueryRequested(char kind);

        /** {@code 'H'} Flush: the client may wait for answers without a Sync. */
        void flush();

        /** Whether {@link #statement} should be called (it costs a string per executed statement). */
        boolean wantsStatements();

        /** A statement the client sent for execution (a Bind, or the text of a Query). */
        void statement(String sql);

        /** A statement the client asked the server to describe (parameter and result types), e.g. for
         *  {@code PreparedStatement.getParameterMetaData()}. */
        void described(String sql);

        /** Every message's type letter, when {@link #wantsStatements()} (for traces). */
        void message(char type);

        /** The stream cannot be parsed (encryption was requested); nothing more is reported. */
        void unreadable(String reason);
    }

    private static final int SSL_REQUEST = 80877103;
    private static final int GSSENC_REQUEST = 80877104;
    private static final int CANCEL_REQUEST = 80877102;
    private static final int PROTOCOL_3 = 3 << 16;
    private static final int MAX_KEPT_TEXT = 64 * 1024; // SQL text beyond this is cut (never the case here)
    private static final int MAX_KEPT_BIND = 1024;      // enough for the portal and statement names

    private final Listener listener;
    private final Map<String, String> preparedStatements = new HashMap<>();
    private String unnamedStatement = "";

    private boolean startupDone;
    private boolean unreadable;
    private final byte[] header = new byte[5];
    private int headerFill;
    private int headerSize;     // 4 during startup (length only), 5 afterwards (type + length)
    private char type;
    private int remaining;      // body bytes of the current message still to come
    private byte[] body;        // kept prefix of the body, or null when the body is skipped
    private int bodyFill;
    private int messagesInTurn;     // messages since the last endTurn()
    private boolean emptyQueryInTurn;

    public FrontendMessageParser(Listener listener) {
        this.listener = listener;
        this.headerSize = 4;
    }

    /** Feeds bytes the client wrote, in order. */
    public void accept(byte[] bytes, int offset, int length) {
        int position = offset;
        int end = offset + length;
        while (position < end && !unreadable) {
            if (remaining == 0 && headerFill < headerSize) {
                header[headerFill++] = bytes[position++];
                if (headerFill == headerSize) {
                    startMessage();
                }
                continue;
            }
            int chunk = Math.min(remaining, end - position);
            if (body != null && bodyFill < body.length) {
                int kept = Math.min(chunk, body.length - bodyFill);
                System.arraycopy(bytes, position, body, bodyFill, kept);
                bodyFill += kept;
            }
            position += chunk;
            remaining -= chunk;
            if (remaining == 0) {
                endMessage();
            }
        }
    }

    /** Feeds one byte. */
    public void accept(int b) {
        accept(new byte[]{(byte) b}, 0, 1);
    }

    private void startMessage() {
        int lengthOffset = headerSize - 4;
        int length = ((header[lengthOffset] & 0xFF) << 24) | ((header[lengthOffset + 1] & 0xFF) << 16)
                | ((header[lengthOffset + 2] & 0xFF) << 8) | (header[lengthOffset + 3] & 0xFF);
        type = startupDone ? (char) (header[0] & 0xFF) : 0;
        remaining = length - 4;
        if (remaining < 0) {
            markUnreadable("a message length of " + length);
            return;
        }
        int keep = switch (type) {
            case 0 -> Math.min(remaining, 4);  // startup: the request code
            case 'P', 'Q' -> Math.min(remaining, MAX_KEPT_TEXT);
            case 'B', 'D' -> Math.min(remaining, MAX_KEPT_BIND);
            default -> 0;
        };
        body = keep > 0 ? new byte[keep] : null;
        bodyFill = 0;
        if (remaining == 0) {
            endMessage();
        }
    }

    private void endMessage() {
        headerFill = 0;
        if (!startupDone) {
            endStartupMessage();
        } else {
            messagesInTurn++;
            if (listener.wantsStatements()) {
                listener.message(type);
            }
            switch (type) {
                case 'S' -> listener.readyForQueryRequested('S');
                case 'Q' -> {
                    if (bodyFill > 0 && body[0] == 0) {
                        emptyQueryInTurn = true;
                    }
                    if (listener.wantsStatements()) {
                        listener.statement(cString(body, bodyFill, 0));
                    }
                    listener.readyForQueryRequested('Q');
                }
                case 'F' -> listener.readyForQueryRequested('F');
                case 'H' -> listener.flush();
                case 'P' -> {
                    String name = cString(body, bodyFill, 0);
                    String sql = cString(body, bodyFill, name.getBytes(StandardCharsets.UTF_8).length + 1);
                    if (name.isEmpty()) {
                        unnamedStatement = sql;
                    } else {
                        preparedStatements.put(name, sql);
                    }
                }
                case 'B' -> {
                    if (listener.wantsStatements()) {
                        String portal = cString(body, bodyFill, 0);
                        String name = cString(body, bodyFill, portal.getBytes(StandardCharsets.UTF_8).length + 1);
                        listener.statement(sqlOf(name));
                    }
                }
                case 'D' -> {
                    if (listener.wantsStatements() && bodyFill > 0 && body[0] == 'S') {
                        listener.described(sqlOf(cString(body, bodyFill, 1)));
                    }
                }
                default -> {
                }
            }
        }
        body = null;
    }

    /**
     * Ends a turn of the conversation (the client now waits for the answer) and tells whether all it sent since the
     * last turn was one empty simple Query: pgjdbc's {@code Connection.isValid()}, which a pool calls to check a
     * connection before lending it, not a statement of the application.
     */
    public boolean endTurn() {
        boolean livenessCheck = messagesInTurn == 1 && emptyQueryInTurn;
        messagesInTurn = 0;
        emptyQueryInTurn = false;
        return livenessCheck;
    }

    private String sqlOf(String statementName) {
        return statementName.isEmpty() ? unnamedStatement
                : preparedStatements.getOrDefault(statementName, "<statement " + statementName + ">");
    }

    private void endStartupMessage() {
        int code = bodyFill < 4 ? -1 : ((body[0] & 0xFF) << 24) | ((body[1] & 0xFF) << 16)
                | ((body[2] & 0xFF) << 8) | (body[3] & 0xFF);
        if (code == SSL_REQUEST || code == GSSENC_REQUEST) {
            markUnreadable("the client asked for an encrypted connection (use sslmode=disable&gssEncMode=disable)");
        } else if (code == CANCEL_REQUEST) {
            // a cancel connection carries nothing else
        } else if ((code >>> 16) == (PROTOCOL_3 >>> 16)) {
            startupDone = true;
            headerSize = 5;
        } else {
            markUnreadable("an unknown startup request code " + code);
        }
    }

    private void markUnreadable(String reason) {
        unreadable = true;
        listener.unreadable(reason);
    }

    private static String cString(byte[] bytes, int length, int from) {
        if (bytes == null || from >= length) {
            return "";
        }
        int end = from;
        while (end < length && bytes[end] != 0) {
            end++;
        }
        return new String(bytes, from, end - from, StandardCharsets.UTF_8);
    }
}
