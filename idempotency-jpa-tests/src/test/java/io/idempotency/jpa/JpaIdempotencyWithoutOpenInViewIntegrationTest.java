package io.idempotency.jpa;

import org.springframework.test.context.TestPropertySource;

/** The same, with open-in-view off: the EntityManager lives as long as the library's transaction, not the request. */
@TestPropertySource(properties = "spring.jpa.open-in-view=false")
class JpaIdempotencyWithoutOpenInViewIntegrationTest extends JpaIdempotencyIntegrationTest {
}
