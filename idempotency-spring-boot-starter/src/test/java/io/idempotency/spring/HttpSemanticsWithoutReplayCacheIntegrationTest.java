package io.idempotency.spring;

import org.springframework.test.context.TestPropertySource;

/**
 * {@link HttpSemanticsIntegrationTest} with no answer kept in memory, so that every replay and every refused reuse of
 * a key (body, concrete path, query) is decided by the record stored in PostgreSQL: a replay of a request the instance
 * remembers completed ({@code idempotency.replay-cache.completed-keys}, on by default) from one read of its record,
 * anything else by a claim.
 */
@TestPropertySource(properties = "idempotency.replay-cache.max-entries=0")
class HttpSemanticsWithoutReplayCacheIntegrationTest extends HttpSemanticsIntegrationTest {
}
