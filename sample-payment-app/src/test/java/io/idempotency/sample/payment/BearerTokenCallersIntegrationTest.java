package io.idempotency.sample.payment;

import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Import;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.Date;
import java.util.UUID;

import static io.idempotency.sample.payment.BearerTokens.ISSUER_KEYS;
import static io.idempotency.sample.payment.BearerTokens.OTHER_KEYS;
import static io.idempotency.sample.payment.BearerTokens.pay;
import static io.idempotency.sample.payment.BearerTokens.token;
import static io.idempotency.sample.payment.PaymentApi.REPLAYED_HEADER;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * Callers with OAuth2 bearer tokens (JWTs, read by Spring Security's resource server): the caller is the token's
 * subject, so a refreshed token retries as the same caller and another subject's token with the same key is another
 * caller; a token refused (expired, badly signed) stores nothing.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
@ExtendWith(OutputCaptureExtension.class)
@Import(BearerTokens.class)
class BearerTokenCallersIntegrationTest {

    private static final TestPostgres.Database DB = TestPostgres.newDatabase();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DB.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @LocalServerPort
    int port;

    @Test
    void twoSubjectsWithOneKeyAreTwoCallersAndARefreshedTokenRetriesAsTheSameOne() throws Exception {
        PaymentApi api = PaymentApi.onPort(port);
        String key = UUID.randomUUID().toString();
        String orderId = PaymentApi.newOrderId();
        String body = PaymentApi.body(orderId, "12.00");

        HttpResponse<byte[]> alice = pay(api, token(ISSUER_KEYS, claims -> claims.subject("alice")), key, body);
        HttpResponse<byte[]> bob = pay(api, token(ISSUER_KEYS, claims -> claims.subject("bob")), key, body);
        // a new token for alice: issued later, another id, another expiry
        HttpResponse<byte[]> aliceRefreshed = pay(api, token(ISSUER_KEYS, claims -> claims.subject("alice")
                .issueTime(Date.from(Instant.now().plusSeconds(1)))
                .expirationTime(Date.from(Instant.now().plus(Duration.ofHours(2))))), key, body);

        assertThat(alice.statusCode()).isEqualTo(201);
        assertThat(bob.statusCode()).isEqualTo(201);
        assertThat(bob.headers().firstValue(REPLAYED_HEADER)).as("alice's answer").isEmpty();
        assertThat(PaymentApi.text(bob)).isNotEqualTo(PaymentApi.text(alice));
        assertThat(aliceRefreshed.statusCode()).isEqualTo(201);
        assertThat(aliceRefreshed.headers().firstValue(REPLAYED_HEADER)).hasValue("true");
        assertThat(aliceRefreshed.body()).isEqualTo(alice.body());
        assertThat(DB.queryString("select string_agg(payer, ',' order by payer) from payments"
                + " where order_id = '" + orderId + "'")).isEqualTo("alice,bob");
        assertThat(DB.queryString("select string_agg(caller, ',' order by caller) from idempotency_keys"
                + " where idempotency_key = '" + key + "'")).isEqualTo("alice,bob");
    }

    @Test
    void aRefusedTokenStoresNothingAndTheRetryWithAGoodOnePays() throws Exception {
        PaymentApi api = PaymentApi.onPort(port);
        String key = UUID.randomUUID().toString();
        String orderId = PaymentApi.newOrderId();
        String body = PaymentApi.body(orderId, "13.00");

        HttpResponse<byte[]> expired = pay(api, token(ISSUER_KEYS, claims -> claims.subject("alice")
                .issueTime(Date.from(Instant.now().minus(Duration.ofHours(2))))
                .expirationTime(Date.from(Instant.now().minus(Duration.ofHours(1))))), key, body);
        HttpResponse<byte[]> forged = pay(api, token(OTHER_KEYS, claims -> claims.subject("alice")), key, body);

        assertThat(expired.statusCode()).isEqualTo(401);
        assertThat(forged.statusCode()).isEqualTo(401);
        assertThat(DB.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key + "'"))
                .isZero();
        assertThat(DB.queryLong("select count(*) from payments where order_id = '" + orderId + "'")).isZero();

        HttpResponse<byte[]> good = pay(api, token(ISSUER_KEYS, claims -> claims.subject("alice")), key, body);

        assertThat(good.statusCode()).isEqualTo(201);
        assertThat(good.headers().firstValue(REPLAYED_HEADER)).isEmpty();
        assertThat(DB.queryLong("select count(*) from payments where order_id = '" + orderId + "'")).isEqualTo(1);
    }

    /**
     * A principal without a name cannot be told from an anonymous caller, nor from another nameless one: its request
     * is refused before anything is claimed, and never answered with what an anonymous client stored under the key.
     */
    @Test
    void aTokenWithoutASubjectIsRefusedRatherThanReplayedTheAnonymousAnswer(CapturedOutput output) throws Exception {
        PaymentApi api = PaymentApi.onPort(port);
        String key = UUID.randomUUID().toString();
        String orderId = PaymentApi.newOrderId();
        String body = PaymentApi.body(orderId, "14.00");

        HttpResponse<byte[]> anonymous = api.createPayment(key, body, null);
        HttpResponse<byte[]> nameless = pay(api, token(ISSUER_KEYS, claims -> claims.claim("scope", "payments")),
                key, body);

        assertThat(anonymous.statusCode()).isEqualTo(201);
        assertThat(nameless.statusCode()).isEqualTo(500);
        assertThat(nameless.headers().firstValue(REPLAYED_HEADER)).as("not the anonymous client's answer").isEmpty();
        assertThat(new String(nameless.body(), StandardCharsets.UTF_8))
                .doesNotContain(new String(anonymous.body(), StandardCharsets.UTF_8));
        assertThat(DB.queryLong("select count(*) from payments where order_id = '" + orderId + "'")).isEqualTo(1);
        assertThat(DB.queryLong("select count(*) from idempotency_keys where idempotency_key = '" + key + "'"))
                .as("the anonymous client's record only").isEqualTo(1);
        assertThat(output.getAll()).contains("has a principal without a name").contains("CallerResolver");
    }

}
