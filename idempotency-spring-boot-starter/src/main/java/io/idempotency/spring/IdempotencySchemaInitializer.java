package io.idempotency.spring;

import io.idempotency.jdbc.flyway.IdempotencySchemaException;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import org.springframework.beans.factory.InitializingBean;

/**
 * Creates or upgrades the idempotency table at startup, with the library's own Flyway migration; or, when the schema
 * is managed elsewhere, checks that the table is there with the right layout, so that a missing table stops the
 * application at startup rather than failing every request.
 */
class IdempotencySchemaInitializer implements InitializingBean {

    /** What to do with the table at startup. */
    enum Mode {
        /** Create or upgrade it with the library's migration. */
        MIGRATE,
        /** Managed elsewhere: check it is there, with the right layout. */
        VERIFY,
        /** Managed elsewhere, for a store the application brings: leave it alone. */
        NONE
    }

    private final IdempotencySchemaMigrator migrator;
    private final Mode mode;

    IdempotencySchemaInitializer(IdempotencySchemaMigrator migrator, Mode mode) {
        this.migrator = migrator;
        this.mode = mode;
    }

    @Override
    public void afterPropertiesSet() {
        if (mode == Mode.NONE) {
            return;
        }
        try {
            if (mode == Mode.MIGRATE) {
                migrator.migrate();
            } else {
                migrator.verify();
            }
        } catch (IdempotencySchemaException e) {
            throw new IdempotencyConfigurationException(e.getMessage()
                    + (mode == Mode.VERIFY ? " (idempotency.jdbc.initialize-schema=false)" : ""), action(e));
        }
    }

    private static String action(IdempotencySchemaException e) {
        return switch (e.problem()) {
            case WRONG_LAYOUT -> "Set idempotency.retention.cleanup.mode to the mode the table was made for, or switch"
                    + " the table as the retention documentation describes.";
            case WRONG_SHAPE -> "Create the table from the script the message names (another table name, or the records"
                    + " moved into a new table), or point idempotency.jdbc.table-name at a table made from it.";
            case MISSING -> "Create the table from the script the message names, in the application's own migrations"
                    + " or by hand, or remove idempotency.jdbc.initialize-schema=false to let the library create it.";
            case MISSING_DESPITE_HISTORY -> "Drop the migration history table the message names, so that the"
                    + " library creates the table again at the next start.";
        };
    }
}
