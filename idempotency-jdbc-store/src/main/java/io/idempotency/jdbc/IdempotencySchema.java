package io.idempotency.jdbc;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.Collection;
import java.util.List;
import java.util.Locale;
import java.util.Optional;
import java.util.Set;
import java.util.regex.Pattern;

/**
 * The shipped schema scripts: a plain table, and one partitioned by creation time. They are written for the default
 * table name {@value #DEFAULT_TABLE_NAME}; {@link #postgresql(String)} and {@link #postgresqlPartitioned(String)}
 * give them for another name (constraint, index and partition names follow the table name).
 */
public final class IdempotencySchema {

    /** The table name used when none is configured. */
    public static final String DEFAULT_TABLE_NAME = "idempotency_keys";

    /** Where the PostgreSQL script lies in the jar. */
    public static final String POSTGRESQL_SCRIPT = "io/idempotency/jdbc/postgresql/schema.sql";

    /** Where the script of the table partitioned by creation time lies in the jar. */
    public static final String POSTGRESQL_PARTITIONED_SCRIPT = "io/idempotency/jdbc/postgresql/partitioned-schema.sql";

    /**
     * The longest table name: PostgreSQL cuts names at 63 characters, and the longest name derived from the table's
     * (an index, a partition: the table's name plus {@code _pYYYYMMDD_HHMMSS}) adds 17; cut, two such names could
     * collide.
     */
    public static final int MAX_TABLE_NAME_LENGTH = 63 - 17;

    private static final Pattern TABLE_NAME = Pattern.compile("[A-Za-z_][A-Za-z0-9_]{0," + (MAX_TABLE_NAME_LENGTH - 1) + "}");

    private IdempotencySchema() {
    }

    /** The PostgreSQL script for {@code tableName}. */
    public static String postgresql(String tableName) {
        return read(POSTGRESQL_SCRIPT).replace(DEFAULT_TABLE_NAME, checkTableName(tableName));
    }

    /** The PostgreSQL script of the partitioned table, for {@code tableName}. */
    public static String postgresqlPartitioned(String tableName) {
        return read(POSTGRESQL_PARTITIONED_SCRIPT).replace(DEFAULT_TABLE_NAME, checkTableName(tableName));
    }

    /**
     * The key words that PostgreSQL (14 and later) reserves, and those it reserves but for function and type names:
     * unquoted, none of them can name a table ({@code create table user} is a syntax error). Its other key words can.
     */
    private static final Set<String> RESERVED_WORDS = Set.of("ALL", "ANALYSE", "ANALYZE", "AND", "ANY", "ARRAY",
            "AS", "ASC", "ASYMMETRIC", "AUTHORIZATION", "BINARY", "BOTH", "CASE", "CAST", "CHECK", "COLLATE",
            "COLLATION", "COLUMN", "CONCURRENTLY", "CONSTRAINT", "CREATE", "CROSS", "CURRENT_CATALOG", "CURRENT_DATE",
            "CURRENT_ROLE", "CURRENT_SCHEMA", "CURRENT_TIME", "CURRENT_TIMESTAMP", "CURRENT_USER", "DEFAULT",
            "DEFERRABLE", "DESC", "DISTINCT", "DO", "ELSE", "END", "EXCEPT", "FALSE", "FETCH", "FOR", "FOREIGN",
            "FREEZE", "FROM", "FULL", "GRANT", "GROUP", "HAVING", "ILIKE", "IN", "INITIALLY", "INNER", "INTERSECT",
            "INTO", "IS", "ISNULL", "JOIN", "LATERAL", "LEADING", "LEFT", "LIKE", "LIMIT", "LOCALTIME",
            "LOCALTIMESTAMP", "NATURAL", "NOT", "NOTNULL", "NULL", "OFFSET", "ON", "ONLY", "OR", "ORDER", "OUTER",
            "OVERLAPS", "PLACING", "PRIMARY", "REFERENCES", "RETURNING", "RIGHT", "SELECT", "SESSION_USER",
            "SIMILAR", "SOME", "SYMMETRIC", "SYSTEM_USER", "TABLE", "TABLESAMPLE", "THEN", "TO", "TRAILING", "TRUE",
            "UNION", "UNIQUE", "USER", "USING", "VARIADIC", "VERBOSE", "WHEN", "WHERE", "WINDOW", "WITH");

