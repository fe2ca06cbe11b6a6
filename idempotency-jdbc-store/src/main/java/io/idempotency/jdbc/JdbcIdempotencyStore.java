package io.idempotency.jdbc;

import io.idempotency.core.ClaimResult;
import io.idempotency.core.IdempotencyRecord;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.core.RecordStatus;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StoredResponse;
import org.springframework.dao.DataAccessException;
import org.springframework.dao.DataRetrievalFailureException;
import org.springframework.jdbc.UncategorizedSQLException;
import org.springframework.jdbc.core.ArgumentPreparedStatementSetter;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.core.RowMapper;
import org.springframework.jdbc.core.RowMapperResultSetExtractor;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.transaction.TransactionDefinition;
import org.springframework.transaction.support.TransactionSynchronizationManager;
import org.springframework.transaction.support.TransactionTemplate;

import javax.sql.DataSource;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Timestamp;
import java.time.Duration;
import java.time.Instant;
import java.util.Arrays;
import java.util.List;
import java.util.Optional;
import java.util.UUID;
import java.util.function.IntSupplier;
import java.util.function.Supplier;

/**
 * What the library's JDBC stores share, whatever their database: every statement runs on the connection of the
 * transaction open on the current thread (through Spring's {@link JdbcTemplate}), so that it commits or rolls back
 * with the handler's own writes; a write made with no such transaction commits in one of its own before it returns, and
 * a look-up made with none runs on a connection of its own taken from the DataSource, rolled back before it goes back;
 * and the fenced writes and look-ups are single statements, given by the database's store as {@link Statements}. A
 * store for another database supplies those, the claim and the batch delete.
 */
public abstract class JdbcIdempotencyStore implements IdempotencyStore {

    /**
     * The SQL of the look-ups and fenced writes. Each matches its record on {@code caller = ? AND scope = ? AND
     * idempotency_key = ?}; the parameters come in this order:
     *
     * @param select          caller, scope, key; returns the record's columns (see {@link #record}), one row or none
     * @param complete        response status, headers (text), body, caller, scope, key, fencing token; PROCESSING
     *                        records only
     * @param fail            caller, scope, key, fencing token; PROCESSING → FAILED
     * @param release         caller, scope, key, fencing token; deletes a PROCESSING record
     * @param renew           lease in milliseconds, caller, scope, key, fencing token; PROCESSING records only
     * @param takeOverExpired new fencing token, lease in milliseconds, caller, scope, key, expired fencing token;
     *                        PROCESSING records whose lease has run out only, and not waiting for a record another
     *                        transaction is changing (it is left as it is: see {@link IdempotencyStore#takeOver})
     * @param expiredLeases   limit; returns {@code caller}, {@code scope}, {@code idempotency_key} and the record's
     *                        columns of PROCESSING records whose lease has run out, the longest expired first
     */
    public record Statements(String select, String complete, String fail, String release, String renew,
                                String takeOverExpired, String expiredLeases) {
    }

    /** The condition every look-up and fenced write matches its record on, its parameters caller, scope and key. */
    protected static final String KEY_MATCH = " WHERE caller = ? AND scope = ? AND idempotency_key = ?";

    protected final JdbcTemplate jdbc;
    private final DataSource dataSource;
    /** The key under which a transaction manager binds this DataSource's connection to the thread. */
    private final DataSource transactionResource;
    private final TransactionTemplate ownTransaction;
    /** Transactions for checks ({@link #rolledBack}), at the connection's isolation level. */
    private final TransactionTemplate checksTransaction;
    private final Statements statements;

    protected JdbcIdempotencyStore(DataSource dataSource, Statements statements) {
        this(dataSource, statements, TransactionDefinition.ISOLATION_DEFAULT);
    }

