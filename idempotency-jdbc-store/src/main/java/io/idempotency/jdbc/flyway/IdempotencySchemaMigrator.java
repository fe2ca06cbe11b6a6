package io.idempotency.jdbc.flyway;

import org.flywaydb.core.Flyway;
import org.flywaydb.core.api.FlywayException;
import org.flywaydb.core.api.Location;
import org.flywaydb.core.api.configuration.FluentConfiguration;
import org.flywaydb.core.api.output.MigrateResult;

import io.idempotency.core.ScopedKey;
import io.idempotency.jdbc.IdempotencySchema;
import io.idempotency.jdbc.ReadConnections;

import javax.sql.DataSource;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * Applies the idempotency schema with a Flyway instance of its own: its own migrations and its own history table
 * ({@value #HISTORY_TABLE} for the default table, {@code <table>_schema_history} for another), so it never touches
 * the application's migrations or its {@code Flyway} bean, and tables of different names keep separate histories.
 */
public final class IdempotencySchemaMigrator {

    private static final System.Logger log = System.getLogger(IdempotencySchemaMigrator.class.getName());

    /** Attempts of a migration that lost a race with another instance starting at the same moment. */
    private static final int ATTEMPTS = 3;

    /** The Flyway history table of the library's migrations for the default table. */
    public static final String HISTORY_TABLE = "idempotency_schema_history";

    /**
     * The history table of the migrations of {@code tableName}: each table has its own, or a table under a new name
     * would never be created (the shared history would say its migration had run).
     */
    public static String historyTable(String tableName) {
        // lower case, as PostgreSQL folds the unquoted table name: Flyway quotes the name it is given
        String folded = IdempotencySchema.checkTableName(tableName).toLowerCase(Locale.ROOT);
        if (IdempotencySchema.DEFAULT_TABLE_NAME.equals(folded)) {
            return HISTORY_TABLE;
        }
        String history = folded + "_schema_history";
        if (history.equals(HISTORY_TABLE)) {
            throw new IllegalArgumentException("the table name " + tableName + " cannot be used: its migration"
                    + " history would be " + HISTORY_TABLE + ", the default table's");
        }
        return history;
    }

    private final DataSource dataSource;
    private final String tableName;
    private final boolean partitioned;
    /** Flyway's lock retry count (it tries once a second); null for Flyway's default, 50. */
    private final Integer lockRetries;

    /** Migrates to the plain (not partitioned) table. */
    public IdempotencySchemaMigrator(DataSource dataSource, String tableName) {
        this(dataSource, tableName, false);
    }

    /**
     * @param partitioned whether a new table is created partitioned by creation time; an existing table keeps its
     *                    layout (the migration runs once)
     */
    public IdempotencySchemaMigrator(DataSource dataSource, String tableName, boolean partitioned) {
        this(dataSource, tableName, partitioned, null);
    }

    private IdempotencySchemaMigrator(DataSource dataSource, String tableName, boolean partitioned,
                                      Integer lockRetries) {
        this.dataSource = dataSource;
        this.tableName = tableName;
        this.partitioned = partitioned;
        this.lockRetries = lockRetries;
    }

    /**
     * A migrator that waits {@code wait} (rounded up to whole seconds: Flyway tries for the lock once a second) for
     * another session's lock on the history before {@link #migrate()} fails ({@code LOCKED}), instead of Flyway's
     * default of about 50 seconds. Flyway's {@code lockRetryCount}, set for this migration only.
     *
     * @throws IllegalArgumentException if {@code wait} is negative
     */
    public IdempotencySchemaMigrator withLockWait(Duration wait) {
        if (wait.isNegative()) {
            throw new IllegalArgumentException("the wait for the migration lock cannot be negative: " + wait);
        }
        long seconds = wait.toSeconds() + (wait.toNanosPart() == 0 ? 0 : 1);
        if (seconds > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("the wait for the migration lock is too long: " + wait);
        }
        return new IdempotencySchemaMigrator(dataSource, tableName, partitioned, (int) seconds);
    }

    /**
     * Brings the schema up to date; safe to run from several instances at once. Flyway locks its history while it
     * migrates, but decides on a baseline before it has the lock: an instance that loses that race to another one
     * starting at the same moment tries again, and then finds the work done. One that finds the lock held by another
     * session waits as long as Flyway waits for it (about 50 seconds, or as {@link #withLockWait(Duration)} says),
     * and then fails ({@code LOCKED}).
     * <p>
     * A database role that may not create tables in the connection's default schema (the table made by a DBA, who
     * granted the role only what requests need) cannot run the migration, nor keep its history: the table is then
     * checked as {@link #verify()} checks it, and used as it is.
     *
     * @throws IdempotencySchemaException if the table exists with the other layout (partitioned or not) than asked
     *                                    for, or is missing although its history says it was created, or is missing
     *                                    and the role may not create it, or another session held the migration lock
     *                                    for as long as Flyway waits
     */
    public MigrateResult migrate() {
        requirePostgreSQL();
        String[] denied = creationDenied();
        if (denied != null) {
            // the migration could not even write its history: use the table a DBA made, once checked
            verify(IdempotencySchemaException.Problem.MAY_NOT_CREATE, "table " + tableName + " does not exist in"
                    + " schema " + denied[1] + ", and the application's database role " + denied[0] + " may not"
                    + " create it there (it lacks CREATE on the schema): create it from " + script() + " (with the"
                    + " table name replaced) as a role that may, or grant " + denied[0] + " CREATE on schema "
                    + denied[1]);
            log.log(System.Logger.Level.INFO, "The idempotency table " + tableName + " is used as it is, not"
                    + " migrated: the database role " + denied[0] + " may not create in schema " + denied[1]);
            MigrateResult result = new MigrateResult();
            result.success = true;
            result.schemaName = denied[1];
            result.addWarning("not migrated: role " + denied[0] + " may not create in schema " + denied[1]);
            return result;
        }
        for (int attempt = 1; ; attempt++) {
            try {
                return migrateOnce();
            } catch (FlywayException e) {
                if (waitedForTheLock(e)) {
                    // not the race of instances starting together: trying again would only wait as long once more
                    String history = historyTable(tableName);
                    throw new IdempotencySchemaException(IdempotencySchemaException.Problem.LOCKED, "the migration of"
                            + " table " + tableName + " gave up waiting for the lock on its history " + history
                            + ", which another session has held all along: another instance migrating the table, its"
                            + " migration stuck behind a transaction left open, or a session that took the lock and"
                            + " never let go (find it in pg_locks, locktype advisory, and pg_stat_activity). Flyway: "
                            + e.getMessage());
                }
                if (attempt == ATTEMPTS) {
                    throw e;
                }
                try {
                    Thread.sleep(100L * attempt);
                } catch (InterruptedException interrupted) {
                    Thread.currentThread().interrupt();
                    throw e;
                }
            }
        }
    }

    /** Whether Flyway gave up waiting for its lock on the history, which another session holds. */
    private static boolean waitedForTheLock(FlywayException e) {
        for (Throwable cause = e; cause != null; cause = cause.getCause()) {
            String message = cause.getMessage();
            if (message != null && message.contains("attempting to acquire PostgreSQL advisory lock")) {
                return true;
            }
        }
        return false;
    }

    private MigrateResult migrateOnce() {
        Boolean layout = existingLayout();
        if (layout != null) {
            checkSchema();
        }
        checkLayout(layout);
        String history = historyTable(tableName);
        boolean tableExists = layout != null;
        // where Flyway keeps it: in the default schema (the first of the search path that exists), not wherever the
        // search path finds one (another application's, in a schema it shares)
        String ownHistory = inDefaultSchema(history);
        boolean historyExists = ownHistory != null;
        if (historyExists) {
            adoptChecksumOfEarlierVersions(ownHistory);
        }
        boolean adopt = tableExists && !historyExists;
        FluentConfiguration configuration = Flyway.configure(IdempotencySchemaMigrator.class.getClassLoader())
                .dataSource(dataSource)
                .table(history)
                .locations(new Location[0]) // no scanning: the one migration is given below
                .javaMigrations(new V1__Create_idempotency_keys(tableName, partitioned))
                // a schema that already holds the application's tables is fine: start the history at version 0, or
                // at 1 when the table is there without a history of its own (made from the plain script, or by a
                // version of the library that kept one history for every table name)
                .baselineOnMigrate(true)
                .baselineVersion(adopt ? "1" : "0");
        if (lockRetries != null) {
            configuration.lockRetryCount(lockRetries);
        }
        Flyway flyway = configuration.load();
        if (adopt) {
            checkShape(); // before the history says it is the library's: a table refused is left as it was
            flyway.baseline(); // explicitly: Flyway may not count a partitioned table as making the schema non-empty
        }
        MigrateResult result = flyway.migrate();
        if (existingLayout() == null) {
            throw new IdempotencySchemaException(IdempotencySchemaException.Problem.MISSING_DESPITE_HISTORY,
                    "the migration history " + history + " says table " + tableName + " was created, but it does"
                            + " not exist");
        }
        checkShape(); // a table that was there already was adopted as it is
        warnOfMissingIndexes();
        return result;
    }

    /**
     * Earlier builds took V1's checksum over the script with the table name and layout filled in; a history
     * written by them is brought to the checksum V1 has now, instead of failing Flyway's validation.
     */
    private void adoptChecksumOfEarlierVersions(String history) {
        V1__Create_idempotency_keys current = new V1__Create_idempotency_keys(tableName, partitioned);
        int[] earlier = {V1__Create_idempotency_keys.checksumOf(IdempotencySchema.postgresql(tableName)),
                V1__Create_idempotency_keys.checksumOf(IdempotencySchema.postgresqlPartitioned(tableName))};
        String written = " WHERE version = '1' AND checksum IN (?, ?)";
        try (Connection connection = ReadConnections.borrow(dataSource)) {
            // looked for first: a role that may read the history but not change it (the migration ran as the owner)
            // has nothing to change in a history of this version, and may not even run an UPDATE that matches nothing
            try (PreparedStatement statement = connection.prepareStatement("SELECT 1 FROM " + history + written)) {
                statement.setInt(1, earlier[0]);
                statement.setInt(2, earlier[1]);
                try (ResultSet rs = statement.executeQuery()) {
                    if (!rs.next()) {
                        return;
                    }
                }
            }
            try (PreparedStatement statement = connection.prepareStatement("UPDATE " + history
                    + " SET checksum = ?" + written)) {
                statement.setInt(1, current.getChecksum());
                statement.setInt(2, earlier[0]);
                statement.setInt(3, earlier[1]);
                statement.executeUpdate();
            }
            if (!connection.getAutoCommit()) {
                // a pool that does not auto-commit rolls back what a connection left uncommitted when it comes back:
                // Flyway would then refuse the history it finds
                connection.commit();
            }
        } catch (SQLException e) {
            throw new IllegalStateException("could not read or update the migration history " + history, e);
        }
    }

    /**
     * {@code relation} as SQL names it in the default schema (quoted where needed), if it exists there; null if it does
     * not, or there is no default schema.
     */
    private String inDefaultSchema(String relation) {
        try (Connection connection = ReadConnections.borrow(dataSource);
             PreparedStatement statement = connection.prepareStatement("SELECT name FROM (SELECT"
                     + " quote_ident(current_schema()) || '.' || quote_ident(?) AS name) AS n"
                     + " WHERE to_regclass(name) IS NOT NULL")) {
            statement.setString(1, relation);
            try (ResultSet rs = statement.executeQuery()) {
                return rs.next() ? rs.getString(1) : null;
            }
        } catch (SQLException e) {
            throw new IllegalStateException("could not look for " + relation, e);
        }
    }

    /**
     * For a schema managed elsewhere (the migration switched off): checks that the table exists with the layout
     * asked for, so that a missing or mismatched table stops the application at startup instead of failing every
     * claim.
     *
     * @throws IllegalStateException if the table does not exist, exists only in a schema the search path reaches after
     *                               the default one, or exists with the other layout or another shape
     */
    public void verify() {
        requirePostgreSQL();
        verify(IdempotencySchemaException.Problem.MISSING, "table " + tableName
                + " does not exist in the connection's schema, and"
                + " the library's migration is switched off: create it from " + script() + " (with the table"
                + " name replaced), or let the library create it");
    }

    /**
     * The table's identity in the database (its OID), or null when the connection's schema has none: a table dropped
     * and made again, even in the same shape and with the same name, has another one.
     */
    public Long tableIdentity() {
        try (Connection connection = ReadConnections.borrow(dataSource);
             PreparedStatement statement = connection.prepareStatement("SELECT to_regclass(?)::oid::bigint")) {
            statement.setString(1, IdempotencySchema.checkTableName(tableName));
            try (ResultSet rs = statement.executeQuery()) {
                rs.next();
                long oid = rs.getLong(1);
                return rs.wasNull() ? null : oid;
            }
        } catch (SQLException e) {
            throw new IllegalStateException("could not inspect table " + tableName, e);
        }
    }

    /**
     * Checks again that the table has the layout and shape {@link #migrate()} or {@link #verify()} found, for a moment
     * after the application's other beans were made: one of them may have made it again in a shape of its own
     * (Hibernate with {@code ddl-auto=create} and an entity mapped to the table; {@link #tableIdentity()} tells
     * whether it was made again at all). Warns of nothing: the first check did.
     *
     * @throws IdempotencySchemaException as {@link #verify()}
     */
    public void recheck() {
        verify(IdempotencySchemaException.Problem.MISSING, "table " + tableName + " no longer exists in the"
                + " connection's schema", false);
    }

    private void verify(IdempotencySchemaException.Problem whenMissing, String missing) {
        verify(whenMissing, missing, true);
    }

    private void verify(IdempotencySchemaException.Problem whenMissing, String missing, boolean warn) {
        Boolean layout = existingLayout();
        if (layout == null) {
            throw new IdempotencySchemaException(whenMissing, missing);
        }
        checkSchema();
        checkLayout(layout);
        checkShape();
        if (warn) {
            warnOfMissingIndexes();
        }
    }

    /**
     * A table made otherwise than from the script (by a DBA, an ORM, a changelog of its own) may lack the script's
     * indexes on {@code expires_at} and {@code locked_until}: it works, but each batch of the cleanup, and each run of
     * the stale-claim sweeper (every 30 s by default, on every instance), then scans the whole table. Warned of, not
     * refused: a table may be small, or its application's own indexes serve.
     */
    private void warnOfMissingIndexes() {
        List<String> missing = new ArrayList<>();
        try (Connection connection = ReadConnections.borrow(dataSource);
             PreparedStatement statement = connection.prepareStatement("SELECT a.attname FROM unnest(ARRAY['expires_at',"
                     + " 'locked_until']) AS a(attname) WHERE NOT EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute c"
                     + " ON c.attrelid = i.indrelid AND c.attnum = i.indkey[0] WHERE i.indrelid = to_regclass(?)"
                     + " AND i.indisvalid AND c.attname = a.attname) ORDER BY 1")) {
            statement.setString(1, tableName);
            try (ResultSet rs = statement.executeQuery()) {
                while (rs.next()) {
                    missing.add(rs.getString(1));
                }
            }
        } catch (SQLException e) {
            return; // a warning only: the table itself has been checked
        }
        if (!missing.isEmpty()) {
            log.log(System.Logger.Level.WARNING, "The idempotency table " + tableName + " has no index that begins"
                    + " with " + String.join(" nor with ", missing) + ": "
                    + (missing.contains("expires_at") ? "each batch of the cleanup scans the whole table" : "")
                    + (missing.size() == 2 ? ", and " : "")
                    + (missing.contains("locked_until") ? "each run of the stale-claim sweeper (every 30 s by default,"
                    + " on every instance) scans the whole table" : "")
                    + ". Create the indexes of " + script() + ".");
        }
    }

    /** The columns the store reads and writes. */
    private static final List<String> COLUMNS = List.of("caller", "scope", "idempotency_key", "status",
            "request_hash", "fencing_token", "response_status", "response_headers", "response_body", "created_at",
            "updated_at", "expires_at", "locked_until");

    /**
     * The unique key's text: compared otherwise than exactly (a case-insensitive collation, {@code character(n)}
     * ignoring trailing spaces), two callers, scopes or keys would be one record, and one caller answered with
     * another's stored answers.
     */
    private static final List<String> KEY_COLUMNS = List.of("caller", "scope", "idempotency_key");

    /** The types of text a column may have, as {@code format_type} names them. */
    private static final List<String> TEXT_TYPES = List.of("character varying", "text");

    /** The types the other columns may have, the script's first. */
    private static final Map<String, List<String>> OTHER_TYPES = Map.of(
            "fencing_token", List.of("uuid"),
            "response_status", List.of("integer", "smallint", "bigint"),
            "response_headers", TEXT_TYPES,
            "response_body", List.of("bytea"));

    /** Whether a column of {@code length} (-1: unbounded) holds fewer than {@code needed} characters. */
    private static boolean shorterThan(Integer length, int needed) {
        return length != null && length >= 0 && length < needed;
    }

    /**
     * The least a bounded headers column must hold: more than a servlet container lets an answer's headers take. The
     * replayed headers include {@code Link} and {@code Location}: a list's pagination links alone outgrow a
     * {@code varchar(255)}, and every such answer would fail when stored, after its handler ran.
     */
    private static final int MIN_HEADERS_LENGTH = 65_535;

    /** How the partitioned table is partitioned, as PostgreSQL shows it. */
    private static final String PARTITION_KEY = "RANGE (created_at)";

    /** Compared with the database's clock: stored without time zone, they would be read in each session's zone. */
    private static final List<String> TIME_COLUMNS = List.of("created_at", "updated_at", "expires_at", "locked_until");

    /**
     * A table that exists under the configured name is used as it is: one made by another tool, or from an outdated
     * or edited script, must stop the start with what is wrong rather than fail every claim — or, with its times
     * stored without time zone, compare leases and expiry differently on instances in different time zones.
     */
    private void checkShape() {
        Map<String, String> columns = new HashMap<>();
        // the type as declared (with its length), and the length of a varchar or char column (-1: unbounded)
        Map<String, String> declared = new HashMap<>();
        Map<String, Integer> lengths = new HashMap<>();
        Map<String, Integer> precisions = new HashMap<>();
        Map<String, String> inexactCollations = new HashMap<>();
        List<String> notNull = new ArrayList<>();
        List<String> requiringAValue = new ArrayList<>();
        boolean uniqueKey;
        boolean deferrableKey;
        boolean inexactKey;
        String partitionKey;
        boolean unlogged;
        List<String> narrowKeys = new ArrayList<>();
        String role = null;
        List<String> denied = new ArrayList<>();
        try (Connection connection = ReadConnections.borrow(dataSource)) {
            // the type without its modifier: a precision (timestamptz(6), as Hibernate's DDL writes it) is no other type
            // and the collation of a text column whose equality is not byte for byte (case-insensitive, say); then
            // the type as declared, and its modifier, for the length of a varchar or char
            try (PreparedStatement statement = connection.prepareStatement("SELECT a.attname, format_type(a.atttypid,"
                    + " NULL), CASE WHEN NOT c.collisdeterministic THEN c.collname END,"
                    + " format_type(a.atttypid, a.atttypmod), a.atttypmod, a.attnotnull,"
                    // NOT NULL (or of a NOT NULL domain) and filled by nothing: a generated column has a default
                    // expression, an identity none, and a column of a domain may take the domain's default; a
                    // DEFAULT NULL is kept for a column of a domain (it overrides the domain's default), and gives none
                    + " (a.attnotnull OR t.typnotnull) AND a.attidentity = '' AND CASE WHEN a.atthasdef"
                    + " THEN pg_get_expr(d.adbin, d.adrelid) ~ '^NULL(::.+)?$' ELSE t.typdefaultbin IS NULL END"
                    + " FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid"
                    + " LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
                    + " LEFT JOIN pg_collation c ON c.oid = a.attcollation WHERE a.attrelid = to_regclass(?)"
                    + " AND a.attnum > 0 AND NOT a.attisdropped")) {
                statement.setString(1, tableName);
                try (ResultSet rs = statement.executeQuery()) {
                    while (rs.next()) {
                        columns.put(rs.getString(1), rs.getString(2));
                        declared.put(rs.getString(1), rs.getString(4));
                        // a varchar's or char's typmod is its length plus 4; -1 without one
                        lengths.put(rs.getString(1), rs.getInt(5) >= 4 ? rs.getInt(5) - 4 : -1);
                        // a timestamp's typmod is its precision, fractional digits of a second; -1 without one (6)
                        precisions.put(rs.getString(1), rs.getInt(5));
                        if (rs.getString(3) != null) {
                            inexactCollations.put(rs.getString(1), rs.getString(3));
                        }
                        if (rs.getBoolean(6)) {
                            notNull.add(rs.getString(1));
                        }
                        if (rs.getBoolean(7)) {
                            requiringAValue.add(rs.getString(1));
                        }
                    }
                }
            }
            // what the plain store's INSERT … ON CONFLICT (caller, scope, idempotency_key) needs: a unique key on
            // exactly these columns, and none of them deferrable — PostgreSQL refuses to arbitrate with a deferrable
            // one, even beside an immediate one, so every claim would fail. An invalid index (a concurrent build that
            // failed) it never arbitrates with. One that names a nondeterministic collation of its own (caller
            // COLLATE a case-insensitive one) arbitrates too, whatever the columns' collations: "Alice" and "alice"
            // would be one caller's key
            try (PreparedStatement statement = connection.prepareStatement("SELECT coalesce(bool_or(i.indimmediate"
                    + " AND NOT inexact), false), coalesce(bool_or(NOT i.indimmediate), false),"
                    + " coalesce(bool_or(inexact), false) FROM pg_index i CROSS JOIN LATERAL (SELECT EXISTS (SELECT 1"
                    + " FROM pg_collation c WHERE c.oid = ANY (i.indcollation::oid[]) AND NOT c.collisdeterministic)"
                    + " AS inexact) AS k"
                    + " WHERE i.indrelid = to_regclass(?) AND i.indisunique AND i.indisvalid AND i.indpred IS NULL"
                    + " AND i.indexprs IS NULL AND i.indnkeyatts = 3 AND (SELECT array_agg(a.attname::text ORDER BY"
                    + " a.attname) FROM pg_attribute a WHERE a.attrelid = i.indrelid AND a.attnum = ANY"
                    + " ((i.indkey::int2[])[0:2])) = ARRAY['caller', 'idempotency_key', 'scope']")) {
                statement.setString(1, tableName);
                try (ResultSet rs = statement.executeQuery()) {
                    rs.next();
                    uniqueKey = rs.getBoolean(1);
                    deferrableKey = rs.getBoolean(2);
                    inexactKey = rs.getBoolean(3);
                }
            }
            // a unique key on only some of the key columns makes distinct callers', scopes' or keys' records collide:
            // the claim's insert is arbitrated on all three only, and fails on it. So does one on expressions over
            // them (lower(caller): "Alice" and "alice" one caller). A key that holds all three as they are cannot,
            // nor one that reads another column (a surrogate id; for an expression, any column it depends on, as
            // PostgreSQL records it). So does an exclusion constraint on them (with equality, a unique key under
            // another name)
            try (PreparedStatement statement = connection.prepareStatement("SELECT c.relname, (SELECT"
                    + " string_agg(pg_get_indexdef(i.indexrelid, k, true), ', ' ORDER BY k)"
                    + " FROM generate_series(1, i.indnkeyatts) AS k), i.indisexclusion FROM pg_index i"
                    + " JOIN pg_class c ON c.oid = i.indexrelid"
                    + " WHERE i.indrelid = to_regclass(?) AND (i.indisunique OR i.indisexclusion)"
                    + " AND (SELECT count(DISTINCT a.attname) FROM pg_attribute a WHERE a.attrelid = i.indrelid"
                    + " AND a.attnum = ANY ((i.indkey::int2[])[0:i.indnkeyatts - 1])"
                    + " AND a.attname IN ('caller', 'scope', 'idempotency_key')) < 3"
                    + " AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = i.indrelid"
                    + " AND a.attname NOT IN ('caller', 'scope', 'idempotency_key')"
                    + " AND (a.attnum = ANY ((i.indkey::int2[])[0:i.indnkeyatts - 1])"
                    + " OR i.indexprs IS NOT NULL AND a.attnum IN (SELECT d.refobjsubid FROM pg_depend d"
                    + " WHERE d.classid = 'pg_class'::regclass AND d.objid = i.indexrelid"
                    + " AND d.refclassid = 'pg_class'::regclass AND d.refobjid = i.indrelid)))")) {
                statement.setString(1, tableName);
                try (ResultSet rs = statement.executeQuery()) {
                    while (rs.next()) {
                        narrowKeys.add("its " + (rs.getBoolean(3) ? "exclusion constraint " : "unique key ")
                                + rs.getString(1) + " on (" + rs.getString(2) + ") makes records of distinct callers,"
                                + " scopes or keys collide");
                    }
                }
            }
            // claims put their records by creation time, and partitions are made and dropped by it
            try (PreparedStatement statement = connection.prepareStatement(
                    "SELECT pg_get_partkeydef(to_regclass(?))")) {
                statement.setString(1, tableName);
                try (ResultSet rs = statement.executeQuery()) {
                    rs.next();
                    partitionKey = rs.getString(1);
                }
            }
            // an unlogged table is emptied after a crash of the server and not replicated: every stored answer lost
            try (PreparedStatement statement = connection.prepareStatement(
                    "SELECT relpersistence = 'u' FROM pg_class WHERE oid = to_regclass(?)")) {
                statement.setString(1, tableName);
                try (ResultSet rs = statement.executeQuery()) {
                    unlogged = rs.next() && rs.getBoolean(1);
                }
            }
            // every request reads, inserts and updates a record: a table made by a DBA who granted the application's
            // role too little would fail each request (without UPDATE, once its handler had run). A grant on some
            // columns counts. A committed claim released is deleted, and the cleanup deletes expired records: without
            // DELETE, the one stays in progress until its lease runs out, and the other fails at every run while the
            // table grows
            try (PreparedStatement statement = connection.prepareStatement("SELECT current_user, privilege FROM"
                    + " unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) WITH ORDINALITY AS p(privilege, n)"
                    + " WHERE NOT CASE WHEN privilege = 'DELETE' THEN has_table_privilege(to_regclass(?), privilege)"
                    + " ELSE has_any_column_privilege(to_regclass(?), privilege) END ORDER BY n")) {
                statement.setString(1, tableName);
                statement.setString(2, tableName);
                try (ResultSet rs = statement.executeQuery()) {
                    while (rs.next()) {
                        role = rs.getString(1);
                        denied.add(rs.getString(2));
                    }
                }
            }
        } catch (SQLException e) {
            throw new IllegalStateException("could not inspect table " + tableName, e);
        }
        List<String> problems = new ArrayList<>();
        List<String> missing = COLUMNS.stream().filter(column -> !columns.containsKey(column)).toList();
        if (!missing.isEmpty()) {
            problems.add("table " + tableName + " lacks columns " + String.join(", ", missing));
        }
        for (String column : TIME_COLUMNS) {
            String type = columns.get(column);
            if (type != null && !type.equals("timestamp with time zone")) {
                problems.add(column + " is " + type + ", not timestamptz");
            } else if (type != null && precisions.get(column) >= 0 && precisions.get(column) < 3) {
                // PostgreSQL rounds to the precision: a lease written half a second short could be stored run out
                problems.add(column + " is " + declared.get(column) + ": leases count milliseconds, and a time"
                        + " rounded to fewer digits can end a lease up to half a second early; declare it timestamptz"
                        + " (or timestamptz(3) to timestamptz(6))");
            }
        }
        for (String column : KEY_COLUMNS) {
            String type = columns.get(column);
            if (type != null && !type.equals("character varying") && !type.equals("text")) {
                problems.add(column + " is " + type + ", not varchar: the unique key must compare it exactly");
            } else if (type != null && shorterThan(lengths.get(column), ScopedKey.MAX_LENGTH)) {
                problems.add(column + " is " + declared.get(column) + ": it must hold " + ScopedKey.MAX_LENGTH
                        + " characters, the longest caller, scope and key");
            } else if (inexactCollations.containsKey(column)) {
                problems.add(column + " has the nondeterministic collation " + inexactCollations.get(column)
                        + ": the unique key must compare it exactly, or it makes distinct values one");
            }
        }
        String status = columns.get("status");
        if (status != null && (!TEXT_TYPES.contains(status)
                || shorterThan(lengths.get("status"), "PROCESSING".length()))) {
            problems.add("status is " + declared.get("status") + ", not varchar(16): it holds PROCESSING, SUCCEEDED or"
                    + " FAILED, read back as written");
        }
        String hash = columns.get("request_hash");
        if (hash != null && !(hash.equals("character") ? lengths.get("request_hash") == 64
                : TEXT_TYPES.contains(hash) && !shorterThan(lengths.get("request_hash"), 64))) {
            // a char longer than the hash would read it back padded, never equal to a retry's
            problems.add("request_hash is " + declared.get("request_hash") + ", not char(64): it holds a hex SHA-256,"
                    + " read back as written");
        }
        OTHER_TYPES.forEach((column, types) -> {
            String type = columns.get(column);
            if (type != null && !types.contains(type)) {
                problems.add(column + " is " + declared.get(column) + ", not " + types.get(0));
            }
        });
        String headers = columns.get("response_headers");
        if (headers != null && TEXT_TYPES.contains(headers)
                && shorterThan(lengths.get("response_headers"), MIN_HEADERS_LENGTH)) {
            problems.add("response_headers is " + declared.get("response_headers") + ", not text: it must hold the"
                    + " stored answer's headers whole, or the answers with longer ones fail when stored");
        }
        IdempotencySchema.columnsAClaimLeavesEmpty(notNull).ifPresent(problems::add);
        IdempotencySchema.columnsNoClaimFills(requiringAValue).ifPresent(problems::add);
        if (unlogged) {
            problems.add("it is unlogged: PostgreSQL empties it after a crash of the server and does not replicate it"
                    + " to standbys, so every stored answer would be lost and each retry run its request again");
        }
        if (partitioned && !PARTITION_KEY.equals(partitionKey)) {
            problems.add("it is partitioned by " + partitionKey + ", not " + PARTITION_KEY + ": claims put their"
                    + " records, and partitions are made and dropped, by creation time");
        }
        if (!partitioned && !uniqueKey) {
            problems.add("there is no unique key on (caller, scope, idempotency_key), which arbitrates claims");
        }
        problems.addAll(narrowKeys);
        if (!partitioned && inexactKey) {
            problems.add("its unique key on (caller, scope, idempotency_key) compares with a nondeterministic"
                    + " collation of its own: it makes distinct values one (\"Alice\" and \"alice\" one caller), and"
                    + " the claims of one fail; the key must compare them exactly");
        }
        if (!partitioned && deferrableKey) {
            problems.add("its unique key on (caller, scope, idempotency_key) is deferrable, which PostgreSQL cannot"
                    + " use to arbitrate claims (INSERT … ON CONFLICT): make it not deferrable");
        }
        if (!problems.isEmpty()) {
            throw new IdempotencySchemaException(IdempotencySchemaException.Problem.WRONG_SHAPE, "table " + tableName
                    + " is not the library's idempotency table: " + String.join("; ", problems) + ". Create it from "
                    + script() + ".");
        }
        if (!denied.isEmpty()) {
            throw new IdempotencySchemaException(IdempotencySchemaException.Problem.NOT_PERMITTED, "table "
                    + tableName + " may not be used by the application's database role " + role + ": it lacks "
                    + String.join(", ", denied) + " on it, and every request reads, inserts and updates its record,"
                    + " while a committed claim that is released, and every record the cleanup removes, is deleted");
        }
    }

    /**
     * The library creates the table in the connection's default schema, and adopts (or, managed elsewhere, expects)
     * one there. One of the name that the search path finds in a later schema is not used: it may be another
     * application's (made by its own migrations, in a schema both search), whose stored answers this one would give to
     * its own requests.
     */
    private void checkSchema() {
        String found;
        String current;
        try (Connection connection = ReadConnections.borrow(dataSource);
             PreparedStatement statement = connection.prepareStatement("SELECT n.nspname, current_schema()"
                     + " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass(?)")) {
            statement.setString(1, tableName);
            try (ResultSet rs = statement.executeQuery()) {
                if (!rs.next()) {
                    return;
                }
                found = rs.getString(1);
                current = rs.getString(2);
            }
        } catch (SQLException e) {
            throw new IllegalStateException("could not inspect table " + tableName, e);
        }
        if (current != null && !current.equals(found) && !found.startsWith("pg_temp")) {
            throw new IdempotencySchemaException(IdempotencySchemaException.Problem.ELSEWHERE, "table " + tableName
                    + " is in schema " + found + ", which the search path reaches after the connection's default"
                    + " schema " + current + ", where the library creates and adopts it: it may be another"
                    + " application's, whose stored answers this one would give");
        }
    }

    /** A table made for one cleanup mode cannot serve the other: say so before anything else does, less clearly. */
    private void checkLayout(Boolean isPartitioned) {
        if (isPartitioned != null && isPartitioned != partitioned) {
            throw new IdempotencySchemaException(IdempotencySchemaException.Problem.WRONG_LAYOUT, "table "
                    + tableName + (isPartitioned
                    ? " is partitioned, but the partitioned mode is not enabled"
                    : " is not partitioned, but the partitioned mode (dropping whole partitions) is enabled")
                    + ". A table is created for one cleanup mode; to switch, migrate the records into a new"
                    + " table made from " + script() + ".");
        }
    }

    private String script() {
        return partitioned ? IdempotencySchema.POSTGRESQL_PARTITIONED_SCRIPT : IdempotencySchema.POSTGRESQL_SCRIPT;
    }

    /**
     * Whether the {@code DataSource} is a PostgreSQL one, the only database the table and its migration are made for
     * (the MariaDB store brings a schema script of its own).
     */
    public boolean onPostgreSQL() {
        return "PostgreSQL".equals(databaseProduct()[0]);
    }

    /** Another database would fail the migration or the checks with its own words for PostgreSQL's SQL. */
    private void requirePostgreSQL() {
        String[] product = databaseProduct();
        if (!"PostgreSQL".equals(product[0])) {
            throw new IdempotencySchemaException(IdempotencySchemaException.Problem.NOT_POSTGRESQL, "table "
                    + tableName + " and its migration are made for PostgreSQL (14 or later), but the DataSource is "
                    + product[0] + " " + product[1]);
        }
    }

    /** The database's product name and version, as its driver reports them. */
    private String[] databaseProduct() {
        try (Connection connection = ReadConnections.borrow(dataSource)) {
            DatabaseMetaData metaData = connection.getMetaData();
            return new String[] {metaData.getDatabaseProductName(), metaData.getDatabaseProductVersion()};
        } catch (SQLException e) {
            throw new IllegalStateException("could not connect to the database of the idempotency table "
                    + tableName + " (to ask which database it is, before creating or checking the table)", e);
        }
    }

    /**
     * The application's database role and the connection's default schema, if the role may not create tables there
     * (a DBA made the table and granted only what requests need); {@code null} if it may, or if there is no such
     * schema yet (Flyway creates it, or says why it cannot).
     */
    private String[] creationDenied() {
        try (Connection connection = ReadConnections.borrow(dataSource);
             PreparedStatement statement = connection.prepareStatement("SELECT current_user, current_schema(),"
                     + " has_schema_privilege(current_schema(), 'CREATE')")) {
            try (ResultSet rs = statement.executeQuery()) {
                rs.next();
                boolean mayCreate = rs.getBoolean(3);
                return rs.wasNull() || mayCreate ? null : new String[] {rs.getString(1), rs.getString(2)};
            }
        } catch (SQLException e) {
            throw new IllegalStateException("could not ask whether the database role may create table " + tableName,
                    e);
        }
    }

    /** Whether the table is partitioned; {@code null} if it does not exist (yet). */
    private Boolean existingLayout() {
        try (Connection connection = ReadConnections.borrow(dataSource);
             PreparedStatement statement = connection.prepareStatement(
                     "SELECT relkind FROM pg_class WHERE oid = to_regclass(?)")) {
            statement.setString(1, IdempotencySchema.checkTableName(tableName));
            try (ResultSet rs = statement.executeQuery()) {
                return rs.next() ? "p".equals(rs.getString(1)) : null;
            }
        } catch (SQLException e) {
            throw new IllegalStateException("could not inspect table " + tableName, e);
        }
    }
}
