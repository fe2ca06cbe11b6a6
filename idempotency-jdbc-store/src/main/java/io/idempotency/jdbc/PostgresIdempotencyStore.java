package io.idempotency.jdbc;

import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.IdempotencyRecord;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.UnstorableKeyException;
import org.springframework.dao.DataAccessException;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.core.SqlParameterValue;
import org.springframework.transaction.TransactionDefinition;

import javax.sql.DataSource;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Types;
import java.time.Duration;
import java.util.Optional;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.function.IntSupplier;

/**
 * The PostgreSQL store (14 and later). All statements run on the connection of the transaction open on the current
 * thread (through Spring's {@link JdbcTemplate}), so they commit or roll back with the handler's own writes.
 *
 * <h2>How a claim is arbitrated</h2>
 * PostgreSQL facts this relies on: an {@code INSERT … ON CONFLICT DO NOTHING} that meets an <em>uncommitted</em>
 * row with the same key blocks until that transaction ends; {@code lock_timeout} ends the wait with SQLSTATE 55P03
 * (which aborts the transaction); at READ COMMITTED a <em>separate</em> SELECT after a 0-row insert sees the row the
 * other transaction committed, whereas a single-statement "insert or read" would not (its snapshot predates the
 * wait); at REPEATABLE READ or SERIALIZABLE the insert raises 40001 instead. Hence:
 * <ol>
 *   <li>One statement looks the key up and, only when its snapshot shows no record, inserts the claim, with
 *       {@code lock_timeout} set to the bounded wait and restored for the handler before the statement returns. It
 *       returns the record as its snapshot shows it — one round trip, which is all a first execution or the replay
 *       of a completed request needs (a replay inserts nothing).</li>
 *   <li>0 rows and no record in that snapshot (it was committed while the insert waited): a second statement reads
 *       it. A FAILED record is taken over with a compare-and-set on its fencing token, under the same bounded wait
 *       (another request may be taking it over at that moment). A record that vanished in between (released or
 *       deleted) is claimed again.</li>
 * </ol>
 * Times are the database's, taken when each statement starts ({@link #NOW}), not when its transaction did.
 * The caller's transaction must be at READ COMMITTED. Thread-safe.
 */
public class PostgresIdempotencyStore extends JdbcIdempotencyStore {

    private static final String LOCK_NOT_AVAILABLE = "55P03";
    private static final long MIN_WAIT_NANOS = 1_000_000; // lock_timeout counts in milliseconds
    private static final int MAX_CLAIM_ATTEMPTS = 10;
    /**
     * SQLStates of a text the database cannot store as it is: longer than its column (string_data_right_truncation;
     * in {@code SQL_ASCII} a column counts bytes), with a character its encoding lacks (untranslatable_character,
     * character_not_in_repertoire).
     */
    private static final java.util.Set<String> UNSTORABLE_TEXT = java.util.Set.of("22001", "22P05", "22021");

    /** SQLState of a serialization failure; at READ COMMITTED, of a row moved to another partition meanwhile. */
    private static final String SERIALIZATION_FAILURE = "40001";
    private static final int MAX_WRITE_ATTEMPTS = 3;

    private final String tableName;
    private final String claimSql;
    private final String takeOverSql;
    private final String deleteExpiredSql;

    /**
     * @param dataSource the application's DataSource — the one its transaction manager uses
     * @param tableName  a plain identifier, looked up in the connection's default schema
     */
    public PostgresIdempotencyStore(DataSource dataSource, String tableName) {
        // the writes the store commits on its own (a takeover, FAILED, a release, a renewal, the batch delete) run at
        // READ COMMITTED whatever the pool's default: at REPEATABLE READ or SERIALIZABLE, one whose row another
        // instance changed while it waited for the row lock fails ("could not serialize access") instead of finding
        // that its token no longer holds the claim, and a batch delete fails instead of skipping a row another cleaner
        // deleted. Asked for inside the transaction (beginOwnTransaction), not through JDBC: see there
        super(dataSource, statements(IdempotencySchema.checkTableName(tableName)),
                TransactionDefinition.ISOLATION_DEFAULT);
        String table = tableName;
        this.tableName = tableName;
        this.claimSql = claimIfAbsentSql(table, true);
        // bounded like the claim: the record may be in the middle of being taken over by another transaction
        this.takeOverSql = "WITH " + BOUNDED_WAIT + ", taken AS (UPDATE " + table
                + " SET status = 'PROCESSING', request_hash = ?, fencing_token = ?::uuid, created_at = " + NOW
                + ", updated_at = " + NOW + ", expires_at = " + NOW + " + ? * interval '1 millisecond',"
                + " locked_until = " + NOW + " + ?::bigint * interval '1 millisecond' FROM timeout"
                + KEY_MATCH + " AND status = 'FAILED' AND fencing_token = ?::uuid RETURNING 1)"
                + " SELECT (SELECT count(*) FROM taken) AS taken, " + RESTORE_WAIT;
        // SKIP LOCKED: never wait for a row another transaction holds, so cleanup cannot stall a claim. A claim still
        // in progress is kept, unless it has no lease: a claim made with its work's transaction is seen by others only
        // once committed with its answer, so one committed without (its connection committed by code of the
        // application's own) is no request's any more, and no resolver decides it
        this.deleteExpiredSql = "DELETE FROM " + table + " t USING (SELECT caller, scope, idempotency_key FROM " + table
                + " WHERE expires_at < " + NOW + " AND " + FINISHED_OR_LEASELESS
                + " LIMIT ? FOR UPDATE SKIP LOCKED) expired"
                + " WHERE t.caller = expired.caller AND t.scope = expired.scope"
                + " AND t.idempotency_key = expired.idempotency_key";
    }

