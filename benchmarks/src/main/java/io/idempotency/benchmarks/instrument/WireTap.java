package io.idempotency.benchmarks.instrument;

/**
 * What one database connection sends, and when it waits. A <em>round trip</em> is a turn of the conversation: the
 * client has written something and then reads, blocking until the server answers. Counting turns — not messages —
 * is what makes pipelining visible: pgjdbc sends its {@code BEGIN} (a simple Query) and the first statement's
 * extended-protocol batch in one write, then waits once. Not thread-safe: one tap per connection, used by the thread
 * that holds the connection.
 */
final class WireTap {

    /** Receives the turns. */
    interface TurnListener {
        /** The client wrote and now waits for the answer. */
        void roundTrip();

        /** The client sent only an empty query and now waits: a pool checking the connection, not the application. */
        void livenessCheck();
    }

    private final FrontendMessageParser parser;
    private final TurnListener turns;
    private boolean wroteSinceLastRead;

    WireTap(FrontendMessageParser.Listener messages, TurnListener turns) {
        this.parser = new FrontendMessageParser(messages);
        this.turns = turns;
    }

    /** The client wrote {@code length} bytes. */
    void wrote(byte[] bytes, int offset, int length) {
        if (length > 0) {
            wroteSinceLastRead = true;
            parser.accept(bytes, offset, length);
        }
    }

    /** The client is about to read from the server. */
    void reading() {
        if (wroteSinceLastRead) {
            wroteSinceLastRead = false;
            if (parser.endTurn()) {
                turns.livenessCheck();
            } else {
                turns.roundTrip();
            }
        }
    }
}
