package io.idempotency.spring;

import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import org.springframework.beans.factory.InitializingBean;

/** Creates or upgrades the idempotency table at startup, with the library's own Flyway migration. */
class IdempotencySchemaInitializer implements InitializingBean {

    private final IdempotencySchemaMigrator migrator;

    IdempotencySchemaInitializer(IdempotencySchemaMigrator migrator) {
        this.migrator = migrator;
    }

    @Override
    public void afterPropertiesSet() {
        migrator.migrate();
    }
}
