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
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.PutMapping;
import org.springframework.web.bind.annotation.RestController;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Forms the library reads itself, where the container would parse them from its own stream when asked for their
 * parameters, so that a handler reading a form as sent still finds it: the library must read them as the container
 * does, which differs between Tomcat and Jetty. The handler gets the same with a key as without, on both.
 * <ul>
 *   <li>A form whose type names no charset, in an application whose request encoding is not UTF-8
 *       ({@code spring.servlet.encoding.charset}): Tomcat reads it in the request's encoding, Jetty in UTF-8.</li>
 *   <li>A PUT form, with Spring's {@code FormContentFilter} (which would read it first) switched off: Jetty parses
 *       PUT forms too, Tomcat POST forms only.</li>
 * </ul>
 */
@Tag("container")
@SpringBootTest(classes = FormsTheContainerParsesIntegrationTest.App.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = {"spring.servlet.encoding.charset=ISO-8859-1", "spring.mvc.formcontent.filter.enabled=false"})
class FormsTheContainerParsesIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestDatabases.withOrders();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(FormsController.class)
    static class App {
    }

    @RestController
    public static class FormsController {

        @PostMapping(path = "/form-notes", consumes = "application/x-www-form-urlencoded")
        @Idempotent(keyRequired = false)
        public String note(HttpServletRequest request) {
            // the code points, so that the answer's own charset cannot make two texts look alike
            return "note:" + request.getParameter("note").codePoints()
                    .mapToObj(Integer::toHexString).reduce((a, b) -> a + "," + b).orElse("") + ";";
        }

        @PutMapping(path = "/put-callbacks", consumes = "application/x-www-form-urlencoded")
        @Idempotent(methods = "PUT", keyRequired = false)
        public String callback(HttpServletRequest request) throws IOException {
            return "read:" + new String(request.getInputStream().readAllBytes(), StandardCharsets.UTF_8) + ";";
        }
    }

    @LocalServerPort
    int port;

    @Test
    void aFormWithoutACharsetIsReadWithAKeyAsWithout() throws Exception {
        String form = "note=caf%C3%A9"; // "café" in UTF-8, "cafÃ©" in ISO-8859-1

        String withoutKey = send("POST", "/form-notes", null, form);
        String withKey = send("POST", "/form-notes", UUID.randomUUID().toString(), form);

        assertThat(withoutKey).startsWith("HTTP/1.1 200 ");
        String note = withoutKey.substring(withoutKey.indexOf("note:"));
        assertThat(withKey).startsWith("HTTP/1.1 200 ").contains(note);
    }

    @Test
    void theHandlerReadsAPutFormAsSentWithAKeyAsWithout() throws Exception {
        String form = "txn=44&amount=12.50&sig=abc";

        String withoutKey = send("PUT", "/put-callbacks", null, form);
        String withKey = send("PUT", "/put-callbacks", UUID.randomUUID().toString(), form);

        assertThat(withoutKey).startsWith("HTTP/1.1 200 ").contains("read:" + form + ";");
        assertThat(withKey).startsWith("HTTP/1.1 200 ").contains("read:" + form + ";");
    }

    private String send(String method, String path, String key, String form) throws Exception {
        return OrdersApplicationTest.raw(port, method + " " + path + " HTTP/1.1\r\nHost: localhost\r\n"
                + "Connection: close\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                + (key == null ? "" : "Idempotency-Key: " + key + "\r\n")
                + "Content-Length: " + form.length() + "\r\n\r\n" + form);
    }
}
