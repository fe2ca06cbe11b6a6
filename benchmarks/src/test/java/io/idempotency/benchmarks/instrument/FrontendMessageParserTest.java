package io.idempotency.benchmarks.instrument;

import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

class FrontendMessageParserTest {

    private final List<String> events = new ArrayList<>();
    private final FrontendMessageParser.Listener listener = new FrontendMessageParser.Listener() {
        @Override
        public void readyForQueryRequested(char kind) {
            events.add("ready? " + kind);
        }

        @Override
        public void flush() {
            events.add("flush");
        }

        @Override
        public boolean wantsStatements() {
            return true;
        }

        @Override
        public void statement(String sql) {
            events.add(sql);
        }

        @Override
        public void message(char type) {
        }

        @Override
        public void described(String sql) {
            events.add("describe " + sql);
        }

        @Override
        public void unreadable(String reason) {
            events.add("unreadable");
        }
    };
    private final FrontendMessageParser parser = new FrontendMessageParser(listener);
    private final WireTap.TurnListener turns = new WireTap.TurnListener() {
        @Override
        public void roundTrip() {
            events.add("round trip");
        }

        @Override
        public void livenessCheck() {
            events.add("liveness check");
        }
    };

    @Test
    void readsStatementsAndSyncsHoweverTheBytesAreSplit() {
        ByteArrayOutputStream wire = new ByteArrayOutputStream();
        wire.writeBytes(startup());
        wire.writeBytes(message('P', cstring("S_1"), cstring("INSERT INTO t VALUES ($1)"), new byte[2]));
        wire.writeBytes(message('P', cstring(""), cstring("BEGIN"), new byte[2]));
        wire.writeBytes(message('B', cstring(""), cstring(""), new byte[6]));
        wire.writeBytes(message('E', cstring(""), new byte[4]));
        wire.writeBytes(message('B', cstring(""), cstring("S_1"), new byte[10]));
        wire.writeBytes(message('E', cstring(""), new byte[4]));
        wire.writeBytes(message('S'));
        wire.writeBytes(message('Q', cstring("SHOW TRANSACTION ISOLATION LEVEL")));
        wire.writeBytes(message('B', cstring(""), cstring("S_1"), new byte[10]));
        wire.writeBytes(message('S'));
        byte[] bytes = wire.toByteArray();

        for (int i = 0; i < bytes.length; i += 3) { // writes that cut messages anywhere
            parser.accept(bytes, i, Math.min(3, bytes.length - i));
        }

        assertThat(events).containsExactly("BEGIN", "INSERT INTO t VALUES ($1)", "ready? S",
                "SHOW TRANSACTION ISOLATION LEVEL", "ready? Q", "INSERT INTO t VALUES ($1)", "ready? S");
    }

    @Test
    void aRoundTripIsAWriteFollowedByARead() {
        WireTap tap = new WireTap(listener, turns);
        byte[] startup = startup();
        tap.wrote(startup, 0, startup.length);
        tap.reading();
        tap.reading(); // the authentication answer arrives in two reads: still one round trip
        ByteArrayOutputStream pipelined = new ByteArrayOutputStream(); // pgjdbc's BEGIN and first statement
        pipelined.writeBytes(message('Q', cstring("BEGIN")));
        pipelined.writeBytes(message('P', cstring(""), cstring("SELECT 1"), new byte[2]));
        pipelined.writeBytes(message('B', cstring(""), cstring(""), new byte[6]));
        pipelined.writeBytes(message('S'));
        byte[] bytes = pipelined.toByteArray();
        tap.wrote(bytes, 0, 7);
        tap.wrote(bytes, 7, bytes.length - 7);
        tap.reading();

        assertThat(events).containsExactly("round trip", "BEGIN", "ready? Q", "SELECT 1", "ready? S", "round trip");
    }

    @Test
    void aTurnOfOneEmptyQueryIsThePoolCheckingTheConnection() { // Connection.isValid(), e.g. by Hikari before lending
        WireTap tap = new WireTap(listener, turns);
        byte[] startup = startup();
        tap.wrote(startup, 0, startup.length);
        tap.reading();
        byte[] check = message('Q', cstring(""));
        tap.wrote(check, 0, 3);
        tap.wrote(check, 3, check.length - 3);
        tap.reading();
        byte[] begin = message('Q', cstring("BEGIN"));
        tap.wrote(begin, 0, begin.length);
        tap.reading();
        ByteArrayOutputStream both = new ByteArrayOutputStream(); // an empty query among others is not a check
        both.writeBytes(message('Q', cstring("")));
        both.writeBytes(message('Q', cstring("COMMIT")));
        tap.wrote(both.toByteArray(), 0, both.size());
        tap.reading();

        assertThat(events).containsExactly("round trip", "", "ready? Q", "liveness check", "BEGIN", "ready? Q",
                "round trip", "", "ready? Q", "COMMIT", "ready? Q", "round trip");
    }

    @Test
    void reportsAnEncryptionRequestAsUnreadable() {
        parser.accept(ByteBuffer.allocate(8).putInt(8).putInt(80877103).array(), 0, 8);

        assertThat(events).containsExactly("unreadable");
    }

    private static byte[] startup() {
        byte[] parameters = cstring("user\0postgres\0");
        return ByteBuffer.allocate(8 + parameters.length).putInt(8 + parameters.length).putInt(3 << 16)
                .put(parameters).array();
    }

    private static byte[] message(char type, byte[]... parts) {
        int length = 4;
        for (byte[] part : parts) {
            length += part.length;
        }
        ByteBuffer buffer = ByteBuffer.allocate(1 + length).put((byte) type).putInt(length);
        for (byte[] part : parts) {
            buffer.put(part);
        }
        return buffer.array();
    }

    private static byte[] cstring(String text) {
        byte[] bytes = text.getBytes(StandardCharsets.UTF_8);
        byte[] withNul = new byte[bytes.length + 1];
        System.arraycopy(bytes, 0, withNul, 0, bytes.length);
        return withNul;
    }
}
