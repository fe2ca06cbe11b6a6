package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.web.server.context.WebServerApplicationContext;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Import;
import org.springframework.core.io.InputStreamResource;
import org.springframework.core.io.Resource;
import org.springframework.http.HttpStatus;
import org.springframework.http.MediaType;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.stereotype.Controller;
import org.springframework.web.bind.annotation.ControllerAdvice;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.ResponseStatus;
import org.springframework.web.servlet.View;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.SequenceInputStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * An {@code IOException} raised while the handler's answer is written (a stream the answer copies fails half-way), and
 * resolved by an exception handler to a view: Spring MVC then notes the exception in the servlet error attribute
 * alone, as the container notes a client that went away, and only the library's own exception resolver, first in
 * the chain, tells the two apart. It is a failure of the answer, not of the client: the handler's writes are rolled
 * back and nothing is stored (not even the refusal, 400, that the exception handler answers with, which a refusal
 * of the handler's own would be), so that the retry runs again, as with any other exception handled after the
 * handler returned.
 */
@Tag("container")
class IOExceptionResolvedToAViewIntegrationTest {

    private static final AtomicInteger RUNS = new AtomicInteger();
    /** The exports whose answer fails as it is copied: the first attempt of each. */
    private static final java.util.Set<String> FAILED_ONCE = java.util.concurrent.ConcurrentHashMap.newKeySet();

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import({ExportsController.class, ExportFailures.class})
    static class Application {
        /** The page the exception handler names, found by Spring Boot's BeanNameViewResolver. */
        @Bean("export-failed")
        View exportFailed() {
            return new View() {
                @Override
                public String getContentType() {
                    return MediaType.TEXT_PLAIN_VALUE; // what content negotiation picks it by
                }

                @Override
                public void render(java.util.Map<String, ?> model, jakarta.servlet.http.HttpServletRequest request,
                                   jakarta.servlet.http.HttpServletResponse response) throws IOException {
                    response.setContentType(MediaType.TEXT_PLAIN_VALUE);
                    // the stream: the failed answer's converter took it already
                    response.getOutputStream().write("the export failed".getBytes(StandardCharsets.UTF_8));
                }
            };
        }
    }

    @Controller
    static class ExportsController {
        private final JdbcClient jdbc;

        ExportsController(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        @PostMapping("/exports")
        @Idempotent
        public ResponseEntity<Resource> export(@RequestBody String name) {
            RUNS.incrementAndGet();
            jdbc.sql("insert into exports (name) values (?)").param(name).update();
            InputStream content = new ByteArrayInputStream(("export " + name + "\n").repeat(100)
                    .getBytes(StandardCharsets.UTF_8));
            if (FAILED_ONCE.add(name)) {
                // the storage the export is streamed from fails half-way
                content = new SequenceInputStream(content, new InputStream() {
                    @Override
                    public int read() throws IOException {
                        throw new IOException("the export's storage went away");
                    }
                });
            }
            return ResponseEntity.status(HttpStatus.CREATED).contentType(MediaType.TEXT_PLAIN)
                    .body(new InputStreamResource(content));
        }
    }

    @ControllerAdvice
    static class ExportFailures {
        @ExceptionHandler(IOException.class)
        @ResponseStatus(HttpStatus.BAD_REQUEST) // a status that is stored, as a refusal
        public String failed() {
            return "export-failed";
        }
    }

    @Test
    void theHandlersWritesAreRolledBackAndTheRetryRunsAgain() throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        database.queryString("create table exports (id bigserial primary key, name text not null)");
        try (ConfigurableApplicationContext context = new SpringApplicationBuilder(Application.class)
                .web(WebApplicationType.SERVLET)
                .properties(database.springPropertyValues().toArray(String[]::new))
                .properties("server.port=0", "idempotency.sweeper.enabled=false")
                .run()) {
            int before = RUNS.get();
            String name = "ledger-" + UUID.randomUUID();
            String key = UUID.randomUUID().toString();

            HttpResponse<String> failed = post(context, key, name);

            assertThat(failed.body()).contains("the export failed");
            assertThat(database.queryLong("select count(*) from exports where name = '" + name + "'"))
                    .as("the handler's write, whose answer failed").isZero();
            assertThat(database.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key
                    + "'")).as("nothing stored for the failed answer").isZero();

            HttpResponse<String> retry = post(context, key, name);

            assertThat(retry.statusCode()).as(retry.body()).isEqualTo(201);
            assertThat(retry.headers().firstValue("Idempotent-Replayed")).as("run again, not replayed").isEmpty();
            assertThat(retry.body()).startsWith("export " + name);
            assertThat(RUNS.get() - before).isEqualTo(2);
            assertThat(database.queryLong("select count(*) from exports where name = '" + name + "'")).isOne();
        }
    }

    private static HttpResponse<String> post(ConfigurableApplicationContext context, String key, String name)
            throws Exception {
        int port = ((WebServerApplicationContext) context).getWebServer().getPort();
        return HttpClient.newHttpClient().send(HttpRequest.newBuilder(URI.create("http://localhost:" + port
                        + "/exports")).header("Idempotency-Key", key).header("Content-Type", "text/plain")
                .POST(HttpRequest.BodyPublishers.ofString(name)).build(), HttpResponse.BodyHandlers.ofString());
    }
}
