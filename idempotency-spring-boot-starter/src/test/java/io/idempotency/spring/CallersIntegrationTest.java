package io.idempotency.spring;

import jakarta.servlet.Filter;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletRequestWrapper;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.TestConfiguration;
import org.springframework.boot.web.servlet.FilterRegistrationBean;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Import;
import org.springframework.core.Ordered;

import java.io.IOException;
import java.net.http.HttpResponse;
import java.security.Principal;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The caller is part of a record's key: two callers who happen to send the same key each get an execution and an
 * answer of their own, through the default {@link CallerResolver#PRINCIPAL}.
 */
@Import(CallersIntegrationTest.Authentication.class)
class CallersIntegrationTest extends OrdersApplicationTest {

    /**
     * Authenticates a request as the user its {@code X-User} header names, as a security filter chain would;
     * {@code (null)} and {@code (empty)} authenticate it as a principal without a name (a JWT without the claim its
     * name is read from).
     */
    @TestConfiguration
    static class Authentication {
        @Bean
        FilterRegistrationBean<Filter> authenticationFilter() {
            FilterRegistrationBean<Filter> registration = new FilterRegistrationBean<>((request, response, chain) -> {
                String user = ((HttpServletRequest) request).getHeader("X-User");
                Principal principal = user == null ? null : switch (user) {
                    case "(null)" -> () -> null;
                    case "(empty)" -> () -> "";
                    default -> () -> user;
                };
                chain.doFilter(new HttpServletRequestWrapper((HttpServletRequest) request) {
                    @Override
                    public Principal getUserPrincipal() {
                        return principal;
                    }
                }, response);
            });
            registration.setOrder(Ordered.HIGHEST_PRECEDENCE);
            return registration;
        }
    }

    @Test
    void twoCallersWithOneKeyEachGetTheirOwnExecutionAndAnswer() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "callers-" + key;
        String body = "{\"note\":\"" + note + "\",\"amount\":\"12.50\"}";

        HttpResponse<byte[]> alice = postAs("alice", key, body);
        HttpResponse<byte[]> bob = postAs("bob", key, body);
        HttpResponse<byte[]> aliceAgain = postAs("alice", key, body);
        HttpResponse<byte[]> bobAgain = postAs("bob", key, body);

        assertThat(alice.statusCode()).isEqualTo(201);
        assertThat(bob.statusCode()).isEqualTo(201);
        assertThat(bob.headers().firstValue("Idempotent-Replayed")).as("not the other caller's answer").isEmpty();
        assertThat(bob.headers().firstValue("Location")).isNotEqualTo(alice.headers().firstValue("Location"));
        assertThat(rows(note)).as("each caller's request ran once").isEqualTo(2);
        assertThat(keyRows(key)).isEqualTo(2);
        assertThat(aliceAgain.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(aliceAgain.body()).isEqualTo(alice.body());
        assertThat(bobAgain.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(bobAgain.body()).isEqualTo(bob.body());
    }

    @Test
    void anotherCallerWithAnotherBodyUnderTheSameKeyIsNoMismatch() throws Exception {
        String key = UUID.randomUUID().toString();
        String note = "callers-mismatch-" + key;

        HttpResponse<byte[]> alice = postAs("alice", key, "{\"note\":\"" + note + "\",\"amount\":\"1.00\"}");
        HttpResponse<byte[]> anonymous = post("/orders", key, "{\"note\":\"" + note + "\",\"amount\":\"2.00\"}");

        assertThat(alice.statusCode()).isEqualTo(201);
        assertThat(anonymous.statusCode()).as("the anonymous namespace is another caller's").isEqualTo(201);
        assertThat(rows(note)).isEqualTo(2);
    }

    @Test
    void anAuthenticatedCallerWithoutANameIsRefusedRatherThanReplayedTheAnonymousAnswer() throws Exception {
        for (String nameless : new String[] {"(null)", "(empty)"}) {
            assertRefusedRatherThanReplayedTheAnonymousAnswer(nameless, (key, body) -> postAs(nameless, key, body));
        }
    }

    @Test
    void aRequestOfANamelessCallerKeepsNothingAndLeavesTheKeyFree() throws Exception {
        assertARefusedCallerKeepsNothingAndLeavesTheKeyFree((key, body) -> postAs("(null)", key, body),
                (key, body) -> post("/orders", key, body));
    }

    private HttpResponse<byte[]> postAs(String user, String key, String body)
            throws IOException, InterruptedException {
        return send(request("/orders", body).header("Idempotency-Key", key).header("X-User", user).build());
    }
}
