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
     * V1's checksum, fixed: that of the two shipped scripts as written when it was fixed ({@link #checksumOfScripts}).
     * Every database this migration ran on holds it in its history, and Flyway refuses to start on a history whose
     * checksum differs from the migration's: computed from the scripts, any edit of them (a comment, line endings of a
     * checkout) would stop every upgraded application. A change of the table ships as a migration of its own, V2 and
     * up, never as an edit of what V1 ran (a test holds the scripts to this checksum).
     */
    static final int CHECKSUM = 880_543_552;

    /**
     * Identifies what this migration is, not the table it was given: a table made under another name or for the
     * other cleanup mode (the documented way to switch modes) is the same migration, and must not fail Flyway's
     * validation.
     */
    @Override
    public Integer getChecksum() {
        return CHECKSUM;
    }

    /** The checksum of the two shipped scripts as they are now, with the default table name. */
    static int checksumOfScripts() {
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
