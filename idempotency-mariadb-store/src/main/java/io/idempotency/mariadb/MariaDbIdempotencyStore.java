package io.idempotency.mariadb;

import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.IdempotencyRecord;
import io.idempotency.core.ScopedKey;
import io.idempotency.jdbc.IdempotencySchema;
import io.idempotency.jdbc.JdbcIdempotencyStore;
import org.springframework.dao.DataAccessException;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.transaction.TransactionDefinition;

import javax.sql.DataSource;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.UUID;
import java.util.function.IntSupplier;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The MariaDB store (10.6 and later, InnoDB), on the table of {@code io/idempotency/mariadb/schema.sql}. All
 * statements run on the connection of the transaction open on the current thread (through Spring's
 * {@link JdbcTemplate}), so they commit or roll back with the handler's own writes.
 *
 * <h2>How a claim is arbitrated</h2>
 * InnoDB facts this relies on: an {@code INSERT} that meets an <em>uncommitted</em> row with the same primary key
 * waits for that transaction's lock; at READ COMMITTED every plain {@code SELECT} reads the latest committed rows;
 * {@code innodb_lock_wait_timeout} counts whole seconds only (0: do not wait), and a wait that runs out (error 1205)
 * undoes the statement, not the transaction. Several transactions waiting to insert one key deadlock when its holder
 * rolls back (each holds the shared lock the others need to insert), and InnoDB then rolls one of them back whole.
 * Hence:
 * <ol>
 *   <li>A {@code SELECT} looks the key up (and reads the transaction's isolation level in the same round trip). A
 *       record is returned as it is — all a replay needs — or, FAILED and of the same request, taken over with a
 *       compare-and-set on its fencing token.</li>
 *   <li>No record: an {@code INSERT} that does not wait ({@code SET STATEMENT innodb_lock_wait_timeout = 0}). It
 *       claims the key; or meets a record committed since the look-up, which it leaves as it is but locks for update
 *       ({@code ON DUPLICATE KEY UPDATE}, which returns that record's fencing token instead of the claim's) and the
 *       next look-up reads; or meets an uncommitted claim (error 1205), and the claim looks again after a short pause,
 *       until {@link ClaimRequest#maxWait()} has passed ({@link ClaimResult.Busy}). A claim never waits inside the
 *       database, so the bound holds to the millisecond and no claim is ever a deadlock's victim.</li>
 * </ol>
 * A duplicate therefore learns that the claim it waits for has ended up to one pause later than it would by waiting
 * for the lock; the pause starts at 2 ms and doubles up to 25 ms. The caller's transaction must be at READ COMMITTED
 * (the claim refuses another level: at REPEATABLE READ a look-up after a conflict would not see the record that caused
 * it); the transactions the store opens itself (a write made outside one, the batch delete) run at READ COMMITTED
 * too. Times come from the database's clock ({@code UTC_TIMESTAMP(6)}). Thread-safe.
 */
public class MariaDbIdempotencyStore extends JdbcIdempotencyStore {

    /** ER_DUP_ENTRY: the key was committed since the look-up. */
    private static final int DUPLICATE_KEY = 1062;
    /** ER_LOCK_WAIT_TIMEOUT: another transaction holds the row, and the statement was not to wait. */
    private static final int LOCK_WAIT_TIMEOUT = 1205;
    /** ER_BINLOG_STMT_MODE_AND_ROW_ENGINE: a write at READ COMMITTED on a server logging statements. */
    private static final int STATEMENT_LOGGING_REFUSED = 1665;
    private static final long FIRST_PAUSE_NANOS = 2_000_000;
    private static final long MAX_PAUSE_NANOS = 25_000_000;
    private static final int MAX_CLAIM_ATTEMPTS = 10_000;
    /**
     * The latest time the table can hold is in the year 9999; a longer retention or lease is cut to this one, which is
     * forever in every sense that matters (a time beyond it fails the statement, or, where the SQL mode is not strict,
     * is written as NULL: a claim whose lease never ends).
     */
    private static final Duration MAX_RETENTION = Duration.ofDays(365L * 7000);
    private static final Pattern TABLE_NAME = Pattern.compile("[A-Za-z_][A-Za-z0-9_]{0,63}");
    /** A column as a generated column's expression names it: quoted, a backquote in it doubled. */
    private static final Pattern QUOTED_NAME = Pattern.compile("`((?:[^`]|``)*)`");
    private static final String NOW = "UTC_TIMESTAMP(6)";
    private static final String NO_WAIT = "SET STATEMENT innodb_lock_wait_timeout = 0 FOR ";
    private static final String COLUMNS = "status, request_hash, fencing_token, response_status, response_headers,"
            + " response_body, created_at, expires_at, locked_until, locked_until < " + NOW + " AS lease_expired";

    private final String tableName;
    private final int maxClaimAttempts;
    private final String lookUpSql;
    private final String insertSql;
    private final String takeOverFailedSql;
    private final String expiredSql;
    private final String deleteSql;

    /**
     * @param dataSource the application's DataSource — the one its transaction manager uses
     * @param tableName  a plain identifier (letters, digits, underscores), in the connection's database
     */
    public MariaDbIdempotencyStore(DataSource dataSource, String tableName) {
        this(dataSource, tableName, MAX_CLAIM_ATTEMPTS);
    }

    /** @param maxClaimAttempts how many times a claim looks again at a record that changed under it before it fails */
    MariaDbIdempotencyStore(DataSource dataSource, String tableName, int maxClaimAttempts) {
        // READ COMMITTED for the store's own transactions too: at REPEATABLE READ, InnoDB's default, the batch delete's
        // search would lock the gaps it scans (the end of the table when all it found had expired), and every claim
        // inserting there would be refused until it committed
        super(dataSource, statements(checkTableName(tableName)), TransactionDefinition.ISOLATION_READ_COMMITTED);
        this.maxClaimAttempts = maxClaimAttempts;
        this.tableName = tableName;
        String table = tableName;
        this.lookUpSql = "SELECT @@tx_isolation AS isolation, t.* FROM (SELECT 1 AS one) AS probe LEFT JOIN (SELECT "
                + COLUMNS + " FROM " + table + KEY_MATCH + ") AS t ON 1 = 1";
        this.insertSql = NO_WAIT + "INSERT INTO " + table + " (caller, scope, idempotency_key, status, request_hash,"
                + " fencing_token, created_at, updated_at, expires_at, locked_until) VALUES (?, ?, ?, 'PROCESSING', ?,"
                + " ?, " + NOW + ", " + NOW + ", " + plusMillis() + ", " + plusMillis() + ")"
                // a record committed since the look-up is left as it is, but locked for update (a duplicate-key
                // error would lock it shared, and two claims holding it so could never take a FAILED one over); the
                // fencing token returned tells which
                + " ON DUPLICATE KEY UPDATE status = status RETURNING fencing_token";
        this.takeOverFailedSql = NO_WAIT + "UPDATE " + table + " SET status = 'PROCESSING', request_hash = ?,"
                + " fencing_token = ?, created_at = " + NOW + ", updated_at = " + NOW + ", expires_at = "
                + plusMillis() + ", locked_until = " + plusMillis() + KEY_MATCH
                + " AND status = 'FAILED' AND fencing_token = ?";
        // SKIP LOCKED: never wait for a row another transaction holds, so cleanup cannot stall a claim. A claim still
        // in progress is kept, unless it has no lease: a claim made with its work's transaction is seen by others only
        // once committed with its answer, so one committed without (its connection committed by code of the
        // application's own) is no request's any more, and no resolver decides it
        this.expiredSql = "SELECT caller, scope, idempotency_key FROM " + table + " WHERE expires_at < " + NOW
                + " AND (status <> 'PROCESSING' OR locked_until IS NULL) ORDER BY expires_at LIMIT ?"
                + " FOR UPDATE SKIP LOCKED";
        this.deleteSql = "DELETE FROM " + table + KEY_MATCH + " AND expires_at < " + NOW
                + " AND (status <> 'PROCESSING' OR locked_until IS NULL)";
    }

    /** The table the store keeps its records in, as it was given (which the application's migrations make). */
    @Override
    public String tableName() {
        return tableName;
    }

    private static Statements statements(String table) {
        return new Statements(
                "SELECT " + COLUMNS + " FROM " + table + KEY_MATCH,
                "UPDATE " + table + " SET status = 'SUCCEEDED', response_status = ?, response_headers = ?,"
                        + " response_body = ?, updated_at = " + NOW + ", locked_until = NULL" + KEY_MATCH
                        + " AND fencing_token = ? AND status = 'PROCESSING'",
                "UPDATE " + table + " SET status = 'FAILED', updated_at = " + NOW + ", locked_until = NULL"
                        + KEY_MATCH + " AND fencing_token = ? AND status = 'PROCESSING'",
                "DELETE FROM " + table + KEY_MATCH + " AND fencing_token = ? AND status = 'PROCESSING'",
                "UPDATE " + table + " SET locked_until = " + plusMillis() + ", updated_at = " + NOW + KEY_MATCH
                        + " AND fencing_token = ? AND status = 'PROCESSING'",
                // not waiting for a claim another transaction is changing (see takeOver)
                NO_WAIT + "UPDATE " + table + " SET fencing_token = ?, locked_until = " + plusMillis() + ", updated_at = "
                        + NOW + KEY_MATCH + " AND fencing_token = ? AND status = 'PROCESSING' AND locked_until < "
                        + NOW,
                "SELECT caller, scope, idempotency_key, " + COLUMNS + " FROM " + table
                        + " WHERE status = 'PROCESSING' AND locked_until < " + NOW + " ORDER BY locked_until LIMIT ?");
    }

    /** The shipped schema script ({@code io/idempotency/mariadb/schema.sql}), for a table named {@code tableName}. */
    public static String schema(String tableName) {
        checkTableName(tableName);
        try (InputStream script = MariaDbIdempotencyStore.class.getResourceAsStream(SCHEMA_SCRIPT)) {
            if (script == null) {
                throw new IllegalStateException(SCHEMA_SCRIPT + " is missing from the class path");
            }
            return new String(script.readAllBytes(), StandardCharsets.UTF_8).replace("idempotency_keys", tableName);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** The schema script's place on the class path. */
    public static final String SCHEMA_SCRIPT = "/io/idempotency/mariadb/schema.sql";

    private static String checkTableName(String tableName) {
        if (tableName == null || !TABLE_NAME.matcher(tableName).matches()) {
            throw new IllegalArgumentException("the table name must be a plain identifier (letters, digits and"
                    + " underscores, at most 64, not starting with a digit): " + tableName);
        }
        return tableName;
    }

    /** The columns the store reads and writes. */
    private static final List<String> TABLE_COLUMNS = List.of("caller", "scope", "idempotency_key", "status",
            "request_hash", "fencing_token", "response_status", "response_headers", "response_body", "created_at",
            "updated_at", "expires_at", "locked_until");

    /** The unique key's columns: each must tell every caller, scope and key apart. */
    private static final List<String> KEY_COLUMNS = List.of("caller", "scope", "idempotency_key");

    /** The text columns the store writes values of a known length into, and that length. */
    private static final Map<String, Integer> FIXED_TEXT_COLUMNS = Map.of("status", "PROCESSING".length(),
            "request_hash", 64, "fencing_token", 36);

    /**
     * The least a body column must hold: a {@code MEDIUMBLOB}'s 16 MB, more than MariaDB's default
     * {@code max_allowed_packet} lets one statement carry, and far above the starter's default cap on stored bodies
     * (1 MB); a higher cap needs a {@code LONGBLOB} ({@link #checkStoredBodySize}). A {@code BLOB} holds 64 KB.
     */
    private static final long MIN_BODY_BYTES = 16_777_215;

    /**
     * The least the headers column must hold: a {@code TEXT}'s 64 KB, more than a servlet container lets an answer's
     * headers take. The replayed headers include {@code Link} and {@code Location}: a list's pagination links alone
     * outgrow a {@code varchar(255)}.
     */
    private static final long MIN_HEADERS_BYTES = 65_535;

    /** Written from the database's UTC clock and compared with it; a lease counts milliseconds. */
    private static final List<String> TIME_COLUMNS = List.of("created_at", "updated_at", "expires_at", "locked_until");
    /** The times a claim writes and the store's later changes of the record (answer, renewal) leave as they are. */
    private static final List<String> WRITTEN_ONCE_PER_CLAIM = List.of("created_at", "expires_at");

    /**
     * Checks, with two catalog queries and one statement on the table as the store names it (unquoted: a word MariaDB
     * reserves is refused there), that the table is the one the shipped script makes in all that the store
     * relies on: InnoDB (the claim commits or rolls back with the handler's writes); every column; the key columns
     * {@code varchar} of at least 255 characters in {@code utf8mb4_nopad_bin} — a case-insensitive collation (the
     * database's default, for a migration that leaves the collation out) or a PAD SPACE one would make "Alice" and
     * "alice", or "k" and "k ", one caller or one key, and answer each with the other's stored answers; a unique key
     * on exactly those three columns, whole (no prefix), that is the primary key (InnoDB checks an insert against a
     * secondary unique key with next-key locks, which would hold claims of other keys back), and no unique key on only
     * some of them, nor on columns generated from them ({@code lower(caller)}); the stored body a {@code longblob}
     * (or a {@code mediumblob}, 16 MB) — a {@code blob} holds 64 KB, and a larger answer would be refused or, where
     * the SQL mode is not strict, cut short and replayed so — and the stored headers a text of at
     * least 64 KB ({@code text}, {@code mediumtext}, {@code longtext}) in {@code utf8mb4} (a header value outside
     * {@code latin1} or {@code utf8mb3} would be refused, or replayed mangled); the times {@code datetime} of at least
     * millisecond precision, not {@code timestamp} (read in each session's time zone, and ending in 2038), and
     * {@code created_at} and {@code expires_at} not {@code ON UPDATE CURRENT_TIMESTAMP} (rewritten at every change).
     * Then, with the store's read, insert and update on no row, that the application's user may read, insert and
     * update the table, and, with the insert in a transaction at READ COMMITTED, that the server lets a claim write
     * (a binary log in {@code STATEMENT} format does not); last, that an empty string sent to the server stays empty
     * (an SQL mode with {@code EMPTY_STRING_IS_NULL} makes it NULL). The checks other than the insert at READ
     * COMMITTED run in a transaction that is rolled back ({@link #rolledBack}), unless the caller's transaction holds a
     * connection of the store's DataSource.
     */
    @Override
    public void checkTable() {
        rolledBack(() -> {
            checkLayout();
            checkPrivileges();
            return null;
        });
        checkWritesAtReadCommitted();
        rolledBack(() -> {
            checkEmptyStringsStayEmpty();
            return null;
        });
    }

    /** The table's engine, columns and unique keys, and its name as the store writes it. */
    private void checkLayout() {
        String engine = null;
        Map<String, Column> columns = new HashMap<>();
        List<String> requiringAValue = new ArrayList<>();
        List<String> setOnUpdate = new ArrayList<>();
        // the columns a generated column is computed from, as its expression names them (`caller`)
        Map<String, Set<String>> generatedFrom = new HashMap<>();
        List<Map<String, Object>> found = jdbc.queryForList("SELECT t.ENGINE AS engine,"
                + " c.COLUMN_NAME AS name, c.DATA_TYPE AS type, c.CHARACTER_MAXIMUM_LENGTH AS length,"
                + " c.COLLATION_NAME AS collation, c.CHARACTER_SET_NAME AS charset,"
                + " c.DATETIME_PRECISION AS time_precision, c.IS_NULLABLE AS nullable,"
                // NOT NULL and filled by nothing: no default (a DEFAULT NULL reads 'NULL'), not AUTO_INCREMENT
                + " c.IS_NULLABLE = 'NO' AND c.COLUMN_DEFAULT IS NULL AND c.EXTRA NOT LIKE '%auto_increment%'"
                + " AND c.EXTRA NOT LIKE '%GENERATED%' AS requires_value,"
                + " c.EXTRA LIKE '%on update%' AS on_update, c.GENERATION_EXPRESSION AS generated"
                + " FROM information_schema.TABLES t LEFT JOIN information_schema.COLUMNS c"
                + " ON c.TABLE_SCHEMA = t.TABLE_SCHEMA AND c.TABLE_NAME = t.TABLE_NAME"
                + " WHERE t.TABLE_SCHEMA = DATABASE() AND t.TABLE_NAME = ?", tableName);
        if (found.isEmpty()) {
            String database = jdbc.queryForObject("SELECT DATABASE()", String.class);
            throw new IllegalStateException("table " + tableName + " does not exist in database " + database + ":"
                    + " create it from " + SCHEMA_SCRIPT.substring(1) + " (MariaDbIdempotencyStore.schema(\""
                    + tableName + "\") gives it with the table name replaced) in the application's migrations");
        }
        for (Map<String, Object> row : found) {
            engine = (String) row.get("engine");
            if (row.get("name") != null) {
                columns.put(((String) row.get("name")).toLowerCase(Locale.ROOT), new Column((String) row.get("type"),
                        row.get("length") == null ? null : ((Number) row.get("length")).longValue(),
                        (String) row.get("collation"), (String) row.get("charset"),
                        row.get("time_precision") == null ? null
                        : ((Number) row.get("time_precision")).intValue(), "NO".equals(row.get("nullable"))));
                if (row.get("requires_value") != null && ((Number) row.get("requires_value")).intValue() == 1) {
                    requiringAValue.add(((String) row.get("name")).toLowerCase(Locale.ROOT));
                }
                if (row.get("on_update") != null && ((Number) row.get("on_update")).intValue() == 1) {
                    setOnUpdate.add(((String) row.get("name")).toLowerCase(Locale.ROOT));
                }
                if (row.get("generated") != null) {
                    Set<String> from = new HashSet<>();
                    Matcher named = QUOTED_NAME.matcher((String) row.get("generated"));
                    while (named.find()) {
                        from.add(named.group(1).replace("``", "`").toLowerCase(Locale.ROOT));
                    }
                    generatedFrom.put(((String) row.get("name")).toLowerCase(Locale.ROOT), from);
                }
            }
        }
        // each unique key's columns in order, with their prefix length when only a prefix is indexed
        Map<String, List<String>> uniqueKeys = new LinkedHashMap<>();
        Map<String, Boolean> prefixed = new HashMap<>();
        jdbc.query("SELECT INDEX_NAME, COLUMN_NAME, SUB_PART FROM information_schema.STATISTICS"
                + " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND NON_UNIQUE = 0"
                + " ORDER BY INDEX_NAME, SEQ_IN_INDEX", rs -> {
            String index = rs.getString(1);
            uniqueKeys.computeIfAbsent(index, i -> new ArrayList<>()).add(rs.getString(2).toLowerCase(Locale.ROOT));
            prefixed.merge(index, rs.getObject(3) != null, Boolean::logicalOr);
        }, tableName);

        List<String> problems = new ArrayList<>();
        try {
            // the store's statements write the name unquoted: a word MariaDB reserves names a table only quoted
            jdbc.queryForList("SELECT 1 FROM " + tableName + " WHERE 1 = 0");
        } catch (DataAccessException e) {
            problems.add("its name, which the store writes unquoted in its statements, is refused there (a word"
                    + " MariaDB reserves names a table only quoted; give it another name): "
                    + e.getMostSpecificCause().getMessage());
        }
        if (engine != null && !"InnoDB".equalsIgnoreCase(engine)) {
            problems.add("it is a " + engine + " table, not InnoDB: claims and answers must commit and roll back"
                    + " with the handler's writes");
        }
        List<String> missing = TABLE_COLUMNS.stream().filter(column -> !columns.containsKey(column)).toList();
        if (!missing.isEmpty()) {
            problems.add("it lacks columns " + String.join(", ", missing));
        }
        for (String name : KEY_COLUMNS) {
            Column column = columns.get(name);
            if (column == null) {
                continue;
            }
            if (!"varchar".equalsIgnoreCase(column.type())) {
                problems.add(name + " is " + column + ", not varchar(255)");
            } else if (column.length() < ScopedKey.MAX_LENGTH) {
                problems.add(name + " is " + column + ": it must hold " + ScopedKey.MAX_LENGTH + " characters, the"
                        + " longest caller, scope and key");
            }
            if (!"utf8mb4_nopad_bin".equalsIgnoreCase(column.collation())) {
                problems.add(name + " has collation " + column.collation() + ", not utf8mb4_nopad_bin: the unique"
                        + " key must compare it byte for byte, or values that differ in case or trailing spaces are"
                        + " one, and one caller is answered with another's stored answers");
            }
        }
        FIXED_TEXT_COLUMNS.forEach((name, length) -> {
            Column column = columns.get(name);
            if (column != null && (column.length() == null || column.length() < length)) {
                problems.add(name + " is " + column + ": it must hold " + length + " characters");
            }
        });
        Column status = columns.get("response_status");
        if (status != null && !STATUS_TYPES.contains(status.type().toLowerCase(Locale.ROOT))) {
            problems.add("response_status is " + status + ", not an integer type of at least smallint (int, as made):"
                    + " it must hold every HTTP status (a tinyint holds 127 at most: an answer of 200 or 404 is"
                    + " refused, and its request answered 500, or, where the SQL mode is not strict, replayed as"
                    + " 127)");
        }
        Column body = columns.get("response_body");
        if (body != null && (!body.type().toLowerCase(Locale.ROOT).endsWith("blob") || body.length() == null
                || body.length() < MIN_BODY_BYTES)) {
            problems.add("response_body is " + body.type() + ", not longblob: it must hold every stored answer's bytes"
                    + " as they are, up to the cap on stored bodies (a blob keeps 64 KB: a larger answer is refused,"
                    + " and its request answered 500, or, where the SQL mode is not strict, cut short and replayed so;"
                    + " a text column refuses bytes that are not text in its character set)");
        }
        Column headers = columns.get("response_headers");
        if (headers != null && (!headers.type().toLowerCase(Locale.ROOT).endsWith("text") || headers.length() == null
                || headers.length() < MIN_HEADERS_BYTES)) {
            problems.add("response_headers is " + headers + ", not mediumtext: it must hold the stored answer's"
                    + " headers whole (cut short, they are refused, and the request answered 500, or, where the SQL"
                    + " mode is not strict, replayed cut)");
        }
        if (headers != null && headers.charset() != null && !"utf8mb4".equalsIgnoreCase(headers.charset())) {
            problems.add("response_headers is in character set " + headers.charset() + ", not utf8mb4: it must hold"
                    + " every character of the stored answer's headers (one outside it is refused, and the request"
                    + " answered 500 after its handler ran, or, where the SQL mode is not strict, replayed as '?')");
        }
        for (String name : TIME_COLUMNS) {
            Column column = columns.get(name);
            if (column != null && (!"datetime".equalsIgnoreCase(column.type()) || column.precision() == null
                    || column.precision() < 3)) {
                problems.add(name + " is " + column + ", not datetime(6): times are UTC from the database's clock,"
                        + " and leases count milliseconds");
            }
        }
        for (String name : WRITTEN_ONCE_PER_CLAIM) {
            if (setOnUpdate.contains(name)) {
                problems.add(name + " is ON UPDATE CURRENT_TIMESTAMP: the database would rewrite it, with the"
                        + " session's time, at every change of the record that does not set it (the answer written, a"
                        + " lease renewed), so a completed request's record could expire at once, and a retry run the"
                        + " request again");
            }
        }
        IdempotencySchema.columnsAClaimLeavesEmpty(columns.entrySet().stream()
                .filter(column -> column.getValue().notNull()).map(Map.Entry::getKey).toList()).ifPresent(problems::add);
        IdempotencySchema.columnsNoClaimFills(requiringAValue).ifPresent(problems::add);
        boolean key = false;
        for (Map.Entry<String, List<String>> unique : uniqueKeys.entrySet()) {
            List<String> indexed = unique.getValue();
            boolean onKeyColumnsOnly = KEY_COLUMNS.containsAll(indexed);
            // a column generated from key columns only (lower(caller)) tells no more apart than they do
            boolean fromKeyColumnsOnly = indexed.stream().allMatch(column -> KEY_COLUMNS.contains(column)
                    || generatedFrom.containsKey(column) && KEY_COLUMNS.containsAll(generatedFrom.get(column)));
            boolean holdsTheKey = indexed.containsAll(KEY_COLUMNS) && !prefixed.get(unique.getKey());
            if (onKeyColumnsOnly && indexed.size() == KEY_COLUMNS.size() && !prefixed.get(unique.getKey())) {
                key = true;
            } else if (fromKeyColumnsOnly && !holdsTheKey) {
                problems.add("its unique key " + unique.getKey() + " on (" + String.join(", ", indexed) + ")"
                        + (prefixed.get(unique.getKey()) ? ", of a prefix," : "") + " makes records of distinct"
                        + " callers, scopes or keys collide");
            }
        }
        if (!key) {
            problems.add("there is no unique key on (caller, scope, idempotency_key), whole columns, which"
                    + " arbitrates claims");
        } else if (!uniqueKeys.containsKey("PRIMARY") || uniqueKeys.get("PRIMARY").size() != KEY_COLUMNS.size()
                || !KEY_COLUMNS.containsAll(uniqueKeys.get("PRIMARY"))) {
            // InnoDB checks an insert against a secondary unique key with next-key locks, at READ COMMITTED too
            problems.add((uniqueKeys.containsKey("PRIMARY") ? "its primary key is (" + String.join(", ",
                    uniqueKeys.get("PRIMARY")) + ")" : "it has no primary key") + ", not (caller, scope,"
                    + " idempotency_key): InnoDB checks a claim against a secondary unique key with locks on the gap"
                    + " before the record it finds, and a claim of a key whose deleted record is not yet purged (a"
                    + " released claim, a record cleanup removed) would refuse the claims of other keys in that gap"
                    + " for as long as its transaction runs, each answered 409 although no one holds its key; a"
                    + " surrogate id may stay, with a unique key of its own");
        }
        if (!problems.isEmpty()) {
            throw new IllegalStateException("table " + tableName + " is not the MariaDB store's table: "
                    + String.join("; ", problems) + ". Create it from " + SCHEMA_SCRIPT.substring(1)
                    + " (MariaDbIdempotencyStore.schema(\"" + tableName + "\") gives it with the table name"
                    + " replaced).");
        }
    }

    /**
     * Where the session's SQL mode has {@code EMPTY_STRING_IS_NULL}, an empty string in a statement's text is NULL,
     * and Connector/J writes parameters into the text (unless it prepares statements on the server): the anonymous
     * caller, {@code ""}, of every claim would be refused (the column takes no NULL), the look-ups of its records
     * would find none, and an empty answer body would be stored as NULL. An empty text and an empty byte string,
     * sent as the store sends its parameters, show it.
     */
    private void checkEmptyStringsStayEmpty() {
        Integer lost = jdbc.queryForObject("SELECT ? IS NULL OR ? IS NULL", Integer.class, "", new byte[0]);
        if (lost != null && lost != 0) {
            throw new IllegalStateException("table " + tableName + " cannot be used by sessions that take an empty"
                    + " string for NULL: the session's sql_mode (" + jdbc.queryForObject("SELECT @@SESSION.sql_mode",
                    String.class) + ") has EMPTY_STRING_IS_NULL, and every anonymous request's caller, '', and every"
                    + " empty answer body would be written as NULL, so each anonymous claim would be refused. Leave"
                    + " EMPTY_STRING_IS_NULL out of the sql_mode of the application's sessions.");
        }
    }

    /** The columns a claim inserts, in the store's statement. */
    private static final List<String> INSERTED_COLUMNS = List.of("caller", "scope", "idempotency_key", "status",
            "request_hash", "fencing_token", "created_at", "updated_at", "expires_at", "locked_until");

    /**
     * Every request reads, inserts and updates its record: a table made by a DBA who granted the application's user
     * too little (MariaDB grants on the server, a database, a table or some columns) would let the application start
     * and then fail each request (without UPDATE, every claim: it inserts {@code ON DUPLICATE KEY UPDATE}). A committed
     * claim that is released is deleted, and so is every record the cleanup removes: without DELETE, the one stays in
     * progress until its lease runs out, and the other fails at every run while the table grows. The store's reads
     * and writes, on no row, show it: MariaDB checks the privileges before it looks for rows.
     */
    private void checkPrivileges() {
        List<String> denied = new ArrayList<>();
        for (String probe : privilegeProbes()) {
            try {
                jdbc.execute(probe);
            } catch (DataAccessException e) {
                denied.add(e.getMostSpecificCause().getMessage());
            }
        }
        if (!denied.isEmpty()) {
            throw new IllegalStateException("table " + tableName + " may not be used by the application's database"
                    + " user " + jdbc.queryForObject("SELECT CURRENT_USER()", String.class) + ", and every request"
                    + " reads, inserts and updates its record, while a committed claim that is released, and every"
                    + " record the cleanup removes, is deleted: " + String.join("; ", denied));
        }
    }

    /** The store's read, insert, update and delete of the table, each on no row. */
    private List<String> privilegeProbes() {
        return List.of(
                "SELECT " + String.join(", ", TABLE_COLUMNS) + " FROM " + tableName + " WHERE 1 = 0",
                insertOnNoRow(),
                "UPDATE " + tableName + " SET " + String.join(", ", TABLE_COLUMNS.stream()
                        .filter(column -> !KEY_COLUMNS.contains(column)).map(column -> column + " = " + column)
                        .toList()) + " WHERE 1 = 0",
                "DELETE FROM " + tableName + " WHERE 1 = 0");
    }

    /** The claim's insert, on no row. */
    private String insertOnNoRow() {
        return "INSERT INTO " + tableName + " (" + String.join(", ", INSERTED_COLUMNS) + ") SELECT "
                + String.join(", ", INSERTED_COLUMNS.stream().map(column -> "NULL").toList())
                + " FROM DUAL WHERE 1 = 0 ON DUPLICATE KEY UPDATE status = status";
    }

    /**
     * Every claim writes at READ COMMITTED, where InnoDB can only be logged row by row: a server that keeps a binary
     * log with {@code binlog_format=STATEMENT} (for the application's sessions) refuses each such write, and would
     * fail every claim after the application started. The store's insert, on no row, in a transaction at READ
     * COMMITTED shows it: the server decides how to log a statement before it looks for rows.
     */
    private void checkWritesAtReadCommitted() {
        try {
            committed(() -> jdbc.update(insertOnNoRow()));
        } catch (DataAccessException e) {
            if (errorCode(e) != STATEMENT_LOGGING_REFUSED) {
                throw e;
            }
            throw new IllegalStateException("table " + tableName + " cannot be written at READ COMMITTED, the level"
                    + " every claim runs at: the server keeps a binary log with binlog_format=STATEMENT, in which"
                    + " InnoDB's writes at READ COMMITTED cannot be logged, and every claim would be refused ("
                    + e.getMostSpecificCause().getMessage() + "). Set binlog_format to MIXED (MariaDB's default) or"
                    + " ROW, in the server's configuration or for the application's sessions.");
        }
    }

    /**
     * What the statement that stores an answer carries beyond its body, with room to spare: the headers (a servlet
     * container lets an answer's take a few KB) and the key, both possibly escaped, and the statement's own text.
     */
    private static final long STATEMENT_BEYOND_THE_BODY = 256 * 1024;

    /**
     * Checks that an answer body of {@code maxBodyBytes} can be stored: the body column holds it (a {@code mediumblob}
     * keeps 16 MB, a {@code longblob} 4 GB), and the server's {@code max_allowed_packet}, the most one statement may
     * take, holds the statement that writes it: twice the body (MariaDB Connector/J sends it in the statement's text,
     * where a zero byte, a quote or a backslash takes two bytes) and 256 KB for the rest. A larger statement is refused
     * (the server closes the connection), and its request, its handler having run, fails.
     */
    @Override
    public void checkStoredBodySize(long maxBodyBytes) {
        Map<String, Object> found = rolledBack(() -> jdbc.queryForMap("SELECT @@max_allowed_packet AS packet,"
                + " (SELECT DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()"
                + " AND TABLE_NAME = ? AND COLUMN_NAME = 'response_body') AS type,"
                + " (SELECT CHARACTER_MAXIMUM_LENGTH FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()"
                + " AND TABLE_NAME = ? AND COLUMN_NAME = 'response_body') AS length", tableName, tableName));
        List<String> problems = new ArrayList<>();
        if (found.get("length") != null && ((Number) found.get("length")).longValue() < maxBodyBytes) {
            problems.add("the body column, response_body, is a " + found.get("type") + ", which holds "
                    + found.get("length") + " bytes: make it a longblob");
        }
        long packet = ((Number) found.get("packet")).longValue();
        long needed = maxBodyBytes > (Long.MAX_VALUE - STATEMENT_BEYOND_THE_BODY) / 2 ? Long.MAX_VALUE
                : 2 * maxBodyBytes + STATEMENT_BEYOND_THE_BODY;
        if (packet < needed) {
            problems.add("the server's max_allowed_packet (" + packet + " bytes), the most one statement may take,"
                    + " must hold the statement that stores such an answer: at least " + needed + " bytes (twice the"
                    + " body, whose bytes Connector/J may send escaped as two each, and 256 KB for the headers and"
                    + " the key); raise it in the server's configuration");
        }
        if (!problems.isEmpty()) {
            throw new IllegalStateException("an answer body of up to " + maxBodyBytes + " bytes cannot be stored in"
                    + " table " + tableName + ", and a request whose answer is larger than it can hold would fail"
                    + " when its answer is stored, after its handler ran: " + String.join("; ", problems) + ".");
        }
    }

    /** Integer types that hold every HTTP status (100 to 999), as the catalog names them ({@code DATA_TYPE}). */
    private static final List<String> STATUS_TYPES = List.of("smallint", "mediumint", "int", "bigint");

    /** A column as the catalog describes it. */
    private record Column(String type, Long length, String collation, String charset, Integer precision,
                          boolean notNull) {

        @Override
        public String toString() {
            return type + (length != null && type.toLowerCase(Locale.ROOT).contains("char") ? "(" + length + ")"
                    : precision != null ? "(" + precision + ")" : "");
        }
    }

    /** {@code NOW} plus a parameter in milliseconds; NULL when the parameter is. */
    private static String plusMillis() {
        return "DATE_ADD(" + NOW + ", INTERVAL ? * 1000 MICROSECOND)";
    }

    /**
     * Does not wait for a claim another transaction is changing — its holder recording its result in a commit that
     * outlasts the lease, a renewal, another takeover — and does not take it over (error 1205, which undoes the
     * statement only): a retry would otherwise wait for it past its bounded wait, and a sweeper stop at it, for as
     * long as {@code innodb_lock_wait_timeout}, and then fail.
     */
    @Override
    public Optional<String> takeOver(ScopedKey key, String expiredToken, Duration lease) {
        try {
            return super.takeOver(key, expiredToken, atMostForever(lease));
        } catch (DataAccessException e) {
            if (errorCode(e) == LOCK_WAIT_TIMEOUT) {
                return Optional.empty();
            }
            throw e;
        }
    }

    /** A lease beyond what the table can hold is cut, as a claim's is. */
    @Override
    public boolean renew(ScopedKey key, String fencingToken, Duration lease) {
        return super.renew(key, fencingToken, atMostForever(lease));
    }

    @Override
    public ClaimResult claim(ClaimRequest request) {
        return claimCommitted(() -> claimInTransaction(request));
    }

    private ClaimResult claimInTransaction(ClaimRequest request) {
        checkClaimTransaction();
        long deadline = System.nanoTime() + request.maxWait().toNanos();
        long pause = FIRST_PAUSE_NANOS;
        ScopedKey key = request.key();
        // only a record that changed between look-up and write uses up an attempt: looking again after a pause for
        // another transaction's claim is bounded by the wait, however long the application lets a claim wait
        int attempt = 0;
        while (attempt < maxClaimAttempts) {
            LookUp lookUp = jdbc.queryForObject(lookUpSql, (rs, n) -> new LookUp(rs.getString("isolation"),
                    rs.getString("status") == null ? null : record(key, rs)), key.caller(), key.scope(), key.key());
            if (!"READ-COMMITTED".equals(lookUp.isolation())) {
                throw new IllegalStateException("the idempotency claim must run at READ COMMITTED, but the"
                        + " transaction runs at " + lookUp.isolation());
            }
            IdempotencyRecord record = lookUp.record();
            Integer refused;
            ClaimResult result;
            String token = UUID.randomUUID().toString();
            if (record == null) {
                String[] inserted = new String[1];
                refused = errorOf(() -> {
                    inserted[0] = jdbc.queryForObject(insertSql, String.class, key.caller(), key.scope(), key.key(),
                            request.requestHash(), token, retention(request).toMillis(), leaseMillis(request));
                    return 1;
                });
                // another token: a record committed since the look-up, which the next look-up reads
                result = refused == null && token.equals(inserted[0]) ? new ClaimResult.Claimed(token) : null;
            } else if (!takesOver(record, request.requestHash())) {
                return new ClaimResult.Existing(record);
            } else {
                int[] taken = new int[1];
                refused = errorOf(() -> taken[0] = jdbc.update(takeOverFailedSql, request.requestHash(), token,
                        retention(request).toMillis(), leaseMillis(request), key.caller(), key.scope(), key.key(),
                        record.fencingToken()));
                // 0 rows: another request took the FAILED record over first: look again
                result = refused == null && taken[0] == 1 ? new ClaimResult.Claimed(token, true) : null;
            }
            if (result != null) {
                return result;
            }
            if (refused != null && refused == LOCK_WAIT_TIMEOUT) {
                // another transaction holds the key: look again after a pause, within the bounded wait
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    return new ClaimResult.Busy();
                }
                if (!pause(Math.min(pause, left))) {
                    // the thread is being stopped: "come back later", as when the wait runs out (a listener container
                    // stopping its consumers must not take the claim's wait for a failed message)
                    return new ClaimResult.Busy();
                }
                pause = Math.min(pause * 2, MAX_PAUSE_NANOS);
                continue;
            }
            // otherwise the record changed between look-up and write (committed, taken over, released): look again
            attempt++;
        }
        throw new IllegalStateException("could not claim " + key + " in " + maxClaimAttempts
                + " attempts: the record keeps changing between claim and read");
    }

    private record LookUp(String isolation, IdempotencyRecord record) {
    }

    /**
     * Runs a write that must not wait; returns null when it ran, or the error code of a key committed meanwhile (1062)
     * or of a row another transaction holds (1205). Either undoes the statement only; others are thrown.
     */
    private static Integer errorOf(IntSupplier write) {
        try {
            write.getAsInt();
            return null;
        } catch (DataAccessException e) {
            int code = errorCode(e);
            if (code == DUPLICATE_KEY || code == LOCK_WAIT_TIMEOUT) {
                return code;
            }
            throw e;
        }
    }

    /** Waits {@code nanos}; false if the thread was interrupted, whose interrupt is kept for its caller. */
    private static boolean pause(long nanos) {
        try {
            Thread.sleep(nanos / 1_000_000, (int) (nanos % 1_000_000));
            return true;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    private static Duration retention(ClaimRequest request) {
        return atMostForever(request.retention());
    }

    private static Long leaseMillis(ClaimRequest request) {
        return request.lease() == null ? null : atMostForever(request.lease()).toMillis();
    }

    /** {@code duration}, or {@link #MAX_RETENTION} when it is longer (null stays null: the SPI checks leases). */
    private static Duration atMostForever(Duration duration) {
        return duration != null && duration.compareTo(MAX_RETENTION) > 0 ? MAX_RETENTION : duration;
    }

    @Override
    public int deleteExpired(int limit) {
        if (limit < 1) {
            throw new IllegalArgumentException("limit must be positive: " + limit);
        }
        return committed(() -> {
            List<Object[]> expired = jdbc.query(expiredSql, (rs, n) -> new Object[] {rs.getString(1),
                    rs.getString(2), rs.getString(3)}, limit);
            int deleted = 0;
            for (int count : expired.isEmpty() ? new int[0] : jdbc.batchUpdate(deleteSql, expired)) {
                // a driver sending the batch in bulk reports no count (SUCCESS_NO_INFO); each row was locked above,
                // still expired and finished, so each delete removed its row
                deleted += count == Statement.SUCCESS_NO_INFO ? 1 : Math.max(count, 0);
            }
            return deleted;
        });
    }

    /** A {@code datetime} column, which holds UTC: read as it is, not in the JVM's time zone. */
    @Override
    protected Instant instant(ResultSet rs, String column) throws SQLException {
        LocalDateTime value = rs.getObject(column, LocalDateTime.class);
        return value == null ? null : value.toInstant(ZoneOffset.UTC);
    }

    private static int errorCode(Throwable e) {
        for (Throwable cause = e; cause != null; cause = cause.getCause()) {
            if (cause instanceof SQLException sql && sql.getErrorCode() != 0) {
                return sql.getErrorCode();
            }
        }
        return 0;
    }
}
