package io.idempotency.spring;

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
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * PostgreSQL restarted under load: clients send payments-like requests back to back, each retrying its request with
 * the same key until it gets a final answer, while the database is shut down (a fast shutdown: every session is
 * ended wherever it is — in a claim, a handler's write, the stored answer, a commit, or idle in the pool) and started
 * again. Which of those moments a run catches is up to timing, and the test does not choose; what it asserts holds
 * for all of them: afterwards every request was kept exactly once, and every success a client was given for a key —
 * the first and its replay — is the same answer, naming the row that was kept. Nothing was answered 2xx that is not
 * there, and the clients did feel the restart (answers 409, 500 or 503 on the way, counted and printed).
 *
 * <p>The test restarts a server, so it cannot use the configured or shared one: it always runs a
 * {@link RestartablePostgres} of its own.
 */
class DatabaseRestartIntegrationTest {

    private static final int CLIENTS = 6;

    @TempDir
    Path dataDirectory;

    @Test
    void everyRequestIsKeptOnceAndEverySuccessIsTheSameAnswerAcrossARestart() throws Exception {
        try (RestartablePostgres postgres = new RestartablePostgres(dataDirectory);
             ConfigurableApplicationContext application = postgres.startApplication(CLIENTS)) {
            int httpPort = ((WebServerApplicationContext) application).getWebServer().getPort();
            HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
            AtomicBoolean loadOn = new AtomicBoolean(true);
            AtomicInteger failedAnswers = new AtomicInteger();
            Map<Integer, Integer> failures = new ConcurrentHashMap<>(); // status -> answers
            AtomicInteger keptBeforeTheirFirstSuccess = new AtomicInteger(); // a failed answer, then a replay
            Map<String, List<String>> successes = new ConcurrentHashMap<>(); // note -> every 2xx body given for it
            ExecutorService clients = Executors.newFixedThreadPool(CLIENTS);
            List<Future<?>> running = new ArrayList<>();
            for (int c = 0; c < CLIENTS; c++) {
                running.add(clients.submit(() -> {
                    while (loadOn.get()) {
                        String key = UUID.randomUUID().toString();
                        String note = "restart-" + key;
                        HttpRequest request = HttpRequest.newBuilder(URI.create("http://localhost:" + httpPort
                                        + "/orders")).timeout(Duration.ofSeconds(20))
                                .header("Content-Type", "application/json").header("Idempotency-Key", key)
                                .POST(HttpRequest.BodyPublishers.ofString("{\"note\":\"" + note + "\"}")).build();
                        // the client's retry loop: the same request until a success, then once more (a replay)
                        int successesForKey = 0;
                        long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
                        while (successesForKey < 2) {
                            assertThat(System.nanoTime() - deadline).as("no final answer for " + key).isNegative();
                            HttpResponse<String> answer = http.send(request, HttpResponse.BodyHandlers.ofString());
                            if (answer.statusCode() == 201) {
                                if (successesForKey == 0 && answer.headers().firstValue("Idempotent-Replayed")
                                        .isPresent()) {
                                    keptBeforeTheirFirstSuccess.incrementAndGet();
                                }
                                successes.computeIfAbsent(note, n -> new ArrayList<>()).add(answer.body());
                                successesForKey++;
                            } else {
                                // 503 (no connection, claim failed), 500 (commit failed or unknown), 409 (a claim of
                                // this key still held by a session the shutdown has not yet ended): retry
                                assertThat(answer.statusCode()).as(answer.body()).isIn(409, 500, 503);
                                failedAnswers.incrementAndGet();
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

            assertThat(failedAnswers.get()).as("the restart was felt by the clients").isPositive();
            try (Connection connection = DriverManager.getConnection(postgres.url());
                 Statement statement = connection.createStatement()) {
                for (Map.Entry<String, List<String>> kept : successes.entrySet()) {
                    List<Long> ids = RestartablePostgres.orderIds(statement, kept.getKey());
                    assertThat(ids).as("rows of " + kept.getKey()).hasSize(1);
                    assertThat(kept.getValue()).as("every success for " + kept.getKey() + " is the same answer")
                            .hasSize(2).allMatch(body -> body.equals(kept.getValue().get(0)))
                            .allMatch(body -> body.contains("\"id\":" + ids.get(0) + ","));
                }
                try (ResultSet rs = statement.executeQuery("select count(*), count(distinct note) from orders")) {
                    rs.next();
                    assertThat(rs.getLong(1)).as("no row without a success, none twice").isEqualTo(successes.size())
                            .isEqualTo(rs.getLong(2));
                }
            }
            System.out.println("database restart: " + successes.size() + " requests kept; on the way, answers by"
                    + " status " + failures + "; requests first answered with a replay: "
                    + keptBeforeTheirFirstSuccess.get());
        }
    }
}
