package io.idempotency.spring;

import io.idempotency.jdbc.JdbcIdempotencyStore;
import io.idempotency.jdbc.flyway.IdempotencySchemaException;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.beans.factory.InitializingBean;
import org.springframework.beans.factory.SmartInitializingSingleton;
import org.springframework.util.unit.DataSize;

/**
 * Creates or upgrades the idempotency table at startup, with the library's own Flyway migration; or, when the schema
 * is managed elsewhere, checks that the table is there with the right layout, so that a missing table stops the
 * application at startup rather than failing every request. The table of a JDBC store whose table the library does not
 * create (the MariaDB store's) is checked by the store ({@link JdbcIdempotencyStore#checkTable()}).
 */
class IdempotencySchemaInitializer implements InitializingBean, SmartInitializingSingleton {

    private static final Logger log = LoggerFactory.getLogger(IdempotencySchemaInitializer.class);

    /** What to do with the table at startup. */
    enum Mode {
        /** Create or upgrade it with the library's migration. */
        MIGRATE,
        /**
         * For a store the application brings: create or upgrade it on PostgreSQL (a store wrapping the library's
         * needs its table); leave another database alone, where the store keeps its records in its own way (a JDBC
         * store checks its own table there).
         */
        MIGRATE_ON_POSTGRESQL,
        /** Managed elsewhere: check it is there, with the right layout. */
        VERIFY,
        /** Managed elsewhere, for a store the application brings: leave it to the store (a JDBC store checks it). */
        NONE
    }

    private final IdempotencySchemaMigrator migrator;
    private final Mode mode;
    /** The store, when it is a JDBC one (whose own check of its table runs when the library does not make it). */
    private final JdbcIdempotencyStore store;
    /** The table's identity when it was made or checked, to tell whether it was made again before the start ended. */
    private Long tableIdentity;
    /** The cap on stored bodies, {@code idempotency.max-stored-body-size}, in bytes: the store must keep as much. */
    private final long maxStoredBodySize;

    IdempotencySchemaInitializer(IdempotencySchemaMigrator migrator, Mode mode, JdbcIdempotencyStore store,
                                 long maxStoredBodySize) {
        this.migrator = migrator;
        this.mode = mode;
        this.store = store;
        this.maxStoredBodySize = maxStoredBodySize;
    }

    @Override
    public void afterPropertiesSet() {
        if (mode == Mode.NONE) {
            checkStoreTable();
            checkStoredBodySize();
            return;
        }
        if (mode == Mode.MIGRATE_ON_POSTGRESQL && !migrator.onPostgreSQL()) {
            log.info("The idempotency table is not created: the application's IdempotencyStore keeps its records"
                    + " in a database other than PostgreSQL, which the library's table is made for");
            checkStoreTable();
            checkStoredBodySize();
            return;
        }
        try {
            if (mode != Mode.VERIFY) {
                migrator.migrate();
            } else {
                migrator.verify();
            }
            tableIdentity = migrator.tableIdentity();
        } catch (IdempotencySchemaException e) {
            // the setting leads, as the reason the table is only checked: after the message it would follow its
            // advice, and "let the library create it (…initialize-schema=false)" says the opposite of what to do
            throw new IdempotencyConfigurationException((mode == Mode.VERIFY ? "With"
                    + " idempotency.jdbc.initialize-schema=false the table is checked, not created: " : "")
                    + e.getMessage(), action(e));
        }
        checkStoredBodySize();
    }