    /**
     * Table names are spliced into SQL unquoted, so only plain identifiers are accepted (the table is created in, and
     * looked up through, the connection's default schema), and no key word PostgreSQL reserves.
     *
     * @throws IllegalArgumentException if {@code tableName} is not a plain SQL identifier of at most
     *                                  {@value #MAX_TABLE_NAME_LENGTH} characters, or is a reserved key word
     */
    public static String checkTableName(String tableName) {
        if (tableName == null || !TABLE_NAME.matcher(tableName).matches()) {
            throw new IllegalArgumentException("idempotency table name must be a plain SQL identifier"
                    + " ([A-Za-z_][A-Za-z0-9_]*) of at most " + MAX_TABLE_NAME_LENGTH + " characters, so that the"
                    + " index and partition names made from it fit PostgreSQL's 63: " + tableName);
        }
        if (isReservedWord(tableName)) {
            throw new IllegalArgumentException("idempotency table name must not be a key word PostgreSQL reserves:"
                    + " it is written unquoted in SQL, where a reserved word names no table: " + tableName);
        }
        return tableName;
    }

    /** The columns a claim leaves empty: the answer, which comes later, and the lease, which only some claims have. */
    private static final List<String> EMPTY_IN_A_CLAIM = List.of("response_status", "response_headers",
            "response_body", "locked_until");

    /**
     * The problem with a table of which the columns {@code notNull} are declared NOT NULL, if some of them are columns
     * a claim leaves empty: every claim would fail.
     */
    public static Optional<String> columnsAClaimLeavesEmpty(Collection<String> notNull) {
        List<String> required = EMPTY_IN_A_CLAIM.stream().filter(notNull::contains).toList();
        if (required.isEmpty()) {
            return Optional.empty();
        }
        return Optional.of(String.join(", ", required) + (required.size() == 1 ? " is" : " are") + " NOT NULL, but a"
                + " claim leaves " + (required.size() == 1 ? "it" : "them") + " empty (it has no answer yet, and in the"
                + " default mode no lease): every claim would fail");
    }

    /** The columns a claim writes a value in. */
    private static final List<String> WRITTEN_BY_A_CLAIM = List.of("caller", "scope", "idempotency_key", "status",
            "request_hash", "fencing_token", "created_at", "updated_at", "expires_at", "locked_until");

    /** The columns a store reads or writes: those a claim writes, and the answer's. */
    private static final List<String> STORE_COLUMNS = List.of("caller", "scope", "idempotency_key", "status",
            "request_hash", "fencing_token", "response_status", "response_headers", "response_body", "created_at",
            "updated_at", "expires_at", "locked_until");

    /**
     * The problem with a table of which the columns {@code requiringAValue} are declared NOT NULL and get no value by
     * themselves (no default, no identity, not generated), if some of them are columns of the table's own that no
     * store writes (a surrogate id, a version an ORM's DDL added): a claim writes no value in them, and every claim
     * would fail.
     */
    public static Optional<String> columnsNoClaimFills(Collection<String> requiringAValue) {
        List<String> unfilled = requiringAValue.stream().filter(column -> !STORE_COLUMNS.contains(column)).sorted()
                .toList();
        if (unfilled.isEmpty()) {
            return Optional.empty();
        }
        return Optional.of(String.join(", ", unfilled) + (unfilled.size() == 1 ? " is" : " are") + " NOT NULL with"
                + " no default, but a claim writes only " + String.join(", ", WRITTEN_BY_A_CLAIM) + ": every claim"
                + " would fail. Give " + (unfilled.size() == 1 ? "it" : "them") + " a default, or let "
                + (unfilled.size() == 1 ? "it" : "them") + " be NULL");
    }

    /** Whether {@code name} (in any case) is a key word PostgreSQL reserves for table names. */
    public static boolean isReservedWord(String name) {
        return RESERVED_WORDS.contains(name.toUpperCase(Locale.ROOT));
    }

    private static String read(String resource) {
        try (InputStream in = IdempotencySchema.class.getClassLoader().getResourceAsStream(resource)) {
            if (in == null) {
                throw new IllegalStateException("schema script missing from the class path: " + resource);
            }
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
