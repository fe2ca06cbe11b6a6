package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import jakarta.servlet.http.HttpServletRequest;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Import;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.bind.annotation.PutMapping;
import org.springframework.web.bind.annotation.RestController;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A PUT form read as sent by its handler, with Spring's {@code FormContentFilter} (which would read it first) switched
 * off: Jetty parses PUT forms too, from its own stream, when the library asks for the parameters to fingerprint the
 * request, so the library keeps the form's bytes for the handler first, as it does for a POST. The handler gets every
 * byte with a key as without, on Tomcat (which leaves PUT forms in the body) and on Jetty.
 */
@Tag("container")
@SpringBootTest(classes = PutFormBodyIntegrationTest.App.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = "spring.mvc.formcontent.filter.enabled=false")
class PutFormBodyIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestDatabases.withOrders();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(CallbacksController.class)
    static class App {
    }

    @RestController
    public static class CallbacksController {

        @PutMapping(path = "/put-callbacks", consumes = "application/x-www-form-urlencoded")
        @Idempotent(methods = "PUT", keyRequired = false)
        public String callback(HttpServletRequest request) throws IOException {
            return "read:" + new String(request.getInputStream().readAllBytes(), StandardCharsets.UTF_8) + ";";
        }
    }

    @LocalServerPort
    int port;

    @Test
    void theHandlerReadsAPutFormAsSentWithAKeyAsWithout() throws Exception {
        String form = "txn=44&amount=12.50&sig=abc";

        String withoutKey = put(null, form);
        String withKey = put(UUID.randomUUID().toString(), form);

        assertThat(withoutKey).startsWith("HTTP/1.1 200 ").contains("read:" + form + ";");
        assertThat(withKey).startsWith("HTTP/1.1 200 ").contains("read:" + form + ";");
    }

    private String put(String key, String form) throws Exception {
        return OrdersApplicationTest.raw(port, "PUT /put-callbacks HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                + "Content-Type: application/x-www-form-urlencoded\r\n"
                + (key == null ? "" : "Idempotency-Key: " + key + "\r\n")
                + "Content-Length: " + form.length() + "\r\n\r\n" + form);
    }
}
