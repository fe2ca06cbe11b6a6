package io.idempotency.spring;

import io.idempotency.spring.app.FakeGateway;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.springframework.boot.web.server.context.WebServerApplicationContext;
import org.springframework.context.ConfigurableApplicationContext;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * PostgreSQL restarted under load on an intent-first endpoint: clients charge through the gateway, each retrying its
 * request with the same key until it gets a final answer, while the database is shut down (every session ended
 * wherever it is: in a claim, its commit, the handler's write after the gateway call, the stored result, a lease
 * renewal, a release) and started again. Whatever moment a request was caught at, afterwards each request got a
 * success, every success for a key is the same answer, the gateway charged each key once and every answer names that
 * charge, a local row is kept at most once (none when the resolver completed a stale claim), and no claim is left
 * {@code PROCESSING}.
 *
 * <p>Like {@link DatabaseRestartIntegrationTest}, it runs a {@link RestartablePostgres} of its own.
 */
class IntentFirstDatabaseRestartIntegrationTest {

    private static final int CLIENTS = 6;
    private static final Pattern CHARGE = Pattern.compile("\"charge\":(\\d+)");
    private static final Pattern ID = Pattern.compile("\"id\":(\\d+)");

    @TempDir
    Path dataDirectory;

    @Test
    void everyChargeIsMadeOnceAndEverySuccessIsTheSameAnswerAcrossARestart() throws Exception {
        try (RestartablePostgres postgres = new RestartablePostgres(dataDirectory);
             ConfigurableApplicationContext application = postgres.startApplication(CLIENTS)) {
            FakeGateway gateway = application.getBean(FakeGateway.class);
            int httpPort = ((WebServerApplicationContext) application).getWebServer().getPort();
            HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
            AtomicBoolean loadOn = new AtomicBoolean(true);
            Map<Integer, Integer> failures = new ConcurrentHashMap<>(); // status -> answers
            Map<String, List<String>> successes = new ConcurrentHashMap<>(); // note -> every 2xx body given for it
            ExecutorService clients = Executors.newFixedThreadPool(CLIENTS);
            List<Future<?>> running = new ArrayList<>();
            for (int c = 0; c < CLIENTS; c++) {
                running.add(clients.submit(() -> {
                    while (loadOn.get()) {
                        String key = UUID.randomUUID().toString();
                        String note = "intent-restart-" + key;
                        // the handler sleeps after its gateway call and local write (a header, not fingerprinted):
                        // the shutdown catches some requests there
                        long sleep = ThreadLocalRandom.current().nextLong(0, 60);
                        HttpRequest request = HttpRequest.newBuilder(URI.create("http://localhost:" + httpPort
                                        + "/intent/charges")).timeout(Duration.ofSeconds(20))
                                .header("Content-Type", "application/json").header("Idempotency-Key", key)
                                .header("X-Sleep-Ms", Long.toString(sleep))
                                .POST(HttpRequest.BodyPublishers.ofString("{\"note\":\"" + note + "\"}")).build();
                        int successesForKey = 0;
                        long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
                        while (successesForKey < 2) {
                            assertThat(System.nanoTime() - deadline).as("no final answer for " + key).isNegative();
                            HttpResponse<String> answer = http.send(request, HttpResponse.BodyHandlers.ofString());
                            if (answer.statusCode() == 201) {
                                successes.computeIfAbsent(note, n -> new ArrayList<>()).add(answer.body());
                                successesForKey++;
                            } else {
                                // 503 (claim failed, or the handler could not start), 500 (the result could not be
                                // committed, or the handler's write failed), 409 (a claim under its lease): retry
                                assertThat(answer.statusCode()).as(answer.body()).isIn(409, 500, 503);
                                failures.merge(answer.statusCode(), 1, Integer::sum);
                                Thread.sleep(50);
                            }
                        }
                    }
                    return null;
                }));
            }
            try {
                postgres.restartUnderLoad();
                loadOn.set(false);
                for (Future<?> client : running) {
                    client.get();
                }
            } finally {
                loadOn.set(false);
                clients.shutdownNow();
            }

            assertThat(failures).as("the restart was felt by the clients").isNotEmpty();
            List<String> charges = new ArrayList<>();
            try (Connection connection = DriverManager.getConnection(postgres.url());
                 Statement statement = connection.createStatement()) {
                for (Map.Entry<String, List<String>> kept : successes.entrySet()) {
                    List<String> bodies = kept.getValue();
                    assertThat(bodies).as("every success for " + kept.getKey() + " is the same answer")
                            .hasSize(2).allMatch(body -> body.equals(bodies.get(0)));
                    Matcher charge = CHARGE.matcher(bodies.get(0));
                    assertThat(charge.find()).as(bodies.get(0)).isTrue();
                    charges.add(charge.group(1));
                    List<Long> ids = RestartablePostgres.orderIds(statement, kept.getKey());
                    Matcher id = ID.matcher(bodies.get(0));
                    if (id.find()) {
                        assertThat(ids).as("rows of " + kept.getKey()).containsExactly(Long.parseLong(id.group(1)));
                    } else {
                        assertThat(bodies.get(0)).contains("\"resolved\":true");
                        assertThat(ids).as("rows of " + kept.getKey() + ", completed by the resolver").isEmpty();
                    }
                }
                assertThat(charges).as("one charge per request, none shared").doesNotHaveDuplicates();
                assertThat(gateway.charges()).as("no charge without a success").isEqualTo(successes.size());
                try (ResultSet rs = statement.executeQuery("select status, count(*) from idempotency_keys"
                        + " group by status order by status")) {
                    Map<String, Long> statuses = new ConcurrentHashMap<>();
                    while (rs.next()) {
                        statuses.put(rs.getString(1), rs.getLong(2));
                    }
                    assertThat(statuses).as("every claim ended").containsOnlyKeys("SUCCEEDED")
                            .containsEntry("SUCCEEDED", (long) successes.size());
                }
            }
            System.out.println("intent-first database restart: " + successes.size() + " requests kept; on the way,"
                    + " answers by status " + failures + "; gateway calls " + gateway.calls());
        }
    }
}
