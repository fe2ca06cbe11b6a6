package io.idempotency.jdbc;

import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.ScopedKey;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.transaction.support.TransactionSynchronizationManager;
import org.springframework.transaction.support.TransactionTemplate;

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
 *   <li>One statement sets {@code lock_timeout} to the bounded wait and takes a transaction-scoped advisory lock on
 *       the key (caller, scope, key). Concurrent claims of the key — from any instance — queue here until the holder's
 *       transaction ends, or get {@code Busy} when the wait runs out.</li>
 *   <li>A second statement, whose snapshot is taken after the lock was granted and so shows everything the previous
 *       holder committed, looks the key up across all partitions, inserts the claim only if it is absent, restores
 *       {@code lock_timeout}, and returns what it found.</li>
 * </ol>
 * Two different keys whose lock numbers collide merely queue behind each other. The lock lasts as long as the
 * transaction, so a claim made with no transaction open on the thread runs in a transaction of its own, which commits
 * the claim before this returns (as a claim of the plain store without a transaction does): in auto-commit, the lock
 * would end with its statement, before the look-up. Everything else (complete, fail, release, replay look-ups, batch
 * deletes) is the same as the plain store. Thread-safe.
 */
public class PartitionedPostgresIdempotencyStore extends PostgresIdempotencyStore {

    private final String lockSql;
    private final String claimIfAbsentSql;
    private final TransactionTemplate ownTransaction;

    public PartitionedPostgresIdempotencyStore(DataSource dataSource, String tableName) {
        super(dataSource, tableName);
        String table = IdempotencySchema.checkTableName(tableName);
        // the lateral subquery refers to the settings row, so the lock is only requested after the timeout is set
        this.lockSql = """
                SELECT settings.previous
                FROM (SELECT previous, set_config('lock_timeout', ?, true) AS applied
                      FROM (SELECT current_setting('lock_timeout') AS previous OFFSET 0) AS session
                      OFFSET 0) AS settings,
                     LATERAL (SELECT pg_advisory_xact_lock(hashtextextended(?, 0))
                              WHERE settings.applied IS NOT NULL) AS locked
                """;
        this.claimIfAbsentSql = claimIfAbsentSql(table, false);
        this.ownTransaction = new TransactionTemplate(new DataSourceTransactionManager(dataSource));
    }

    @Override
    public ClaimResult claim(ClaimRequest request) {
        if (TransactionSynchronizationManager.isActualTransactionActive()) {
            return super.claim(request);
        }
        return ownTransaction.execute(status -> {
            ClaimResult result = super.claim(request);
            if (!(result instanceof ClaimResult.Claimed)) {
                status.setRollbackOnly(); // nothing to keep, and a wait that ran out has aborted the transaction
            }
            return result;
        });
    }

    @Override
    protected ClaimRow claimOnce(ClaimRequest request, String token) {
        ScopedKey key = request.key();
        String previousTimeout = jdbc.queryForObject(lockSql, String.class, waitSetting(request), lockName(key));
        return jdbc.queryForObject(claimIfAbsentSql, (rs, n) -> claimRow(key, rs),
                key.caller(), key.scope(), key.key(),
                key.caller(), key.scope(), key.key(), request.requestHash(), token, request.retention().toMillis(),
                leaseMillis(request), previousTimeout);
    }

    /** An unambiguous text for the key's advisory lock (lengths prefixed, so no two keys share one). */
    static String lockName(ScopedKey key) {
        return "idempotency:" + key.caller().length() + ":" + key.caller() + key.scope().length() + ":" + key.scope()
                + key.key();
    }
}
