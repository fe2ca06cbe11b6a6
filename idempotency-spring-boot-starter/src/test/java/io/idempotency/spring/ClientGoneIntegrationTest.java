package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.net.Socket;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The most common retry of all: the client (or a gateway in front of the service) stops waiting while the handler
 * runs, closes its connection and sends the request again with the same key. The first request goes on, commits and
 * finds no one to answer; its effects stay, once, and the retry gets its answer — the one waiting for it as well as
 * one sent after it ended.
 */
class ClientGoneIntegrationTest extends OrdersApplicationTest {

    /** {@code close}: the client closes its side (FIN); {@code reset}: it aborts the connection (RST). */
    @ParameterizedTest
    @ValueSource(strings = {"close", "reset"})
    void aClientThatStopsWaitingGetsTheAnswerOfItsFirstRequestOnRetry(String how) throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "client-gone-" + how + "-" + key;
        String body = "{\"note\":\"" + note + "\"}";

        try (Socket socket = new Socket("localhost", port)) {
            socket.getOutputStream().write(("POST /orders/slow?millis=1500 HTTP/1.1\r\nHost: localhost\r\n"
                    + "Content-Type: application/json\r\nIdempotency-Key: " + key + "\r\nContent-Length: "
                    + body.length() + "\r\n\r\n" + body).getBytes(StandardCharsets.ISO_8859_1));
            socket.getOutputStream().flush();
            awaitHandlerInItsTransaction();
            if (how.equals("reset")) {
                socket.setSoLinger(true, 0);
            }
        } // gone, before any answer

        // sent while the first request still runs: waits for it (idempotency.in-flight-wait, 2 s, is longer)
        HttpResponse<byte[]> waiting = post("/orders/slow?millis=1500", key, body);
        HttpResponse<byte[]> after = post("/orders/slow?millis=1500", key, body);

        for (HttpResponse<byte[]> retry : java.util.List.of(waiting, after)) {
            assertThat(retry.statusCode()).isEqualTo(201);
            assertThat(retry.headers().firstValue("Idempotent-Replayed")).hasValue("true");
            assertThat(new String(retry.body(), StandardCharsets.UTF_8)).contains("\"note\":\"" + note + "\"");
        }
        assertThat(after.body()).isEqualTo(waiting.body());
        assertThat(rows(note)).isEqualTo(1);
        assertThat(status(key)).isEqualTo("SUCCEEDED");
    }

    /**
     * Servlet code that streams to a client learns that the client went away from its writer's error: a write the
     * container could not send sets it. On an endpoint without {@code @Idempotent}, a POST reaches the handler through
     * the library's response (passing through), which must report the container's error as a GET's handler sees it.
     */
    @ParameterizedTest
    @ValueSource(strings = {"GET", "POST"})
    void aHandlerStreamingToAClientThatWentAwaySeesItThroughItsWriter(String method) throws Exception {
        String id = UUID.randomUUID().toString();
        java.util.concurrent.CompletableFuture<Boolean> ended = io.idempotency.spring.app.CaptureController.ticksEnded(id);

        try (Socket socket = new Socket("localhost", port)) {
            socket.setSoTimeout(10_000);
            socket.getOutputStream().write((method + " /capture/ticks?id=" + id + " HTTP/1.1\r\nHost: localhost\r\n"
                    + "Content-Length: 0\r\n\r\n").getBytes(StandardCharsets.ISO_8859_1));
            socket.getOutputStream().flush();
            java.io.InputStream in = socket.getInputStream();
            StringBuilder received = new StringBuilder();
            while (!received.toString().contains("tick")) {
                int b = in.read();
                assertThat(b).as("the answer so far: %s", received).isNotNegative();
                received.append((char) b);
            }
        } // gone while the handler still writes

        assertThat(ended.get(25, java.util.concurrent.TimeUnit.SECONDS))
                .as("the handler's writer reported the client gone").isTrue();
    }

    /**
     * A client that stops sending its body part way (it closes its side of the connection, or a proxy cut it) sent
     * no request to make idempotent: nothing is claimed or written, and the request sent whole runs. The handler reads
     * its body itself, so the library reads it first, to fingerprint it before the claim.
     */
    @Test
    void aBodyCutShortClaimsNothingAndTheWholeRequestRuns() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "cut-short-" + key;

        String answer;
        try (Socket socket = new Socket("localhost", port)) {
            socket.setSoTimeout(10_000);
            socket.getOutputStream().write(("POST /orders/streams HTTP/1.1\r\nHost: localhost\r\n"
                    + "Content-Type: text/plain\r\nIdempotency-Key: " + key + "\r\nContent-Length: "
                    + (note.length() + 100) + "\r\n\r\n" + note).getBytes(StandardCharsets.ISO_8859_1));
            socket.getOutputStream().flush();
            socket.shutdownOutput(); // the rest never comes
            answer = new String(socket.getInputStream().readAllBytes(), StandardCharsets.ISO_8859_1);
        }

        assertThat(answer).as("no success for a request that never arrived whole").doesNotStartWith("HTTP/1.1 2");
        assertThat(keyRows(key)).isZero();
        assertThat(rows(note)).isZero();

        HttpResponse<byte[]> whole = send(request("/orders/streams", note).setHeader("Content-Type", "text/plain")
                .header("Idempotency-Key", key).build());
        assertThat(whole.statusCode()).isEqualTo(201);
        assertThat(whole.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(rows(note)).isEqualTo(1);
    }
}
