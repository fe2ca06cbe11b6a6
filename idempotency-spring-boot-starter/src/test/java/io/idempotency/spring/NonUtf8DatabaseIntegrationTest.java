package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.boot.web.server.context.WebServerApplicationContext;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Import;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.Statement;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A PostgreSQL database in an encoding other than UTF8 (LATIN1 here, as an old cluster may have it) cannot store a
 * key read from the body that holds a character LATIN1 lacks. Such a request is refused as its key's fault, 400, not
 * answered 503 with an invitation to retry what will fail alike every time; keys the encoding holds work as usual.
 */
@Tag("container")
@ExtendWith(OutputCaptureExtension.class)
class NonUtf8DatabaseIntegrationTest {

    private static final AtomicInteger RUNS = new AtomicInteger();

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(TransfersController.class)
    static class Application {
    }

    @RestController
    static class TransfersController {
        @PostMapping("/transfers")
        @Idempotent(key = "#body['reference']")
        public String transfer(@RequestBody Map<String, Object> body) {
            return "transfer " + RUNS.incrementAndGet();
        }
    }

    @Test
    void aKeyTheDatabasesEncodingCannotHoldIsRefusedAsTheKeysFaultAndOthersWork(CapturedOutput output)
            throws Exception {
        TestPostgres.Database server = TestPostgres.newDatabase();
        String name = "t_latin1_" + UUID.randomUUID().toString().replace("-", "").substring(0, 12);
        try (Connection connection = DriverManager.getConnection(server.url(), server.user(), server.password());
             Statement statement = connection.createStatement()) {
            statement.execute("CREATE DATABASE " + name + " ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C'"
                    + " TEMPLATE template0");
        }
        try {
            // the same server and settings, in the new database, with the schema the URL names
            TestPostgres.Database latin1 = new TestPostgres.Database(
                    server.url().replaceFirst("^(jdbc:postgresql://[^/?]+/)[^?]*", "$1" + name), server.user(),
                    server.password(), server.schema());
            latin1.queryString("CREATE SCHEMA IF NOT EXISTS " + server.schema());
            assertThat(latin1.queryString("show server_encoding")).isEqualTo("LATIN1");

            try (ConfigurableApplicationContext context = new SpringApplicationBuilder(Application.class)
                    .web(WebApplicationType.SERVLET)
                    .properties(latin1.springPropertyValues().toArray(String[]::new))
                    .properties("server.port=0", "idempotency.sweeper.enabled=false")
                    .run()) {
                int before = RUNS.get();
                String unstorable = "转账-" + UUID.randomUUID();
                String storable = "virement-é-" + UUID.randomUUID();

                HttpResponse<String> refused = post(context, unstorable);
                HttpResponse<String> refusedAgain = post(context, unstorable);
                HttpResponse<String> first = post(context, storable);
                HttpResponse<String> replay = post(context, storable);

                assertThat(refused.statusCode()).as(refused.body()).isEqualTo(400);
                assertThat(refused.body()).contains("idempotency-key-malformed").contains("Retrying it will not help");
                assertThat(refused.headers().firstValue("Retry-After")).isEmpty();
                assertThat(refusedAgain.statusCode()).isEqualTo(400);
                assertThat(first.statusCode()).isEqualTo(200);
                assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
                assertThat(replay.body()).isEqualTo(first.body());
                assertThat(RUNS.get() - before).as("only the storable key's request ran, once").isOne();
                assertThat(latin1.queryLong("select count(*) from idempotency_keys")).isOne();
                // the operator is told once, without the key, which any client may send and the database quotes
                assertThat(output.getOut().split("the database cannot store the claim's caller, scope or key", -1))
                        .as("WARN lines").hasSize(2);
                assertThat(output.getOut()).contains("is its encoding UTF8").doesNotContain(unstorable);
            }
        } finally {
            try (Connection connection = DriverManager.getConnection(server.url(), server.user(), server.password());
                 Statement statement = connection.createStatement()) {
                statement.execute("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)");
            }
        }
    }

    private static HttpResponse<String> post(ConfigurableApplicationContext context, String reference)
            throws Exception {
        int port = ((WebServerApplicationContext) context).getWebServer().getPort();
        String body = "{\"reference\":\"" + reference + "\",\"amount\":\"10.00\"}";
        return HttpClient.newHttpClient().send(HttpRequest.newBuilder(URI.create("http://localhost:" + port
                        + "/transfers")).header("Content-Type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofString());
    }
}
