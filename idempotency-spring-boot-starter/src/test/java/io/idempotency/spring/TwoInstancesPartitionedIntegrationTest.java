package io.idempotency.spring;

import java.util.List;

/**
 * {@link TwoInstancesIntegrationTest} on the partitioned table, where no unique index spans the partitions and the
 * claims of the two instances queue on the key's advisory lock instead.
 */
class TwoInstancesPartitionedIntegrationTest extends TwoInstancesIntegrationTest {

    @Override
    List<String> properties() {
        return List.of("idempotency.retention.cleanup.mode=drop-partitions");
    }
}
