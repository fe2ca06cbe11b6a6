package io.idempotency.jdbc.flyway;

import org.flywaydb.core.Flyway;
import org.flywaydb.core.api.Location;
import org.flywaydb.core.api.output.MigrateResult;

import javax.sql.DataSource;

/**
 * Applies the idempotency schema with a Flyway instance of its own: its own migrations and its own history table
 * ({@value #HISTORY_TABLE}), so it never touches the application's migrations or its {@code Flyway} bean.
 */
public final class IdempotencySchemaMigrator {

    /** The Flyway history table of the library's migrations. */
    public static final String HISTORY_TABLE = "idempotency_schema_history";

    private final DataSource dataSource;
    private final String tableName;

    public IdempotencySchemaMigrator(DataSource dataSource, String tableName) {
        this.dataSource = dataSource;
        this.tableName = tableName;
    }

    /** Brings the schema up to date; safe to run from several instances at once (Flyway locks). */
    public MigrateResult migrate() {
        return Flyway.configure(IdempotencySchemaMigrator.class.getClassLoader())
                .dataSource(dataSource)
                .table(HISTORY_TABLE)
                .locations(new Location[0]) // no scanning: the one migration is given below
                .javaMigrations(new V1__Create_idempotency_keys(tableName))
                // a schema that already holds the application's tables is fine: start the history at version 0
                .baselineOnMigrate(true)
                .baselineVersion("0")
                .load()
                .migrate();
    }
}
