package io.idempotency.spring;

import java.util.List;

/** {@link ExpiredKeysIntegrationTest} on the partitioned table, whose claims take the key's advisory lock. */
class ExpiredKeysPartitionedIntegrationTest extends ExpiredKeysIntegrationTest {

    @Override
    List<String> properties() {
        return List.of("idempotency.retention.cleanup.mode=drop-partitions");
    }
}