    /**
     * The statement that makes the transaction it begins run at READ COMMITTED, whatever the session's default. Asked
     * for so rather than through JDBC ({@code Connection.setTransactionIsolation}), which PostgreSQL's driver makes a
     * session setting ({@code SET SESSION CHARACTERISTICS}) sent before the transaction begins: behind a pooler in
     * transaction mode that statement may run on another server connection than the transaction, whose isolation
     * then stays the server's default, and it stays on the connection it ran on, for other clients' transactions.
     */
    public static final String READ_COMMITTED = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED";

    /**
     * Asks for READ COMMITTED in the transaction itself ({@link #READ_COMMITTED}): one statement, as many round trips
     * as asking the connection for its level (which Spring does before setting one) cost.
     */
    @Override
    protected void beginOwnTransaction() {
        jdbc.execute(READ_COMMITTED);
    }

    /** The table the store keeps its records in, as it was given: the one to create, check and keep partitions of. */
    @Override
    public String tableName() {
        return tableName;
    }

    /**
     * The largest body an answer can be stored with and read back: PostgreSQL builds no value and no message above
     * 1 GB, and sends a value its client asks for as text (as the JDBC driver does until it has prepared a statement
     * on the connection: the first reads of a record) in hex, two characters a byte. Half of 1 GB, less 128 KB: the row
     * of the largest body read as text leaves 256 KB for the headers, the key and the rest.
     */
    public static final long MAX_STORED_BODY_SIZE = (1L << 29) - 128 * 1024;

    /**
     * Refuses a cap on stored bodies above {@link #MAX_STORED_BODY_SIZE}: an answer between the two would be refused
     * when it is stored, its request failing after its handler ran.
     */
    @Override
    public void checkStoredBodySize(long maxBodyBytes) {
        if (maxBodyBytes > MAX_STORED_BODY_SIZE) {
            throw new IllegalStateException("an answer body of up to " + maxBodyBytes + " bytes cannot be stored:"
                    + " PostgreSQL builds no value and no message above 1 GB, and sends a body read as text (as its"
                    + " JDBC driver reads it at first) in hex, two characters a byte, so the body of a stored answer"
                    + " may take at most " + MAX_STORED_BODY_SIZE + " bytes (512 MB less 128 KB, leaving 256 KB of the"
                    + " row for the headers and the key); a larger one could be stored, but its replays would fail.");
        }
    }