    /**
     * @param ownIsolation the isolation level of the transactions the store opens for itself (a write made with no
     *                     transaction, the batch delete): a {@link TransactionDefinition} {@code ISOLATION_} constant;
     *                     {@code ISOLATION_DEFAULT} leaves the connection's own
     */
    protected JdbcIdempotencyStore(DataSource dataSource, Statements statements, int ownIsolation) {
        this.dataSource = dataSource;
        this.transactionResource = ReadConnections.unproxied(dataSource);
        this.jdbc = new JdbcTemplate(dataSource);
        this.ownTransaction = new TransactionTemplate(new DataSourceTransactionManager(dataSource));
        this.ownTransaction.setIsolationLevel(ownIsolation);
        this.checksTransaction = new TransactionTemplate(ownTransaction.getTransactionManager());
        this.statements = statements;
    }

    /**
     * Runs first in each transaction the store opens for itself, before any statement of the store's: a database
     * whose isolation level is best asked for inside the transaction (PostgreSQL's {@code SET TRANSACTION}) asks for
     * it here. Nothing by default.
     */
    protected void beginOwnTransaction() {
    }

    /** The DataSource the store works on: the one whose transactions the claim joins. */
    public DataSource dataSource() {
        return dataSource;
    }

    /**
     * The table the store keeps its records in, as it was given, for a store that has one table of its own; null (the
     * default) for one that does not say. The starter refuses an {@code idempotency.jdbc.table-name} that names another.
     */
    public String tableName() {
        return null;
    }

    /**
     * Checks once, before the first request, that the store's table is there as the store needs it: its columns, a
     * unique key that tells every caller, scope and key apart. A store whose table the application's own migrations
     * make checks it here, so that a table made otherwise stops the start rather than failing requests, or sharing
     * records between callers. The starter calls it after those migrations have run, when it does not create the
     * table itself. Does nothing by default (the PostgreSQL table is checked by its migration).
     *
     * @throws IllegalStateException naming the table, what is wrong with it and the script to make it from
     */
    public void checkTable() {
    }

    /**
     * Checks once, before the first request, that an answer whose body takes up to {@code maxBodyBytes} (the cap on
     * stored bodies) can be stored: a cap the table or the database cannot hold lets a larger answer's handler run,
     * then fails its request when the answer is stored. The starter calls it once the table is made or checked, with
     * {@code idempotency.max-stored-body-size}. Does nothing by default.
     *
     * @throws IllegalStateException saying what holds less than the cap, and what to change
     */
    public void checkStoredBodySize(long maxBodyBytes) {
    }

    /**
     * Refuses to claim in a transaction that holds no connection of this store's DataSource: the claim would run on
     * a connection of its own, and commit apart from the handler's writes.
     */
    protected void checkClaimTransaction() {
        if (TransactionSynchronizationManager.isActualTransactionActive()
                && !TransactionSynchronizationManager.hasResource(transactionResource)) {
            throw new IllegalStateException("The transaction open on this thread holds no connection of the"
                    + " idempotency store's DataSource " + dataSource + ": its transaction manager manages another"
                    + " DataSource, or (JPA) its dialect cannot expose the JDBC connection. The claim, the handler's"
                    + " writes and the stored answer must commit in one transaction.");
        }
    }

    @Override
    public boolean complete(ScopedKey key, String fencingToken, StoredResponse response) {
        return committed(() -> jdbc.update(statements.complete(), response.status(), response.headersAsText(),
                response.body(), key.caller(), key.scope(), key.key(), fencingToken)) == 1;
    }

    @Override
    public boolean fail(ScopedKey key, String fencingToken) {
        return committed(() -> jdbc.update(statements.fail(), key.caller(), key.scope(), key.key(),
                fencingToken)) == 1;
    }

    @Override
    public boolean release(ScopedKey key, String fencingToken) {
        return committed(() -> jdbc.update(statements.release(), key.caller(), key.scope(), key.key(),
                fencingToken)) == 1;
    }

    @Override
    public boolean renew(ScopedKey key, String fencingToken, Duration lease) {
        return committed(() -> jdbc.update(statements.renew(), lease.toMillis(), key.caller(), key.scope(),
                key.key(), fencingToken)) == 1;
    }

