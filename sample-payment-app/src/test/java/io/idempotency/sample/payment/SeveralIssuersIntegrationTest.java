package io.idempotency.sample.payment;

import io.idempotency.spring.CallerResolver;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.context.TestConfiguration;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Import;
import org.springframework.mock.web.MockHttpServletRequest;
import org.springframework.security.authentication.UsernamePasswordAuthenticationToken;
import org.springframework.security.oauth2.jwt.Jwt;
import org.springframework.security.oauth2.server.resource.authentication.JwtAuthenticationToken;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.util.StringUtils;

import java.net.http.HttpResponse;
import java.util.List;
import java.util.UUID;

import static io.idempotency.sample.payment.BearerTokens.ISSUER_KEYS;
import static io.idempotency.sample.payment.BearerTokens.pay;
import static io.idempotency.sample.payment.BearerTokens.token;
import static io.idempotency.sample.payment.PaymentApi.REPLAYED_HEADER;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Bearer tokens of two issuers, with the README's {@link CallerResolver} that names callers by issuer and subject: the
 * same subject at two issuers is two callers, each with its own payment under one key.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
@Import(BearerTokens.class)
class SeveralIssuersIntegrationTest {

    private static final TestPostgres.Database DB = TestPostgres.newDatabase();
    private static final String ISSUER_A = "https://login.tenant-a.example";
    private static final String ISSUER_B = "https://login.tenant-b.example";

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DB.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @LocalServerPort
    int port;

    @Test
    void oneSubjectAtTwoIssuersIsTwoCallers() throws Exception {
        PaymentApi api = PaymentApi.onPort(port);
        String key = UUID.randomUUID().toString();
        String orderId = PaymentApi.newOrderId();
        String body = PaymentApi.body(orderId, "15.00");

        HttpResponse<byte[]> aliceAtA = pay(api, token(ISSUER_KEYS, claims -> claims.issuer(ISSUER_A)
                .subject("alice")), key, body);
        HttpResponse<byte[]> aliceAtB = pay(api, token(ISSUER_KEYS, claims -> claims.issuer(ISSUER_B)
                .subject("alice")), key, body);
        HttpResponse<byte[]> aliceAtAAgain = pay(api, token(ISSUER_KEYS, claims -> claims.issuer(ISSUER_A)
                .subject("alice")), key, body);

        assertThat(aliceAtA.statusCode()).isEqualTo(201);
        assertThat(aliceAtB.statusCode()).isEqualTo(201);
        assertThat(aliceAtB.headers().firstValue(REPLAYED_HEADER)).as("the other issuer's alice's answer").isEmpty();
        assertThat(aliceAtAAgain.headers().firstValue(REPLAYED_HEADER)).hasValue("true");
        assertThat(aliceAtAAgain.body()).isEqualTo(aliceAtA.body());
        assertThat(DB.queryString("select string_agg(payer, ' ' order by payer) from payments"
                + " where order_id = '" + orderId + "'"))
                .isEqualTo("jwt:" + ISSUER_A.length() + ":" + ISSUER_A + "alice jwt:" + ISSUER_B.length() + ":"
                        + ISSUER_B + "alice");
    }

    /** An issuer need not be a URL (a JWT's {@code iss} is any string): its callers are named like the others. */
    @Test
    void anIssuerThatIsNoUrlNamesItsCallersToo() throws Exception {
        PaymentApi api = PaymentApi.onPort(port);
        String key = UUID.randomUUID().toString();
        String orderId = PaymentApi.newOrderId();
        String body = PaymentApi.body(orderId, "16.00");
        String issuer = "tenant-c";

        HttpResponse<byte[]> first = pay(api, token(ISSUER_KEYS, claims -> claims.issuer(issuer).subject("alice")),
                key, body);
        HttpResponse<byte[]> retry = pay(api, token(ISSUER_KEYS, claims -> claims.issuer(issuer).subject("alice")),
                key, body);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(retry.headers().firstValue(REPLAYED_HEADER)).hasValue("true");
        assertThat(retry.body()).isEqualTo(first.body());
        assertThat(DB.queryString("select string_agg(payer, ' ') from payments where order_id = '" + orderId + "'"))
                .isEqualTo("jwt:" + issuer.length() + ":" + issuer + "alice");
    }

    /**
     * An account of the application's own (form login, HTTP Basic) whose user chose as a name what the resolver makes
     * of a JWT caller is another caller, and so is the anonymous one.
     */
    @Test
    void aLocalAccountNamedAsAJwtCallerIsAnotherCaller() {
        CallerResolver resolver = new Issuers().callers();
        String jwtCaller = resolver.resolve(jwtRequest(ISSUER_A, "alice"));
        MockHttpServletRequest local = new MockHttpServletRequest();
        local.setUserPrincipal(new UsernamePasswordAuthenticationToken(jwtCaller, "n/a", List.of()));

        assertThat(jwtCaller).isEqualTo("jwt:" + ISSUER_A.length() + ":" + ISSUER_A + "alice");
        assertThat(resolver.resolve(local)).isEqualTo("local:" + jwtCaller);
        assertThat(resolver.resolve(new MockHttpServletRequest())).as("anonymous").isEmpty();
    }

    /**
     * A token whose subject is empty names no caller: let through as {@code jwt:<issuer>} with nothing after it, every
     * such user of the issuer would be one caller, replayed the others' answers. Refused, as the default resolver
     * refuses an authenticated request without a name.
     */
    @Test
    void aTokenWithAnEmptySubjectIsRefused() {
        CallerResolver resolver = new Issuers().callers();

        assertThatThrownBy(() -> resolver.resolve(jwtRequest(ISSUER_A, ""))).isInstanceOf(IllegalStateException.class);
    }

    private static MockHttpServletRequest jwtRequest(String issuer, String subject) {
        Jwt jwt = Jwt.withTokenValue("t").header("alg", "none").issuer(issuer).subject(subject).build();
        MockHttpServletRequest request = new MockHttpServletRequest();
        request.setUserPrincipal(new JwtAuthenticationToken(jwt));
        return request;
    }

    @TestConfiguration(proxyBeanMethods = false)
    static class Issuers {

        /** The README's resolver for an application that trusts several issuers, as it stands there. */
        @Bean
        CallerResolver callers() {
            return request -> {
                if (request.getUserPrincipal() instanceof JwtAuthenticationToken jwt
                        && StringUtils.hasText(jwt.getName())) {
                    String issuer = String.valueOf(jwt.getToken().getClaimAsString("iss")); // not always a URL
                    // the issuer's length keeps issuer and subject apart
                    return "jwt:" + issuer.length() + ":" + issuer + jwt.getName();
                }
                // "" for anonymous requests; refuses an authenticated request without a name (a token's empty subject)
                String name = CallerResolver.PRINCIPAL.resolve(request);
                return name.isEmpty() ? name : "local:" + name;
            };
        }
    }
}
