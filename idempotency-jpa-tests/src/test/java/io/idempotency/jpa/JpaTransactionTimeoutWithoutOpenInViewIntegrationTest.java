package io.idempotency.jpa;

import org.springframework.test.context.TestPropertySource;

/** The same with open-in-view off: the EntityManager is the transaction's own, closed as the transaction ends. */
@TestPropertySource(properties = "spring.jpa.open-in-view=false")
class JpaTransactionTimeoutWithoutOpenInViewIntegrationTest extends JpaTransactionTimeoutIntegrationTest {
}
