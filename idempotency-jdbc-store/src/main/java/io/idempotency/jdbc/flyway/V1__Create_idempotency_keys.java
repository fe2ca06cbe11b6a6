package io.idempotency.jdbc.flyway;

import io.idempotency.jdbc.IdempotencySchema;
import org.flywaydb.core.api.migration.BaseJavaMigration;
import org.flywaydb.core.api.migration.Context;

import java.sql.Statement;
import java.util.zip.CRC32;
import java.nio.charset.StandardCharsets;

/**
 * Creates the idempotency table by running the shipped {@link IdempotencySchema#POSTGRESQL_SCRIPT}, so the
 * migration and the plain script can never drift apart.
 */
public class V1__Create_idempotency_keys extends BaseJavaMigration {

    private final String tableName;

    public V1__Create_idempotency_keys(String tableName) {
        this.tableName = IdempotencySchema.checkTableName(tableName);
    }

    @Override
    public Integer getChecksum() {
        CRC32 crc = new CRC32();
        crc.update(IdempotencySchema.postgresql(tableName).getBytes(StandardCharsets.UTF_8));
        return (int) crc.getValue();
    }

    @Override
    public void migrate(Context context) throws Exception {
        try (Statement statement = context.getConnection().createStatement()) {
            statement.execute(IdempotencySchema.postgresql(tableName));
        }
    }
}
