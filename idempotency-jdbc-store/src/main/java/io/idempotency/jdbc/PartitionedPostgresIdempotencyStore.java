package io.idempotency.jdbc;

import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ScopedKey;

import javax.sql.DataSource;

/**
 * The PostgreSQL store on a table partitioned by creation time ({@link IdempotencySchema#POSTGRESQL_PARTITIONED_SCRIPT}),
 * whose old records go by dropping whole partitions ({@link PostgresPartitionMaintenance}).
 *
 * <h2>Why the claim differs</h2>
 * PostgreSQL refuses a unique index that leaves out the partition key, so the primary key includes
 * {@code created_at}, and with it the same key could be inserted once per partition: two requests with one key on
 * either side of a partition boundary would both run. So the unique index cannot arbitrate; a database lock taken
 * before the look-up does:
 * <ol>
 *   <li>One statement looks the key up across all partitions. A committed record that is not FAILED is the answer
 *       (a replay, a mismatch, a request in progress), as the plain store's claim would give it: no lock is taken, so
 *       replays of one key never queue behind each other, and this one statement is all they cost. Otherwise (no
 *       record, or a FAILED one to take over) the same statement sets {@code lock_timeout} to the bounded wait and
 *       takes a transaction-scoped advisory lock on the key (caller, scope, key). Concurrent claims of the key — from
 *       any instance — queue here until the holder's transaction ends, or get {@code Busy} when the wait runs out.</li>
 *   <li>Only when it took the lock, a second statement, whose snapshot is taken after the lock was granted and so
 *       shows everything the previous holder committed, looks the key up again, inserts the claim only if it is
 *       absent, restores {@code lock_timeout}, and returns what it found.</li>
 * </ol>
 * Two different keys whose lock numbers collide merely queue behind each other. The lock lasts as long as the
 * transaction, so a claim made with no transaction open on the thread runs in a transaction of its own, which commits
 * the claim before this returns (as a claim of the plain store without a transaction does): in auto-commit, the lock
 * would end with its statement, before the look-up. Everything else (complete, fail, release, replay look-ups, batch
 * deletes) is the same as the plain store. Thread-safe.
 */
public class PartitionedPostgresIdempotencyStore extends PostgresIdempotencyStore {

    private final String lookUpOrLockSql;
    private final String claimIfAbsentSql;

    public PartitionedPostgresIdempotencyStore(DataSource dataSource, String tableName) {
        super(dataSource, tableName);
        String table = IdempotencySchema.checkTableName(tableName);
        // the look-up comes first: only when it shows no record, or a FAILED one to take over, is the timeout set and
        // the lock requested (the lock's CTE reads the settings row, which only exists in that case)
        this.lookUpOrLockSql = """
                WITH seen AS MATERIALIZED (
                    SELECT %2$s, locked_until < %3$s AS lease_expired
                    FROM %1$s WHERE caller = ? AND scope = ? AND idempotency_key = ?
                ), settings AS MATERIALIZED (
                    SELECT previous, set_config('lock_timeout', ?, true) AS applied
                    FROM (SELECT current_setting('lock_timeout') AS previous OFFSET 0) AS session
                    WHERE NOT EXISTS (SELECT 1 FROM seen WHERE status <> 'FAILED')
                ), locked AS MATERIALIZED (
                    SELECT pg_advisory_xact_lock(hashtextextended(?, 0)) FROM settings WHERE applied IS NOT NULL
                )
                SELECT (SELECT count(*) FROM locked) AS locked, (SELECT previous FROM settings) AS previous,
                       current_setting('transaction_isolation') AS isolation, seen.*
                FROM (SELECT 1) AS one LEFT JOIN seen ON true
                """.formatted(table, COLUMNS, NOW);
        this.claimIfAbsentSql = claimIfAbsentSql(table, false);
    }

    @Override
    protected ClaimRow claimOnce(ClaimRequest request, String token) {
        ScopedKey key = request.key();
        LookUp lookUp = jdbc.queryForObject(lookUpOrLockSql, (rs, n) -> new LookUp(rs.getLong("locked") == 1,
                        rs.getString("previous"), new ClaimRow(false, rs.getString("isolation"),
                        rs.getString("status") == null ? null : record(key, rs))),
                key.caller(), key.scope(), key.key(), waitSetting(request), lockName(key));
        if (!lookUp.locked()) {
            // a committed record that is not to be taken over: the answer, as the claim would give it, with no lock
            // taken and the lock_timeout untouched
            return lookUp.row();
        }
        return jdbc.queryForObject(claimIfAbsentSql, (rs, n) -> claimRow(key, rs),
                key.caller(), key.scope(), key.key(),
                key.caller(), key.scope(), key.key(), request.requestHash(), token, retentionMillis(request),
                leaseMillis(request), lookUp.previousTimeout());
    }

    /** What the first statement of a claim saw, and whether it took the key's lock (then with the timeout to restore). */
    private record LookUp(boolean locked, String previousTimeout, ClaimRow row) {
    }

    /** An unambiguous text for the key's advisory lock (lengths prefixed, so no two keys share one). */
    static String lockName(ScopedKey key) {
        return "idempotency:" + key.caller().length() + ":" + key.caller() + key.scope().length() + ":" + key.scope()
                + key.key();
    }
}
