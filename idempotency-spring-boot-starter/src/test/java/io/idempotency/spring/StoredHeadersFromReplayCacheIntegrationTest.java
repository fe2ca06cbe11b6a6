package io.idempotency.spring;

import org.springframework.test.context.TestPropertySource;

/** {@link StoredHeadersIntegrationTest}, replayed from the in-memory replay cache. */
@TestPropertySource(properties = "idempotency.replay-cache.max-entries=1000")
class StoredHeadersFromReplayCacheIntegrationTest extends StoredHeadersIntegrationTest {
}