    private static Statements statements(String table) {
        return new Statements(
                "SELECT " + COLUMNS + ", locked_until < " + NOW + " AS lease_expired FROM " + table + KEY_MATCH,
                "UPDATE " + table + " SET status = 'SUCCEEDED', response_status = ?, response_headers = ?,"
                        + " response_body = ?, updated_at = " + NOW + ", locked_until = NULL"
                        + KEY_MATCH + " AND fencing_token = ?::uuid AND status = 'PROCESSING'",
                "UPDATE " + table + " SET status = 'FAILED', updated_at = " + NOW + ", locked_until = NULL"
                        + KEY_MATCH + " AND fencing_token = ?::uuid AND status = 'PROCESSING'",
                "DELETE FROM " + table + KEY_MATCH + " AND fencing_token = ?::uuid AND status = 'PROCESSING'",
                "UPDATE " + table + " SET locked_until = " + NOW + " + ? * interval '1 millisecond',"
                        + " updated_at = " + NOW + KEY_MATCH + " AND fencing_token = ?::uuid AND status = 'PROCESSING'",
                // a claim another transaction is changing (its holder recording its result, whose commit outlasts
                // the lease; a renewal; another takeover) is not waited for: it is not stale, or somebody else has it,
                // and a wait for a holder that stalled would keep a retry past its bounded wait and a sweeper stuck
                "UPDATE " + table + " AS held SET fencing_token = ?::uuid,"
                        + " locked_until = " + NOW + " + ? * interval '1 millisecond', updated_at = " + NOW + KEY_MATCH
                        + " AND fencing_token = ?::uuid AND status = 'PROCESSING' AND locked_until < " + NOW
                        + " AND EXISTS (SELECT 1 FROM " + table + " AS free WHERE free.caller = held.caller"
                        + " AND free.scope = held.scope AND free.idempotency_key = held.idempotency_key"
                        + " FOR UPDATE SKIP LOCKED)",
                "SELECT caller, scope, idempotency_key, " + COLUMNS + ", true AS lease_expired FROM " + table
                        + " WHERE status = 'PROCESSING' AND locked_until < " + NOW + " ORDER BY locked_until LIMIT ?");
    }

    @Override
    public ClaimResult claim(ClaimRequest request) {
        return claimCommitted(() -> claimInTransaction(request));
    }

    private ClaimResult claimInTransaction(ClaimRequest request) {
        checkClaimTransaction();
        // maxWait bounds the whole claim, not each wait: a key released and claimed again while we waited would
        // otherwise start a fresh wait
        long deadline = System.nanoTime() + request.maxWait().toNanos();
        ClaimRequest remaining = request;
        for (int attempt = 1; attempt <= MAX_CLAIM_ATTEMPTS; attempt++) {
            if (attempt > 1) {
                long left = deadline - System.nanoTime();
                if (left < MIN_WAIT_NANOS) {
                    return new ClaimResult.Busy();
                }
                remaining = new ClaimRequest(request.key(), request.requestHash(), request.retention(),
                        Duration.ofNanos(left), request.lease());
            }
            ClaimResult result;
            try {
                result = attempt(remaining, UUID.randomUUID().toString(), deadline);
            } catch (DataAccessException e) {
                String state = sqlState(e);
                if (LOCK_NOT_AVAILABLE.equals(state)) {
                    return new ClaimResult.Busy(); // the bounded wait ran out
                }
                if (state != null && UNSTORABLE_TEXT.contains(state)) {
                    // the claim's text values are its caller, scope and key (checked against a UTF8 database's
                    // columns); the rest are of the store's making
                    throw new UnstorableKeyException(request.key(), state, e);
                }
                throw e;
            }
            if (result != null) {
                return result;
            }
        }
        throw new IllegalStateException("could not claim " + request.key() + " in " + MAX_CLAIM_ATTEMPTS
                + " attempts: the record keeps changing between claim and read");
    }

