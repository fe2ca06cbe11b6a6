package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import jakarta.servlet.http.HttpServletResponse;
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

import java.io.IOException;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * docs/how-it-works.md, "3xx answers": with Spring Boot's relative redirects ({@code ForwardedHeaderFilter}, set up by
 * {@code server.forward-headers-strategy=framework} and {@code server.tomcat.use-relative-redirects=true}), a filter
 * before the library's turns the {@code sendRedirect} of a request that came through a proxy (forwarded headers; it
 * leaves other requests alone) into 303 See Other. An idempotent answer is held and stored as the handler gave it,
 * behind that filter's back: 302, the first answer and its replays alike, and the Location as the handler gave it.
 */
@SpringBootTest(classes = RelativeRedirectsIntegrationTest.App.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = {"server.forward-headers-strategy=framework", "server.tomcat.use-relative-redirects=true"})
class RelativeRedirectsIntegrationTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        TestDatabases.register(registry, DATABASE);
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(RedirectingController.class)
    static class App {
    }

    @RestController
    public static class RedirectingController {

        @PostMapping("/redirects/plain")
        public void plain(HttpServletResponse response) throws IOException {
            response.sendRedirect("/orders/7");
        }

        @PostMapping("/redirects/idempotent")
        @Idempotent
        public void idempotent(HttpServletResponse response) throws IOException {
            response.sendRedirect("/orders/7");
        }
    }

    @LocalServerPort
    int port;

    @Test
    void aRedirectIsTheHandlersOwnStatusWhereAFilterBeforeTheLibraryWouldMakeIt303() throws Exception {
        String key = UUID.randomUUID().toString();

        String plain = post("/redirects/plain", null);
        String first = post("/redirects/idempotent", key);
        String replay = post("/redirects/idempotent", key);

        assertThat(plain).as("without the library, the filter answers 303").startsWith("HTTP/1.1 303 ")
                .contains("\r\nLocation: /orders/7\r\n");
        assertThat(first).startsWith("HTTP/1.1 302 ").contains("\r\nLocation: /orders/7\r\n")
                .doesNotContain("Idempotent-Replayed");
        assertThat(replay).startsWith("HTTP/1.1 302 ").contains("\r\nLocation: /orders/7\r\n")
                .contains("Idempotent-Replayed: true");
    }

    private String post(String path, String key) throws IOException {
        return OrdersApplicationTest.raw(port, "POST " + path + " HTTP/1.1\r\nHost: localhost\r\n"
                + "X-Forwarded-Proto: https\r\nX-Forwarded-Host: shop.example\r\n" // a proxy in front
                + "Content-Length: 0\r\n" + (key == null ? "" : "Idempotency-Key: " + key + "\r\n")
                + "Connection: close\r\n\r\n");
    }
}