    @Override
    public Optional<String> takeOver(ScopedKey key, String expiredToken, Duration lease) {
        String token = UUID.randomUUID().toString();
        int taken = committed(() -> jdbc.update(statements.takeOverExpired(), token, lease.toMillis(), key.caller(),
                key.scope(), key.key(), expiredToken));
        return taken == 1 ? Optional.of(token) : Optional.empty();
    }

    @Override
    public List<IdempotencyRecord> findExpiredLeases(int limit) {
        return read(statements.expiredLeases(), (rs, n) -> record(new ScopedKey(rs.getString("caller"),
                rs.getString("scope"), rs.getString("idempotency_key")), rs), limit);
    }

    @Override
    public Optional<IdempotencyRecord> find(ScopedKey key) {
        return read(statements.select(), (rs, n) -> record(key, rs), key.caller(), key.scope(), key.key())
                .stream().findFirst();
    }

    /**
     * Runs a query in the caller's transaction if one holds a connection of this store's DataSource, else on a
     * connection it gives back outside a transaction: one the pool hands out without auto-commit begins a transaction
     * with the query, which a pool need not end when the connection comes back (Tomcat JDBC's
     * {@code rollbackOnReturn} is off by default). Left open there, the next transaction on the connection could not
     * ask for its isolation level. Rolled back here, as it wrote nothing, by {@link ReadConnections} (a connection that
     * refuses the rollback is aborted); a connection in auto-commit mode costs nothing more.
     */
    protected <T> List<T> read(String sql, RowMapper<T> rows, Object... args) {
        if (joinsTransaction()) {
            return jdbc.query(sql, rows, args);
        }
        // A connection of the read's own, straight from the DataSource: fetched through Spring inside a transaction on
        // another DataSource, it would stay bound to the thread for the rest of that transaction, and the next look-up
        // would join it as if a transaction held it.
        try (Connection connection = ReadConnections.borrow(transactionResource);
             PreparedStatement statement = connection.prepareStatement(sql)) {
            new ArgumentPreparedStatementSetter(args).setValues(statement);
            try (ResultSet resultSet = statement.executeQuery()) {
                return new RowMapperResultSetExtractor<>(rows).extractData(resultSet);
            }
        } catch (SQLException e) {
            throw translated(sql, e);
        }
    }

    private DataAccessException translated(String sql, SQLException e) {
        DataAccessException translated = jdbc.getExceptionTranslator().translate("look-up", sql, e);
        return translated != null ? translated : new UncategorizedSQLException("look-up", sql, e);
    }

    /**
     * Whether a claim of the request with {@code requestHash} may take {@code existing} over rather than be answered
     * with it: only a FAILED record of that very request. The failed attempt may have reached a third party under the
     * key, and another request must not run under it.
     */
    protected static boolean takesOver(IdempotencyRecord existing, String requestHash) {
        return existing.status() == RecordStatus.FAILED && existing.requestHash().equals(requestHash);
    }

    /**
     * Runs a write in the caller's transaction if one holds a connection of this store's DataSource, else in a
     * transaction of its own that commits before this returns. Writing "outside a transaction" is not enough: with a
     * pool whose connections do not auto-commit, the pool would roll the write back when the connection returns,
     * after it had been reported done.
     */
    protected int committed(IntSupplier write) {
        // a connection bound with no transaction active (a scope of propagation SUPPORTS or NOT_SUPPORTED) is not
        // joined: nobody commits it, and a pool that does not auto-commit would roll the write back when the scope
        // ends, after it had been reported done
        if (joinsTransaction()) {
            return write.getAsInt(); // the caller's transaction holds a connection of this DataSource: join it
        }
        Integer result = ownTransaction.execute(status -> {
            beginOwnTransaction();
            return write.getAsInt();
        });
        return result == null ? 0 : result;
    }

