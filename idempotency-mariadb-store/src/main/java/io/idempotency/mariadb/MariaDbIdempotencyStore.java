package io.idempotency.mariadb;

import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.IdempotencyRecord;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.core.RecordStatus;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StoredResponse;
import org.springframework.dao.DataAccessException;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.jdbc.datasource.TransactionAwareDataSourceProxy;
import org.springframework.transaction.support.TransactionSynchronizationManager;
import org.springframework.transaction.support.TransactionTemplate;

import javax.sql.DataSource;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.List;
import java.util.Optional;
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
 *       claims the key; or meets a committed record (error 1062: it was committed since the look-up), which the next
 *       look-up reads; or meets an uncommitted claim (error 1205), and the claim looks again after a short pause,
 *       until {@link ClaimRequest#maxWait()} has passed ({@link ClaimResult.Busy}). A claim never waits inside the
 *       database, so the bound holds to the millisecond and no claim is ever a deadlock's victim.</li>
 * </ol>
 * A duplicate therefore learns that the claim it waits for has ended up to one pause later than it would by waiting
 * for the lock; the pause starts at 2 ms and doubles up to 25 ms. The caller's transaction must be at READ COMMITTED
 * (the claim refuses another level: at REPEATABLE READ a look-up after a conflict would not see the record that caused
 * it). Times come from the database's clock ({@code UTC_TIMESTAMP(6)}). Thread-safe.
 */
public class MariaDbIdempotencyStore implements IdempotencyStore {

    /** ER_DUP_ENTRY: the key was committed since the look-up. */
    private static final int DUPLICATE_KEY = 1062;
    /** ER_LOCK_WAIT_TIMEOUT: another transaction holds the row, and the statement was not to wait. */
    private static final int LOCK_WAIT_TIMEOUT = 1205;
    private static final long FIRST_PAUSE_NANOS = 2_000_000;
    private static final long MAX_PAUSE_NANOS = 25_000_000;
    private static final int MAX_CLAIM_ATTEMPTS = 10_000;
    /**
     * The latest expiry the table can hold is in the year 9999; a longer retention is kept until then, which is
     * forever in every sense that matters.
     */
    private static final Duration MAX_RETENTION = Duration.ofDays(365L * 7000);
    private static final Pattern TABLE_NAME = Pattern.compile("[A-Za-z_][A-Za-z0-9_]{0,63}");
    private static final String NOW = "UTC_TIMESTAMP(6)";
    private static final String NO_WAIT = "SET STATEMENT innodb_lock_wait_timeout = 0 FOR ";

    private final JdbcTemplate jdbc;
    private final DataSource dataSource;
    /** The key under which a transaction manager binds this DataSource's connection to the thread. */
    private final DataSource transactionResource;
    private final TransactionTemplate ownTransaction;
    private final String lookUpSql;
    private final String insertSql;
    private final String selectSql;
    private final String takeOverFailedSql;
    private final String renewSql;
    private final String takeOverExpiredSql;
    private final String expiredLeasesSql;
    private final String completeSql;
    private final String failSql;
    private final String releaseSql;
    private final String expiredSql;
    private final String deleteSql;

    /**
     * @param dataSource the application's DataSource — the one its transaction manager uses
     * @param tableName  a plain identifier (letters, digits, underscores), in the connection's database
     */
    public MariaDbIdempotencyStore(DataSource dataSource, String tableName) {
        checkTableName(tableName);
        this.dataSource = dataSource;
        this.transactionResource = dataSource instanceof TransactionAwareDataSourceProxy proxy
                && proxy.getTargetDataSource() != null ? proxy.getTargetDataSource() : dataSource;
        this.jdbc = new JdbcTemplate(dataSource);
        this.ownTransaction = new TransactionTemplate(new DataSourceTransactionManager(dataSource));
        String table = tableName;
        String keyMatch = " WHERE caller = ? AND scope = ? AND idempotency_key = ?";
        String columns = "status, request_hash, fencing_token, response_status, response_headers, response_body,"
                + " created_at, expires_at, locked_until, locked_until < " + NOW + " AS lease_expired";
        this.lookUpSql = "SELECT @@tx_isolation AS isolation, t.* FROM (SELECT 1 AS one) AS probe LEFT JOIN (SELECT "
                + columns + " FROM " + table + keyMatch + ") AS t ON 1 = 1";
        this.insertSql = NO_WAIT + "INSERT INTO " + table + " (caller, scope, idempotency_key, status, request_hash,"
                + " fencing_token, created_at, updated_at, expires_at, locked_until) VALUES (?, ?, ?, 'PROCESSING', ?,"
                + " ?, " + NOW + ", " + NOW + ", " + plus("?") + ", " + plus("?") + ")";
        this.selectSql = "SELECT " + columns + " FROM " + table + keyMatch;
        this.takeOverFailedSql = NO_WAIT + "UPDATE " + table + " SET status = 'PROCESSING', request_hash = ?,"
                + " fencing_token = ?, created_at = " + NOW + ", updated_at = " + NOW + ", expires_at = " + plus("?")
                + ", locked_until = " + plus("?") + keyMatch + " AND status = 'FAILED' AND fencing_token = ?";
        this.renewSql = "UPDATE " + table + " SET locked_until = " + plus("?") + ", updated_at = " + NOW + keyMatch
                + " AND fencing_token = ? AND status = 'PROCESSING'";
        this.takeOverExpiredSql = "UPDATE " + table + " SET fencing_token = ?, locked_until = " + plus("?")
                + ", updated_at = " + NOW + keyMatch + " AND fencing_token = ? AND status = 'PROCESSING'"
                + " AND locked_until < " + NOW;
        this.expiredLeasesSql = "SELECT caller, scope, idempotency_key, " + columns + " FROM " + table
                + " WHERE status = 'PROCESSING' AND locked_until < " + NOW + " ORDER BY locked_until LIMIT ?";
        this.completeSql = "UPDATE " + table + " SET status = 'SUCCEEDED', response_status = ?, response_headers = ?,"
                + " response_body = ?, updated_at = " + NOW + ", locked_until = NULL" + keyMatch
                + " AND fencing_token = ? AND status = 'PROCESSING'";
        this.failSql = "UPDATE " + table + " SET status = 'FAILED', updated_at = " + NOW + ", locked_until = NULL"
                + keyMatch + " AND fencing_token = ? AND status = 'PROCESSING'";
        this.releaseSql = "DELETE FROM " + table + keyMatch + " AND fencing_token = ? AND status = 'PROCESSING'";
        // SKIP LOCKED: never wait for a row another transaction holds, so cleanup cannot stall a claim
        this.expiredSql = "SELECT caller, scope, idempotency_key FROM " + table + " WHERE expires_at < " + NOW
                + " AND status <> 'PROCESSING' ORDER BY expires_at LIMIT ? FOR UPDATE SKIP LOCKED";
        this.deleteSql = "DELETE FROM " + table + keyMatch + " AND expires_at < " + NOW
                + " AND status <> 'PROCESSING'";
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

    private static void checkTableName(String tableName) {
        if (tableName == null || !TABLE_NAME.matcher(tableName).matches()) {
            throw new IllegalArgumentException("the table name must be a plain identifier (letters, digits and"
                    + " underscores, at most 64, not starting with a digit): " + tableName);
        }
    }

    /** {@code NOW} plus a parameter in microseconds; NULL when the parameter is. */
    private static String plus(String microseconds) {
        return "DATE_ADD(" + NOW + ", INTERVAL " + microseconds + " MICROSECOND)";
    }

    /** The DataSource the store works on: the one whose transactions the claim joins. */
    public DataSource dataSource() {
        return dataSource;
    }

    @Override
    public ClaimResult claim(ClaimRequest request) {
        if (TransactionSynchronizationManager.isActualTransactionActive()
                && !TransactionSynchronizationManager.hasResource(transactionResource)) {
            // the claim would run on a connection of its own, and commit apart from the handler's writes
            throw new IllegalStateException("The transaction open on this thread holds no connection of the"
                    + " idempotency store's DataSource " + dataSource + ": its transaction manager manages another"
                    + " DataSource. The claim, the handler's writes and the stored answer must commit in one"
                    + " transaction.");
        }
        long deadline = System.nanoTime() + request.maxWait().toNanos();
        long pause = FIRST_PAUSE_NANOS;
        ScopedKey key = request.key();
        for (int attempt = 1; attempt <= MAX_CLAIM_ATTEMPTS; attempt++) {
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
                refused = errorOf(() -> jdbc.update(insertSql, key.caller(), key.scope(), key.key(),
                        request.requestHash(), token, micros(retention(request)), leaseMicros(request)));
                result = refused == null ? new ClaimResult.Claimed(token) : null;
            } else if (record.status() != RecordStatus.FAILED || !record.requestHash().equals(request.requestHash())) {
                // a FAILED record is taken over by its own request only: the failed attempt may have reached a third
                // party under the key, and another request must not run under it
                return new ClaimResult.Existing(record);
            } else {
                int[] taken = new int[1];
                refused = errorOf(() -> taken[0] = jdbc.update(takeOverFailedSql, request.requestHash(), token,
                        micros(retention(request)), leaseMicros(request), key.caller(), key.scope(), key.key(),
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
                sleep(Math.min(pause, left));
                pause = Math.min(pause * 2, MAX_PAUSE_NANOS);
            }
            // otherwise the record changed between look-up and write (committed, taken over, released): look again
        }
        throw new IllegalStateException("could not claim " + key + " in " + MAX_CLAIM_ATTEMPTS
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

    private static void sleep(long nanos) {
        try {
            Thread.sleep(nanos / 1_000_000, (int) (nanos % 1_000_000));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while waiting for a concurrent claim", e);
        }
    }

    private static Duration retention(ClaimRequest request) {
        return request.retention().compareTo(MAX_RETENTION) > 0 ? MAX_RETENTION : request.retention();
    }

    private static Long leaseMicros(ClaimRequest request) {
        return request.lease() == null ? null : micros(request.lease());
    }

    private static long micros(Duration duration) {
        return duration.toMillis() * 1000;
    }

    @Override
    public boolean complete(ScopedKey key, String fencingToken, StoredResponse response) {
        return committed(() -> jdbc.update(completeSql, response.status(), response.headersAsText(),
                response.body(), key.caller(), key.scope(), key.key(), fencingToken)) == 1;
    }

    @Override
    public boolean fail(ScopedKey key, String fencingToken) {
        return committed(() -> jdbc.update(failSql, key.caller(), key.scope(), key.key(), fencingToken)) == 1;
    }

    @Override
    public boolean release(ScopedKey key, String fencingToken) {
        return committed(() -> jdbc.update(releaseSql, key.caller(), key.scope(), key.key(), fencingToken)) == 1;
    }

    @Override
    public boolean renew(ScopedKey key, String fencingToken, Duration lease) {
        return committed(() -> jdbc.update(renewSql, micros(lease), key.caller(), key.scope(), key.key(),
                fencingToken)) == 1;
    }

    @Override
    public Optional<String> takeOver(ScopedKey key, String expiredToken, Duration lease) {
        String token = UUID.randomUUID().toString();
        int taken = committed(() -> jdbc.update(takeOverExpiredSql, token, micros(lease), key.caller(), key.scope(),
                key.key(), expiredToken));
        return taken == 1 ? Optional.of(token) : Optional.empty();
    }

    @Override
    public List<IdempotencyRecord> findExpiredLeases(int limit) {
        return jdbc.query(expiredLeasesSql, (rs, n) -> record(
                new ScopedKey(rs.getString("caller"), rs.getString("scope"), rs.getString("idempotency_key")), rs), limit);
    }

    @Override
    public Optional<IdempotencyRecord> find(ScopedKey key) {
        return jdbc.query(selectSql, (rs, n) -> record(key, rs), key.caller(), key.scope(), key.key()).stream()
                .findFirst();
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
                deleted += Math.max(count, 0);
            }
            return deleted;
        });
    }

    /**
     * Runs a write in the caller's transaction if one holds a connection of this store's DataSource, else in a
     * transaction of its own that commits before this returns.
     */
    private int committed(IntSupplier write) {
        if (TransactionSynchronizationManager.hasResource(transactionResource)) {
            return write.getAsInt();
        }
        Integer result = ownTransaction.execute(status -> write.getAsInt());
        return result == null ? 0 : result;
    }

    private static IdempotencyRecord record(ScopedKey key, ResultSet rs) throws SQLException {
        RecordStatus status = RecordStatus.valueOf(rs.getString("status"));
        StoredResponse response = null;
        if (status == RecordStatus.SUCCEEDED) {
            response = new StoredResponse(rs.getInt("response_status"),
                    StoredResponse.headersFromText(rs.getString("response_headers")), rs.getBytes("response_body"));
        }
        return new IdempotencyRecord(key, status, rs.getString("request_hash"), rs.getString("fencing_token"),
                response, instant(rs, "created_at"), instant(rs, "expires_at"), instant(rs, "locked_until"),
                rs.getBoolean("lease_expired"));
    }

    /** A {@code datetime} column, which holds UTC: read as it is, not in the JVM's time zone. */
    private static Instant instant(ResultSet rs, String column) throws SQLException {
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
