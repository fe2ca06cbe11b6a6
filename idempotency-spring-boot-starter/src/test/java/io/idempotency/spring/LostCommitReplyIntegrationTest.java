package io.idempotency.spring;

import io.idempotency.spring.app.FakeGateway;
import io.idempotency.spring.app.TestApplication;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

import java.io.DataInputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The connection is lost while a transaction commits, after PostgreSQL has committed it but before the application
 * heard so: the application's connections go through a proxy that drops the connection instead of passing
 * PostgreSQL's reply to a COMMIT on. For an intent-first claim the handler never ran, so the key must not stay claimed
 * for the lease; for a request's effects the client must not be told that nothing was kept.
 */
@SpringBootTest(classes = TestApplication.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = {"idempotency.in-flight-wait=300ms", "idempotency.sweeper.enabled=false"})
@org.junit.jupiter.api.extension.ExtendWith(org.springframework.boot.test.system.OutputCaptureExtension.class)
@Tag("container")
class LostCommitReplyIntegrationTest {

    static final TestPostgres.Database DATABASE = TestDatabases.withOrders();
    static final CommitReplyDropper PROXY = new CommitReplyDropper(DATABASE.url());

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
        registry.add("spring.datasource.url", PROXY::url);
    }

    @AfterAll
    static void stopProxy() throws IOException {
        PROXY.close();
    }

    @LocalServerPort
    int port;

    @Autowired
    FakeGateway gateway;

    final HttpClient http = HttpClient.newHttpClient();

    @Test
    void anIntentWhoseCommitReplyWasLostDoesNotHoldTheKeyForTheLease() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "lost-commit-reply-" + key;
        long callsBefore = gateway.calls();

        int droppedBefore = PROXY.dropped();
        PROXY.dropNextCommitReply();
        HttpResponse<String> lost = charge(key, note);
        String left = DATABASE.queryString("select status from idempotency_keys where idempotency_key = '"
                + key + "'");
        HttpResponse<String> retry = charge(key, note);

        assertThat(lost.statusCode()).as("the request was not run").isEqualTo(503);
        assertThat(lost.body()).contains("idempotency-store-unavailable");
        assertThat(PROXY.dropped() - droppedBefore)
                .as("PostgreSQL committed the intent (its COMMIT reply was dropped): the application did not hear so")
                .isEqualTo(1);
        assertThat(left).as("the committed intent was released: nothing ran under it").isNull();
        assertThat(retry.statusCode()).as("nothing ran under the claim: not 'in progress' for a 10 s lease")
                .isEqualTo(201);
        assertThat(gateway.calls() - callsBefore).as("the handler of the lost one never ran").isEqualTo(1);
        assertThat(DATABASE.queryLong("select count(*) from orders where note = '" + note + "'")).isEqualTo(1);
    }

    @Test
    void aRequestWhoseCommitReplyWasLostIsNotToldThatNothingWasKept(
            org.springframework.boot.test.system.CapturedOutput output) throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "lost-effects-reply-" + key;

        PROXY.dropNextCommitReply();
        HttpResponse<String> lost = post("/orders", key, note);
        HttpResponse<String> retry = post("/orders", key, note);

        assertThat(lost.statusCode()).isEqualTo(500);
        assertThat(lost.headers().firstValue("Content-Type")).hasValue("application/problem+json");
        assertThat(lost.body()).contains("idempotency-commit-failed").contains("unknown")
                .doesNotContain("none were kept");
        assertThat(DATABASE.queryLong("select count(*) from orders where note = '" + note + "'"))
                .as("PostgreSQL committed what the application did not hear about").isEqualTo(1);
        assertThat(retry.statusCode()).isEqualTo(201);
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(output).as("the operator's line does not say it failed either")
                .contains("could not confirm its commit (whether it committed is unknown)")
                .doesNotContain("failed to commit");
        // whether it committed is for the operator to find out, in the table or with the third party: by the claim
        assertThat(output.getOut().lines().filter(line -> line.contains("could not confirm its commit")))
                .singleElement().asString().contains("caller '' on 'POST /orders' with key '" + key + "'");
    }

    private HttpResponse<String> charge(String key, String note) throws IOException, InterruptedException {
        return post("/intent/long-lease", key, note);
    }

    private HttpResponse<String> post(String path, String key, String note) throws IOException, InterruptedException {
        return http.send(HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                .header("Content-Type", "application/json")
                .header("Idempotency-Key", key)
                .POST(HttpRequest.BodyPublishers.ofString("{\"note\":\"" + note + "\"}")).build(),
                HttpResponse.BodyHandlers.ofString());
    }

    /**
     * A TCP proxy in front of the PostgreSQL server that, once armed, closes the connection that next receives the
     * server's CommandComplete for a COMMIT, instead of passing it on. Needs connections without SSL or GSS encryption,
     * so that the server's bytes are messages from the start.
     */
    static final class CommitReplyDropper implements AutoCloseable {

        private static final Pattern HOST = Pattern.compile("^jdbc:postgresql://([^/:]+)(?::(\\d+))?/");

        private final ServerSocket server;
        private final String host;
        private final int port;
        private final String url;
        private final AtomicBoolean armed = new AtomicBoolean();
        private final AtomicInteger dropped = new AtomicInteger();

        CommitReplyDropper(String targetUrl) {
            Matcher matcher = HOST.matcher(targetUrl);
            if (!matcher.find()) {
                throw new IllegalArgumentException("not a PostgreSQL URL with a host: " + targetUrl);
            }
            this.host = matcher.group(1);
            this.port = matcher.group(2) == null ? 5432 : Integer.parseInt(matcher.group(2));
            try {
                this.server = new ServerSocket(0);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
            this.url = matcher.replaceFirst("jdbc:postgresql://127.0.0.1:" + server.getLocalPort() + "/")
                    + "&sslmode=disable&gssEncMode=disable";
            Thread acceptor = new Thread(this::accept, "commit-reply-dropper");
            acceptor.setDaemon(true);
            acceptor.start();
        }

        String url() {
            return url;
        }

        void dropNextCommitReply() {
            armed.set(true);
        }

        /** How many COMMIT replies were dropped: each was a transaction PostgreSQL had committed. */
        int dropped() {
            return dropped.get();
        }

        private void accept() {
            while (!server.isClosed()) {
                try {
                    Socket client = server.accept();
                    Socket upstream = new Socket(host, port);
                    daemon(() -> copy(client, upstream));
                    daemon(() -> relayReplies(upstream, client));
                } catch (IOException e) {
                    // closed
                }
            }
        }

        private static void daemon(Runnable task) {
            Thread thread = new Thread(task, "commit-reply-dropper-pump");
            thread.setDaemon(true);
            thread.start();
        }

        private static void copy(Socket from, Socket to) {
            try (from; to) {
                from.getInputStream().transferTo(to.getOutputStream());
            } catch (IOException e) {
                // one side went away
            }
        }

        /** Passes the server's messages on, one at a time, and drops the connection at an armed COMMIT reply. */
        private void relayReplies(Socket from, Socket to) {
            try (from; to) {
                DataInputStream in = new DataInputStream(from.getInputStream());
                OutputStream out = to.getOutputStream();
                while (true) {
                    int type = in.read();
                    if (type < 0) {
                        return;
                    }
                    int length = in.readInt();
                    byte[] payload = in.readNBytes(length - 4);
                    if (type == 'C' && new String(payload, StandardCharsets.US_ASCII).startsWith("COMMIT\0")
                            && armed.compareAndSet(true, false)) {
                        dropped.incrementAndGet();
                        return; // committed on the server; the application never hears of it
                    }
                    out.write(type);
                    out.write(new byte[] {(byte) (length >>> 24), (byte) (length >>> 16), (byte) (length >>> 8),
                            (byte) length});
                    out.write(payload);
                    if (in.available() == 0) {
                        out.flush();
                    }
                }
            } catch (IOException e) {
                // one side went away
            }
        }

        @Override
        public void close() throws IOException {
            server.close();
        }
    }
}
