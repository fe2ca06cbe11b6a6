package io.idempotency.spring;

import org.springframework.test.context.TestPropertySource;

/**
 * {@link HttpSemanticsIntegrationTest} with the in-memory replay cache off, so that every replay and every refused
 * reuse of a key (body, concrete path, query) is decided by the record stored in PostgreSQL.
 */
@TestPropertySource(properties = "idempotency.replay-cache.max-entries=0")
class HttpSemanticsWithoutReplayCacheIntegrationTest extends HttpSemanticsIntegrationTest {
}