    /**
     * One claim attempt with {@code token}, its waits ending by {@code deadline} ({@link System#nanoTime()}); null when
     * the record changed under it and the claim should look again.
     */
    private ClaimResult attempt(ClaimRequest request, String token, long deadline) {
        ScopedKey key = request.key();
        ClaimRow row = claimOnce(request, token);
        if (!"read committed".equals(row.isolation())) {
            // at REPEATABLE READ or SERIALIZABLE a concurrent claim raises 40001 instead of waiting
            throw new IllegalStateException("the idempotency claim must run at READ COMMITTED, but the transaction"
                    + " runs at " + row.isolation());
        }
        if (row.inserted()) {
            return new ClaimResult.Claimed(token);
        }
        // The statement's snapshot shows a record committed before it started; one committed while it waited
        // needs a statement of its own.
        Optional<IdempotencyRecord> existing = row.existing() != null ? Optional.of(row.existing()) : find(key);
        if (existing.isEmpty()) {
            return null; // released or deleted since the insert looked: claim again
        }
        IdempotencyRecord record = existing.get();
        if (!takesOver(record, request.requestHash())) {
            return new ClaimResult.Existing(record);
        }
        // bounded by what the insert's wait left: waiting the whole of it again would keep the claim twice as long
        String wait = Math.max(1, TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime())) + "ms";
        long takenOver = jdbc.queryForObject(takeOverSql, (rs, n) -> rs.getLong("taken"), wait,
                request.requestHash(), token, retentionMillis(request), leaseMillis(request),
                key.caller(), key.scope(), key.key(), record.fencingToken());
        // 0: another request took the FAILED record over first: look again
        return takenOver == 1 ? new ClaimResult.Claimed(token, true) : null;
    }

    /**
     * Tries to insert the claim in one attempt, waiting at most {@link ClaimRequest#maxWait()} for a concurrent
     * claim of the key, and restoring the transaction's {@code lock_timeout} afterwards.
     *
     * @throws DataAccessException with SQLSTATE 55P03 when the wait ran out
     */
    protected ClaimRow claimOnce(ClaimRequest request, String token) {
        ScopedKey key = request.key();
        return jdbc.queryForObject(claimSql, (rs, n) -> claimRow(key, rs), key.caller(), key.scope(), key.key(),
                waitSetting(request), key.caller(), key.scope(), key.key(), request.requestHash(), token,
                retentionMillis(request), leaseMillis(request));
    }

    /**
     * What one claim attempt saw.
     *
     * @param inserted  whether the claim was inserted
     * @param isolation the transaction's isolation level, as PostgreSQL names it
     * @param existing  the record the attempt's snapshot showed, or null if it showed none
     */
    protected record ClaimRow(boolean inserted, String isolation, IdempotencyRecord existing) {
    }

    /** Reads a claim row: columns {@code inserted}, {@code isolation} and the record's columns. */
    protected ClaimRow claimRow(ScopedKey key, ResultSet rs) throws SQLException {
        return new ClaimRow(rs.getLong("inserted") == 1, rs.getString("isolation"),
                rs.getString("status") == null ? null : record(key, rs));
    }

    /**
     * The claim's lease in milliseconds, typed even when absent: an untyped null makes the driver describe the
     * statement first, which costs the claim a round trip of its own.
     */
    protected static SqlParameterValue leaseMillis(ClaimRequest request) {
        return new SqlParameterValue(Types.BIGINT, request.lease() == null ? null : atMostLongest(request.lease()));
    }

    /** The claim's retention in milliseconds, cut to {@link #LONGEST}. */
    protected static long retentionMillis(ClaimRequest request) {
        return atMostLongest(request.retention());
    }

    /**
     * The longest retention or lease written: 100,000 years (the longest TTL the starter accepts). PostgreSQL holds no
     * time after the year 294276, and a duration beyond what milliseconds count cannot even be sent: a longer one is
     * cut to this, as the MariaDB store cuts to what its table holds, rather than failing every claim made with it.
     */
    static final Duration LONGEST = Duration.ofDays(36_500_000);

    /** {@code duration} in milliseconds, at most {@link #LONGEST}'s. */
    protected static long atMostLongest(Duration duration) {
        return (duration.compareTo(LONGEST) > 0 ? LONGEST : duration).toMillis();
    }

    /** A lease beyond {@link #LONGEST} is cut, as a claim's is. */
    @Override
    public boolean renew(ScopedKey key, String fencingToken, Duration lease) {
        return super.renew(key, fencingToken, lease.compareTo(LONGEST) > 0 ? LONGEST : lease);
    }

    /** A lease beyond {@link #LONGEST} is cut, as a claim's is. */
    @Override
    public Optional<String> takeOver(ScopedKey key, String expiredToken, Duration lease) {
        return super.takeOver(key, expiredToken, lease.compareTo(LONGEST) > 0 ? LONGEST : lease);
    }

    /** The value for {@code lock_timeout} while a claim waits. */
    protected static String waitSetting(ClaimRequest request) {
        return Math.max(1, request.maxWait().toMillis()) + "ms";
    }

    /**
     * A CTE {@code timeout} that sets {@code lock_timeout} to its parameter (the bounded wait) for the rest of the
     * statement, keeping the previous value; {@link #RESTORE_WAIT} puts that back before the statement returns.
     */
    private static final String BOUNDED_WAIT = """
            timeout AS (
                SELECT set_config('lock_timeout', ?, true) AS waiting, previous
                FROM (SELECT current_setting('lock_timeout') AS previous OFFSET 0) AS session
            )""";

    private static final String RESTORE_WAIT = "set_config('lock_timeout', (SELECT previous FROM timeout), true)"
            + " AS restored";

    /**
     * The time the store writes and compares records with: the start of the statement, on the database's clock. Not
     * {@code now()}, the start of the transaction, which may have begun long before (a caller claiming inside a
     * transaction of its own): a lease written from it would run out early, by as long as the transaction had been
     * open, and the claim would look stale to the others while its holder still had the lease it was given.
     */
    protected static final String NOW = "statement_timestamp()";

    /** The records cleanup may remove once expired: finished ones, and claims in progress that hold no lease. */
    private static final String FINISHED_OR_LEASELESS = "(status <> 'PROCESSING' OR locked_until IS NULL)";

    /** The record's columns, as {@link #claimRow} reads them (with {@code lease_expired} computed beside them). */
    protected static final String COLUMNS = "status, request_hash, fencing_token, response_status, response_headers,"
            + " response_body, created_at, expires_at, locked_until";

    /**
     * The statement that looks the key up and inserts the claim only when its snapshot shows no record, returning
     * columns {@code inserted}, {@code isolation} and the record's. The look-up comes first, so a replay (the key is
     * there) costs one index probe and inserts nothing.
     *
     * <p>The claim writes its times itself rather than leave them to the columns' defaults: a table made by another
     * tool from the documented columns (Hibernate's DDL) may have none, and is adopted all the same.
     *
     * <p>With {@code arbitrate} (the plain store), the statement also bounds the wait — its first parameter after the
     * key sets {@code lock_timeout}, restored before it returns — and lets the unique key arbitrate: an insert that
     * meets an uncommitted claim of the key waits for it, then inserts nothing. Without (the partitioned store, whose
     * caller already holds the key's lock), its last parameter is the {@code lock_timeout} to restore.
     */
    protected static String claimIfAbsentSql(String table, boolean arbitrate) {
        return """
                WITH existing AS MATERIALIZED (
                    SELECT %2$s, locked_until < %7$s AS lease_expired
                    FROM %1$s WHERE caller = ? AND scope = ? AND idempotency_key = ?
                ), %3$s claimed AS (
                    INSERT INTO %1$s (caller, scope, idempotency_key, status, request_hash, fencing_token, created_at,
                                      updated_at, expires_at, locked_until)
                    SELECT ?, ?, ?, 'PROCESSING', ?, ?::uuid, %7$s, %7$s, %7$s + ? * interval '1 millisecond',
                           %7$s + ?::bigint * interval '1 millisecond' %4$s
                    WHERE NOT EXISTS (SELECT 1 FROM existing)
                    %5$s
                    RETURNING 1
                ), done AS (
                    SELECT (SELECT count(*) FROM claimed) AS inserted
                )
                SELECT done.inserted,
                       set_config('lock_timeout', %6$s, true) AS restored,
                       current_setting('transaction_isolation') AS isolation,
                       existing.*
                FROM done LEFT JOIN existing ON true
                """.formatted(table, COLUMNS, arbitrate ? BOUNDED_WAIT + "," : "", arbitrate ? "FROM timeout" : "",
                arbitrate ? "ON CONFLICT (caller, scope, idempotency_key) DO NOTHING" : "",
                arbitrate ? "(SELECT previous FROM timeout)" : "?", NOW);
    }

    /**
     * As {@link JdbcIdempotencyStore#committed}; a write made in a transaction of its own is made again when its row
     * was moved to another partition while it waited for the row (SQLSTATE 40001, "tuple to be locked was already
     * moved to another partition due to concurrent update", which PostgreSQL raises at READ COMMITTED too). On a
     * partitioned table, a takeover of a FAILED record writes it into the current partition, as a new claim would be:
     * a renewal, a completion, a stale-claim takeover or a batch delete whose statement began before that takeover
     * committed would fail, where its next statement finds the record as it now is (no longer that holder's, no longer
     * expired) and answers as for a row that stayed in place. In the caller's transaction the failure stands: it has
     * aborted that transaction, which only its owner can roll back.
     */
    @Override
    protected int committed(IntSupplier write) {
        if (joinsTransaction()) {
            return super.committed(write);
        }
        for (int attempt = 1; ; attempt++) {
            try {
                return super.committed(write);
            } catch (DataAccessException e) {
                // at READ COMMITTED, which the store's own transactions run at, a row moved away is the only cause
                // (a row moves again only when a FAILED record is taken over again, so a few attempts are plenty)
                if (attempt == MAX_WRITE_ATTEMPTS || !SERIALIZATION_FAILURE.equals(sqlState(e))) {
                    throw e;
                }
            }
        }
    }

    @Override
    public int deleteExpired(int limit) {
        if (limit < 1) {
            throw new IllegalArgumentException("limit must be positive: " + limit);
        }
        return committed(() -> jdbc.update(deleteExpiredSql, limit));
    }

    private static String sqlState(Throwable e) {
        for (Throwable cause = e; cause != null; cause = cause.getCause()) {
            if (cause instanceof SQLException sql && sql.getSQLState() != null) {
                return sql.getSQLState();
            }
        }
        return null;
    }
}