    /**
     * The library's table, made or checked before the beans that need the database (JPA's), is checked again once they
     * are made: Hibernate told to create the tables of its entities ({@code ddl-auto=create} or {@code create-drop})
     * drops and makes again a table an entity is mapped to, in the entity's shape, and every claim would then fail on
     * the columns it lacks.
     */
    @Override
    public void afterSingletonsInstantiated() {
        if (mode != Mode.MIGRATE && mode != Mode.VERIFY) {
            return;
        }
        String checked = "after the library had " + (mode == Mode.VERIFY ? "checked" : "created or checked") + " it";
        String action = "If an entity of the application is mapped to the table, let Hibernate validate it"
                + " (spring.jpa.hibernate.ddl-auto=validate or none) rather than create it; otherwise find what"
                + " changes the table at startup. Then " + (mode == Mode.VERIFY
                ? "create the table again from the library's script."
                : "drop the table it made, and the library's migration history table, so that the library creates"
                + " the table again at the next start.");
        Long identity = migrator.tableIdentity();
        if (tableIdentity != null && !tableIdentity.equals(identity)) {
            // also in the library's very shape: made again, it holds none of the records, and would be made again,
            // empty, at every start
            throw new IdempotencyConfigurationException("The idempotency table was dropped" + (identity == null ? ""
                    : " and made again") + " while the application started, " + checked + ": the records it held"
                    + " (the answers replayed to retries, the claims in progress) are gone.", action);
        }
        try {
            migrator.recheck();
        } catch (IdempotencySchemaException e) {
            throw new IdempotencyConfigurationException("The idempotency table was changed while the application"
                    + " started, " + checked + ": " + e.getMessage(), action);
        }
    }

    /**
     * A table the application's migrations made (they have run: this bean depends on them) is checked by its store:
     * one made otherwise than the store's script stops the start, rather than failing requests or sharing records.
     */
    private void checkStoreTable() {
        if (store == null) {
            return;
        }
        try {
            store.checkTable();
        } catch (IllegalStateException e) {
            throw new IdempotencyConfigurationException(e.getMessage(), "Create the table from the script the message"
                    + " names, in the application's own migrations (Flyway, Liquibase) or by hand, or give the store"
                    + " the name of a table made from it.", e);
        }
    }

    /** An answer the cap lets through but the store cannot keep would fail its request after its handler ran. */
    private void checkStoredBodySize() {
        if (store == null) {
            return;
        }
        try {
            store.checkStoredBodySize(maxStoredBodySize);
        } catch (IllegalStateException e) {
            throw new IdempotencyConfigurationException("idempotency.max-stored-body-size ("
                    + IdempotencyAutoConfiguration.readable(DataSize.ofBytes(maxStoredBodySize)) + ") is more than the"
                    + " idempotency store can keep: " + e.getMessage(), "Lower idempotency.max-stored-body-size to what"
                    + " the store can keep, or, where the message says what limits it can be raised, raise it.", e);
        }
    }

    private static String action(IdempotencySchemaException e) {
        return switch (e.problem()) {
            case WRONG_LAYOUT -> "Set idempotency.retention.cleanup.mode to the mode the table was made for, or switch"
                    + " the table as the retention documentation describes.";
            case WRONG_SHAPE -> "Create the table from the script the message names (another table name, or the records"
                    + " moved into a new table), or point idempotency.jdbc.table-name at a table made from it.";
            case ELSEWHERE -> "If the table is this application's, make its schema the connection's default (the first"
                    + " on the search path, currentSchema in the JDBC URL); if not, create this application's table in"
                    + " its default schema from the library's script, or let the library create one under another"
                    + " idempotency.jdbc.table-name.";
            case MISSING -> "Create the table from the script the message names, in the application's own migrations"
                    + " or by hand, or remove idempotency.jdbc.initialize-schema=false to let the library create it.";
            case MISSING_DESPITE_HISTORY -> "Drop the migration history table the message names, so that the"
                    + " library creates the table again at the next start.";
            case NOT_POSTGRESQL -> "Keep the idempotency records in PostgreSQL (define the IdempotencyStore on a"
                    + " PostgreSQL DataSource, as the README describes for applications with several databases), or"
                    + " bring an IdempotencyStore for this database.";
            case MAY_NOT_CREATE -> "Create the table from the script the message names as a role that may create in"
                    + " the schema (a DBA, the application's own migrations), or grant the application's database"
                    + " role CREATE on the schema.";
            case LOCKED -> "If another instance was starting at the same time, start this one again once that one has"
                    + " started; otherwise end the session that holds the lock (or the open transaction the migration"
                    + " waits behind), and start again.";
            case NOT_PERMITTED -> "Grant the application's database role SELECT, INSERT, UPDATE and DELETE (which"
                    + " releases intent-first claims and removes expired records) on the table.";
        };
    }
}
