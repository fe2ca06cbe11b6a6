package io.idempotency.jdbc.flyway;

import io.idempotency.jdbc.IdempotencySchema;
import org.flywaydb.core.api.migration.BaseJavaMigration;
import org.flywaydb.core.api.migration.Context;

import java.sql.Statement;
import java.util.zip.CRC32;
import java.nio.charset.StandardCharsets;

/**
 * Creates the idempotency table by running the shipped script ({@link IdempotencySchema#POSTGRESQL_SCRIPT}, or
 * {@link IdempotencySchema#POSTGRESQL_PARTITIONED_SCRIPT} for the partitioned table), so the migration and the plain
 * scripts can never drift apart.
 */
public class V1__Create_idempotency_keys extends BaseJavaMigration {

    private final String script;

    public V1__Create_idempotency_keys(String tableName, boolean partitioned) {
        this.script = partitioned
                ? IdempotencySchema.postgresqlPartitioned(tableName) : IdempotencySchema.postgresql(tableName);
    }

    @Override
    public Integer getChecksum() {
        CRC32 crc = new CRC32();
        crc.update(script.getBytes(StandardCharsets.UTF_8));
        return (int) crc.getValue();
    }

    @Override
    public void migrate(Context context) throws Exception {
        try (Statement statement = context.getConnection().createStatement()) {
            statement.execute(script);
        }
    }
}
