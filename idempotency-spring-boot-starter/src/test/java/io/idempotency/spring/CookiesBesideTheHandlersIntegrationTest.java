package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import jakarta.servlet.FilterChain;
import jakarta.servlet.ServletException;
import jakarta.servlet.http.Cookie;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import org.junit.jupiter.api.Test;
import org.springframework.context.annotation.Import;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.filter.OncePerRequestFilter;

import java.io.IOException;
import java.net.http.HttpResponse;
import java.util.List;
import java.util.Map;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The cookies the container holds when the handler's answer is sent — one a filter set before the handler, the
 * session's, made while the handler ran — stay beside the cookies the handler adds through a {@code Set-Cookie}
 * header, as without the library: the session is the client's, and losing its cookie logs the client out of it.
 */
@Import({CookiesBesideTheHandlersIntegrationTest.SessionController.class,
        CookiesBesideTheHandlersIntegrationTest.VisitCookieFilter.class})
class CookiesBesideTheHandlersIntegrationTest extends OrdersApplicationTest {

    @Test
    void theCookiesTheContainerHoldsStayBesideTheOnesTheHandlerAddsInAHeader() throws Exception {
        String key = UUID.randomUUID().toString();

        HttpResponse<byte[]> unguarded = send(request("/session-cookies/unguarded",
                "{\"note\":\"cookies-unguarded-" + key + "\"}").build());
        HttpResponse<byte[]> first = post("/session-cookies", key, "{\"note\":\"cookies-" + key + "\"}");

        assertThat(cookieNames(unguarded)).as("the container alone").contains("visit", "JSESSIONID", "theme");
        assertThat(first.statusCode()).isEqualTo(200);
        assertThat(cookieNames(first)).contains("visit", "JSESSIONID", "theme");
        assertThat(rows("cookies-" + key)).isEqualTo(1);
    }

    @Test
    void aCookieHeaderTheHandlerSetsReplacesTheCookiesSetSoFarAsTheContainerDoes() throws Exception {
        String key = UUID.randomUUID().toString();

        HttpResponse<byte[]> unguarded = send(request("/session-cookies/replacing/unguarded",
                "{\"note\":\"replacing-unguarded-" + key + "\"}").build());
        HttpResponse<byte[]> first = post("/session-cookies/replacing", key, "{\"note\":\"replacing-" + key + "\"}");

        assertThat(cookieNames(unguarded)).as("the container alone").contains("theme").doesNotContain("visit");
        assertThat(first.statusCode()).isEqualTo(200);
        assertThat(cookieNames(first)).containsExactlyInAnyOrderElementsOf(cookieNames(unguarded));
    }

    private static List<String> cookieNames(HttpResponse<byte[]> response) {
        return response.headers().allValues("Set-Cookie").stream()
                .map(cookie -> cookie.substring(0, cookie.indexOf('=')).trim()).toList();
    }

    /** Sets a cookie of its own on the answers to the controller below, before the handler runs. */
    static class VisitCookieFilter extends OncePerRequestFilter {

        @Override
        protected void doFilterInternal(HttpServletRequest request, HttpServletResponse response, FilterChain chain)
                throws ServletException, IOException {
            if (request.getRequestURI().startsWith("/session-cookies")) {
                response.addCookie(new Cookie("visit", "1"));
            }
            chain.doFilter(request, response);
        }
    }

    /** Starts a session and sets a cookie of its own through its answer's headers. */
    @RestController
    static class SessionController {

        private final JdbcClient jdbc;

        SessionController(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        @PostMapping("/session-cookies")
        @Idempotent
        public Map<String, String> signIn(@RequestBody Map<String, String> body, HttpServletRequest request,
                                          HttpServletResponse response) {
            return unguarded(body, request, response);
        }

        @PostMapping("/session-cookies/replacing")
        @Idempotent
        public Map<String, String> replacing(@RequestBody Map<String, String> body, HttpServletRequest request,
                                             HttpServletResponse response) {
            return replacingUnguarded(body, request, response);
        }

        /** Sets its cookie with {@code setHeader}, which replaces the cookies set so far, the session's too. */
        @PostMapping("/session-cookies/replacing/unguarded")
        public Map<String, String> replacingUnguarded(@RequestBody Map<String, String> body,
                                                      HttpServletRequest request, HttpServletResponse response) {
            jdbc.sql("insert into orders (note) values (?)").param(body.get("note")).update();
            request.getSession(true).setAttribute("signed-in", body.get("note"));
            response.setHeader("Set-Cookie", "theme=dark; Path=/");
            return Map.of("signed", "in");
        }

        @PostMapping("/session-cookies/unguarded")
        public Map<String, String> unguarded(@RequestBody Map<String, String> body, HttpServletRequest request,
                                             HttpServletResponse response) {
            jdbc.sql("insert into orders (note) values (?)").param(body.get("note")).update();
            request.getSession(true).setAttribute("signed-in", body.get("note"));
            response.addHeader("Set-Cookie", "theme=dark; Path=/");
            return Map.of("signed", "in");
        }
    }
}