    /**
     * Runs {@code checks} (reads, and writes that change no row) in the caller's transaction if one holds a connection
     * of this store's DataSource, else in a transaction of its own, on one connection at its own isolation level, that
     * is rolled back: a pool that hands connections out without auto-commit and does not roll back those given back
     * (Tomcat JDBC's default, {@code rollbackOnReturn=false}) would otherwise get them back inside the transaction the
     * checks began.
     */
    protected <T> T rolledBack(Supplier<T> checks) {
        if (joinsTransaction()) {
            return checks.get();
        }
        return checksTransaction.execute(status -> {
            status.setRollbackOnly(); // nothing to keep
            return checks.get();
        });
    }

    /**
     * Whether a write made now joins the caller's transaction ({@link #committed}): one is active and holds a
     * connection of this store's DataSource. Otherwise the write runs in a transaction of its own.
     */
    protected boolean joinsTransaction() {
        return TransactionSynchronizationManager.isActualTransactionActive()
                && TransactionSynchronizationManager.hasResource(transactionResource);
    }

    /**
     * Runs a claim in the caller's transaction if one is open, else in a transaction of its own (at the isolation level
     * of the store's own transactions) that commits the claim before this returns, and rolls back whatever else the
     * claim did (a wait that ran out may have aborted it). Left to the connection, a claim made with no transaction
     * would be rolled back by a pool that does not auto-commit when the connection goes back, after it had been
     * reported claimed; and a transaction-scoped lock the claim takes would end with its statement.
     */
    protected ClaimResult claimCommitted(Supplier<ClaimResult> claim) {
        if (TransactionSynchronizationManager.isActualTransactionActive()) {
            return claim.get();
        }
        return ownTransaction.execute(status -> {
            beginOwnTransaction();
            ClaimResult result = claim.get();
            if (!(result instanceof ClaimResult.Claimed)) {
                status.setRollbackOnly(); // nothing to keep
            }
            return result;
        });
    }

    /**
     * Reads a record from columns {@code status}, {@code request_hash}, {@code fencing_token},
     * {@code response_status}, {@code response_headers}, {@code response_body}, {@code created_at},
     * {@code expires_at}, {@code locked_until} and {@code lease_expired} (a boolean computed on the database's clock).
     */
    protected IdempotencyRecord record(ScopedKey key, ResultSet rs) throws SQLException {
        RecordStatus status = status(key, rs.getString("status"));
        StoredResponse response = null;
        if (status == RecordStatus.SUCCEEDED) {
            response = new StoredResponse(rs.getInt("response_status"),
                    StoredResponse.headersFromText(rs.getString("response_headers")), rs.getBytes("response_body"));
        }
        return new IdempotencyRecord(key, status, rs.getString("request_hash"), rs.getString("fencing_token"),
                response, instant(rs, "created_at"), instant(rs, "expires_at"), instant(rs, "locked_until"),
                rs.getBoolean("lease_expired"));
    }

    /**
     * The status a record was stored with. One this release does not know (written by a later release of the library
     * sharing the table, or by hand) fails the read as the database failing it would, naming the value: the request
     * is not run, and what to do about it is said.
     */
    private RecordStatus status(ScopedKey key, String stored) {
        for (RecordStatus status : RecordStatus.values()) {
            if (status.name().equals(stored)) {
                return status;
            }
        }
        String table = tableName();
        throw new DataRetrievalFailureException("The idempotency record of " + key.describe()
                + (table == null ? "" : " in table " + table) + " has status "
                + (stored == null ? "null" : "'" + ScopedKey.printable(stored) + "'") + ", which this release of the"
                + " library does not know (it knows " + Arrays.toString(RecordStatus.values()) + "): written by a"
                + " later release sharing the table, or by hand. This instance runs no request with the key until it"
                + " runs a release that knows the status; the record is left as it is.");
    }

    /** A time column as an instant; by default a {@code timestamp with time zone}. */
    protected Instant instant(ResultSet rs, String column) throws SQLException {
        Timestamp timestamp = rs.getTimestamp(column);
        return timestamp == null ? null : timestamp.toInstant();
    }
}
