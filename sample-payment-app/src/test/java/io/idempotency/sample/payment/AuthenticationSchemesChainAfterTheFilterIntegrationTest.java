package io.idempotency.sample.payment;

import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Import;

/**
 * {@link AuthenticationSchemesIntegrationTest} with Spring Security's filter chain ordered after the
 * {@code IdempotencyFilter} ({@code spring.security.filter.order} above its order): the chain's refusals then pass
 * through the filter, and must still never be stored as the answer.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = "spring.security.filter.order=0")
@Import(AuthenticationSchemesIntegrationTest.Schemes.class)
class AuthenticationSchemesChainAfterTheFilterIntegrationTest extends AuthenticationSchemesIntegrationTest {
}
