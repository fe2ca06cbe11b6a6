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
import org.springframework.web.bind.annotation.RestController;

import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A form whose type names no charset, in an application whose request encoding is not UTF-8
 * ({@code spring.servlet.encoding.charset}): the library reads such a form itself, so that a handler reading it as
 * sent still finds it, and must read its parameters in the charset the container would — the request's on Tomcat,
 * UTF-8 on Jetty, which ignores the request's for forms. The handler gets the same text with a key as without.
 */
@Tag("container")
@SpringBootTest(classes = FormCharsetIntegrationTest.App.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = "spring.servlet.encoding.charset=ISO-8859-1")
class FormCharsetIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestDatabases.withOrders();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(NotesController.class)
    static class App {
    }

    @RestController
    public static class NotesController {

        @PostMapping(path = "/form-notes", consumes = "application/x-www-form-urlencoded")
        @Idempotent(keyRequired = false)
        public String note(HttpServletRequest request) {
            // the code points, so that the answer's own charset cannot make two texts look alike
            return "note:" + request.getParameter("note").codePoints()
                    .mapToObj(Integer::toHexString).reduce((a, b) -> a + "," + b).orElse("") + ";";
        }
    }

    @LocalServerPort
    int port;

    @Test
    void aFormWithoutACharsetIsReadWithAKeyAsWithout() throws Exception {
        String form = "note=caf%C3%A9"; // "café" in UTF-8, "cafÃ©" in ISO-8859-1

        String withoutKey = post(null, form);
        String withKey = post(UUID.randomUUID().toString(), form);

        assertThat(withoutKey).startsWith("HTTP/1.1 200 ");
        String note = withoutKey.substring(withoutKey.indexOf("note:"));
        assertThat(withKey).startsWith("HTTP/1.1 200 ").contains(note);
    }

    private String post(String key, String form) throws Exception {
        return OrdersApplicationTest.raw(port, "POST /form-notes HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                + "Content-Type: application/x-www-form-urlencoded\r\n"
                + (key == null ? "" : "Idempotency-Key: " + key + "\r\n")
                + "Content-Length: " + form.length() + "\r\n\r\n" + form);
    }
}
