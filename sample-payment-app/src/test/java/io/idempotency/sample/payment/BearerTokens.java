package io.idempotency.sample.payment;

import com.nimbusds.jose.JOSEException;
import com.nimbusds.jose.JWSAlgorithm;
import com.nimbusds.jose.JWSHeader;
import com.nimbusds.jose.crypto.RSASSASigner;
import com.nimbusds.jwt.JWTClaimsSet;
import com.nimbusds.jwt.SignedJWT;
import org.springframework.boot.test.context.TestConfiguration;
import org.springframework.context.annotation.Bean;
import org.springframework.core.annotation.Order;
import org.springframework.security.config.Customizer;
import org.springframework.security.config.annotation.web.builders.HttpSecurity;
import org.springframework.security.config.http.SessionCreationPolicy;
import org.springframework.security.oauth2.jwt.JwtDecoder;
import org.springframework.security.oauth2.jwt.NimbusJwtDecoder;
import org.springframework.security.web.SecurityFilterChain;

import java.net.http.HttpResponse;
import java.security.KeyPair;
import java.security.KeyPairGenerator;
import java.security.NoSuchAlgorithmException;
import java.security.interfaces.RSAPublicKey;
import java.time.Duration;
import java.time.Instant;
import java.util.Date;
import java.util.UUID;
import java.util.function.Consumer;

/**
 * OAuth2 bearer tokens for the sample's tests: a resource-server chain, ahead of the application's own, for requests
 * that carry one, trusting JWTs signed with {@link #ISSUER_KEYS}. The tokens are made here: no authorization server
 * is involved.
 */
@TestConfiguration(proxyBeanMethods = false)
class BearerTokens {

    /** The key the decoder trusts. */
    static final KeyPair ISSUER_KEYS = rsaKeys();
    /** A key it does not: a token signed with it is forged. */
    static final KeyPair OTHER_KEYS = rsaKeys();

    /** POST /payments with {@code token} as bearer token. */
    static HttpResponse<byte[]> pay(PaymentApi api, String token, String key, String body) throws Exception {
        return api.postJson("/payments", "Bearer " + token, key, body, null);
    }

    /** A JWT signed with {@code keys}, valid for an hour, with a fresh id, made by {@code claims} from there. */
    static String token(KeyPair keys, Consumer<JWTClaimsSet.Builder> claims) throws JOSEException {
        Instant now = Instant.now();
        JWTClaimsSet.Builder builder = new JWTClaimsSet.Builder()
                .jwtID(UUID.randomUUID().toString())
                .issueTime(Date.from(now))
                .expirationTime(Date.from(now.plus(Duration.ofHours(1))));
        claims.accept(builder);
        SignedJWT jwt = new SignedJWT(new JWSHeader(JWSAlgorithm.RS256), builder.build());
        jwt.sign(new RSASSASigner(keys.getPrivate()));
        return jwt.serialize();
    }

    private static KeyPair rsaKeys() {
        try {
            KeyPairGenerator generator = KeyPairGenerator.getInstance("RSA");
            generator.initialize(2048);
            return generator.generateKeyPair();
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /** Requests with a bearer token go through the resource server; the others through the application's chain. */
    @Bean
    @Order(0)
    SecurityFilterChain bearerChain(HttpSecurity http) throws Exception {
        return http
                .securityMatcher(request -> {
                    String authorization = request.getHeader("Authorization");
                    return authorization != null && authorization.regionMatches(true, 0, "Bearer ", 0, 7);
                })
                .csrf(csrf -> csrf.disable())
                .sessionManagement(sessions -> sessions.sessionCreationPolicy(SessionCreationPolicy.STATELESS))
                .authorizeHttpRequests(requests -> requests.anyRequest().authenticated())
                .oauth2ResourceServer(server -> server.jwt(Customizer.withDefaults()))
                .build();
    }

    @Bean
    JwtDecoder jwtDecoder() {
        return NimbusJwtDecoder.withPublicKey((RSAPublicKey) ISSUER_KEYS.getPublic()).build();
    }
}
