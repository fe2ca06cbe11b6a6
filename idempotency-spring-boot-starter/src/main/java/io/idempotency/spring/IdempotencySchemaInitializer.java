package io.idempotency.spring;

import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import org.springframework.beans.factory.InitializingBean;

/**
 * Creates or upgrades the idempotency table at startup, with the library's own Flyway migration; or, when the schema
 * is managed elsewhere, checks that the table is there with the right layout, so that a missing table stops the
 * application at startup rather than failing every request.
 */
class IdempotencySchemaInitializer implements InitializingBean {

    private final IdempotencySchemaMigrator migrator;
    private final boolean migrate;

    IdempotencySchemaInitializer(IdempotencySchemaMigrator migrator, boolean migrate) {
        this.migrator = migrator;
        this.migrate = migrate;
    }

    @Override
    public void afterPropertiesSet() {
        if (migrate) {
            migrator.migrate();
        } else {
            try {
                migrator.verify();
            } catch (IllegalStateException e) {
                throw new IllegalStateException(e.getMessage() + " (idempotency.jdbc.initialize-schema=false)",
                        e.getCause());
            }
        }
    }
}
