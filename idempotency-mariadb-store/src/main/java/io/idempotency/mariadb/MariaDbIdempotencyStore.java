package io.idempotency.mariadb;

import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.IdempotencyRecord;
import io.idempotency.core.ScopedKey;
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
import java.util.List;
import java.util.UUID;
import java.util.function.IntSupplier;
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
    private static final long FIRST_PAUSE_NANOS = 2_000_000;
    private static final long MAX_PAUSE_NANOS = 25_000_000;
    private static final int MAX_CLAIM_ATTEMPTS = 10_000;
    /**
     * The latest expiry the table can hold is in the year 9999; a longer retention is cut to this one, which is
     * forever in every sense that matters.
     */
    private static final Duration MAX_RETENTION = Duration.ofDays(365L * 7000);
    private static final Pattern TABLE_NAME = Pattern.compile("[A-Za-z_][A-Za-z0-9_]{0,63}");
    private static final String NOW = "UTC_TIMESTAMP(6)";
    private static final String NO_WAIT = "SET STATEMENT innodb_lock_wait_timeout = 0 FOR ";
    private static final String COLUMNS = "status, request_hash, fencing_token, response_status, response_headers,"
            + " response_body, created_at, expires_at, locked_until, locked_until < " + NOW + " AS lease_expired";

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
        // SKIP LOCKED: never wait for a row another transaction holds, so cleanup cannot stall a claim
        this.expiredSql = "SELECT caller, scope, idempotency_key FROM " + table + " WHERE expires_at < " + NOW
                + " AND status <> 'PROCESSING' ORDER BY expires_at LIMIT ? FOR UPDATE SKIP LOCKED";
        this.deleteSql = "DELETE FROM " + table + KEY_MATCH + " AND expires_at < " + NOW
                + " AND status <> 'PROCESSING'";
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
                "UPDATE " + table + " SET fencing_token = ?, locked_until = " + plusMillis() + ", updated_at = "
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

    /** {@code NOW} plus a parameter in milliseconds; NULL when the parameter is. */
    private static String plusMillis() {
        return "DATE_ADD(" + NOW + ", INTERVAL ? * 1000 MICROSECOND)";
    }

    @Override
    public ClaimResult claim(ClaimRequest request) {
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
        return request.retention().compareTo(MAX_RETENTION) > 0 ? MAX_RETENTION : request.retention();
    }

    private static Long leaseMillis(ClaimRequest request) {
        return request.lease() == null ? null : request.lease().toMillis();
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
