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

    /**
     * Identifies what this migration is, not the table it was given: the two shipped scripts as written. A table
     * made under another name or for the other cleanup mode (the documented way to switch modes) is the same
     * migration, and must not fail Flyway's validation.
     */
    @Override
    public Integer getChecksum() {
        return checksumOf(IdempotencySchema.postgresql(IdempotencySchema.DEFAULT_TABLE_NAME)
                + IdempotencySchema.postgresqlPartitioned(IdempotencySchema.DEFAULT_TABLE_NAME));
    }

    /** Flyway's checksum of {@code text}. */
    static int checksumOf(String text) {
        CRC32 crc = new CRC32();
        crc.update(text.getBytes(StandardCharsets.UTF_8));
        return (int) crc.getValue();
    }

    @Override
    public void migrate(Context context) throws Exception {
        try (Statement statement = context.getConnection().createStatement()) {
            statement.execute(script);
        }
    }
}
