package io.idempotency.jdbc;

import io.idempotency.core.ScopedKey;

import javax.sql.DataSource;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Timestamp;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Objects;
import java.util.function.Consumer;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Keeps the partitions of the partitioned idempotency table: creates them ahead of time and drops those whose every
 * record is past its retention — without ever making a claim wait. PostgreSQL facts this relies on:
 * {@code CREATE TABLE … PARTITION OF} and {@code DROP} of an attached partition wait behind open claims, and a queued
 * {@code DROP} blocks every new insert; {@code ATTACH PARTITION} and {@code DETACH PARTITION … CONCURRENTLY} do not
 * block new claims. Hence:
 * <ul>
 *   <li>a future partition is created as a standalone table and then attached;</li>
 *   <li>an old partition is detached concurrently (which waits, in the background, for the transactions that may
 *       still use it) and only then dropped, when no claim can reach it any more;</li>
 *   <li>all DDL runs with a short {@code lock_timeout}, so it never queues in front of claims for long; what fails is
 *       retried at the next run. The one exception is the concurrent detach, which waits, holding no lock, for the
 *       transactions that use the table (requests in progress): it waits as long as the detach wait allows, since
 *       cut short it would leave the detach pending, and with requests longer than the short timeout always in flight
 *       no partition would ever go. These timeouts end the waits: a {@code statement_timeout} the pool's
 *       connections have is raised for the run above the DDL lock timeout, so that a wait cut short still ends as a
 *       lock not had ({@link #isLockNotAvailable(Throwable)}) while the statements stay bounded, lifted for the
 *       concurrent detach alone, and restored after the run;</li>
 *   <li>session advisory locks let one application instance at a time create partitions, and one at a time drop
 *       them; the others skip the run (or, for creation, may wait for it, as long as the DDL lock timeout).</li>
 * </ul>
 * Creation ({@link #createAhead(boolean)}) and removal ({@link #dropExpired(Duration)}) are separate: every instance
 * that takes claims may keep partitions ready, whereas dropping is the retention's job. Partition bounds are multiples
 * of the interval since the epoch, in UTC; times come from the database clock. What a run created and dropped, and
 * what it could not, is returned for the caller to log. Thread-safe.
 */
public class PostgresPartitionMaintenance {

    private static final DateTimeFormatter NAME = DateTimeFormatter.ofPattern("yyyyMMdd'_'HHmmss").withZone(ZoneOffset.UTC);
    /** A range's bounds; a partition made elsewhere may leave one end open (MINVALUE, MAXVALUE). */
    private static final Pattern BOUNDS = Pattern.compile("FROM \\((MINVALUE|'[^']+')\\) TO \\((MAXVALUE|'[^']+')\\)");

    /** SQLState of a lock not had within {@code lock_timeout}. */
    public static final String LOCK_NOT_AVAILABLE = "55P03";

    /**
     * Advisory lock names, followed by the table's object id: advisory locks are the database's, and the name alone
     * would let the maintenance of a table of that name in another schema (another application's) hold this one up.
     */
    private static final String CREATE_LOCK = "idempotency-partitions:";
    private static final String DROP_LOCK = "idempotency-partition-drops:";
    /** The advisory lock of a name and a table (as the search path finds it; a table that is not there fails). */
    private static final String LOCK_KEY = "hashtextextended(?::text || ?::regclass::oid::text, 0)";

    private final DataSource dataSource;
    private final String table;
    private final Duration interval;
    private final int ahead;
    private final Duration ddlLockTimeout;
    private final Duration detachWait;

    /**
     * What one run did.
     *
     * @param blocked    ranges not created because a default partition holds rows in them (PostgreSQL refuses to
     *                   attach a partition over them); those rows must be moved out by whoever owns that partition
     * @param notDropped tables detached from this table for removal that could not be dropped, each as its name and
     *                   PostgreSQL's reason ({@code name: reason}) — typically a view or another object made on
     *                   that table, which a drop without {@code CASCADE} refuses to take along. They are tried again
     *                   at every run and hold up nothing else: the run still drops the other tables and the
     *                   expired partitions. The library never drops with {@code CASCADE}, since that would drop
     *                   objects it did not make: whoever made them must drop them (or the table)
     */
    public record Run(boolean skipped, List<String> created, List<String> dropped, List<String> blocked,
                      List<String> notDropped) {

        public Run(boolean skipped, List<String> created, List<String> dropped, List<String> blocked) {
            this(skipped, created, dropped, blocked, List.of());
        }

        public Run(boolean skipped, List<String> created, List<String> dropped) {
            this(skipped, created, dropped, List.of());
        }
    }

    /**
     * @param interval       the span of one partition (a whole number of seconds, at least one)
     * @param ahead          how many partitions after the current one to keep ready
     * @param ddlLockTimeout the longest a DDL statement may wait for a lock before the run gives up on it; also the
     *                       longest a concurrent detach waits for the requests in progress on the table
     */
    public PostgresPartitionMaintenance(DataSource dataSource, String tableName, Duration interval, int ahead,
                                        Duration ddlLockTimeout) {
        this(dataSource, tableName, interval, ahead, ddlLockTimeout, ddlLockTimeout);
    }

    /**
     * @param interval       the span of one partition (a whole number of seconds, at least one)
     * @param ahead          how many partitions after the current one to keep ready
     * @param ddlLockTimeout the longest a DDL statement may wait for a lock before the run gives up on it
     * @param detachWait     the longest a concurrent detach may wait for the transactions that use the table (a request
     *                       in progress holds its claim's transaction open). It holds no lock while it waits and makes
     *                       no claim wait; given up, it leaves the detach pending, to be finished by a later run, which
     *                       waits only the DDL lock timeout for it (finishing it holds the table's lock while it waits)
     */
    public PostgresPartitionMaintenance(DataSource dataSource, String tableName, Duration interval, int ahead,
                                        Duration ddlLockTimeout, Duration detachWait) {
        this.dataSource = Objects.requireNonNull(dataSource, "dataSource");
        this.table = IdempotencySchema.checkTableName(tableName);
        if (interval.getSeconds() < 1 || interval.getNano() != 0) {
            // bounds are steps of whole seconds since the epoch, and names are made of them: a fraction does not fit
            throw new IllegalArgumentException("partition interval must be a whole number of seconds, at least one: "
                    + interval);
        }
        if (ahead < 1) {
            throw new IllegalArgumentException("at least one partition must be kept ahead: " + ahead);
        }
        this.interval = interval;
        this.ahead = ahead;
        this.ddlLockTimeout = ddlLockTimeout;
        this.detachWait = Objects.requireNonNull(detachWait, "detachWait");
    }

    /**
     * Creates the partitions for the database's current time and the next {@code ahead} intervals, and drops the
     * partitions whose upper bound lies more than {@code retention} in the past: {@link #createAhead(boolean)
     * createAhead(false)}, then {@link #dropExpired(Duration)}. Skipped (and reported so) when another instance was
     * doing both.
     */
    public Run run(Duration retention) {
        Run created = createAhead(false);
        Run dropped = dropExpired(retention);
        return new Run(created.skipped() && dropped.skipped(), created.created(), dropped.dropped(),
                created.blocked(), dropped.notDropped());
    }

    /**
     * Creates the partitions for the database's current time and the next {@code ahead} intervals that do not exist
     * yet; drops nothing. One instance at a time creates partitions: while another one does, this one skips the run
     * ({@code waitForOtherInstance} false) or waits for it to finish (true), at most the DDL lock timeout, and then
     * creates only what is still missing.
     *
     * @throws IllegalStateException when a lock was not available within the DDL lock timeout (its cause is the
     *                               {@link SQLException} with SQLState {@value #LOCK_NOT_AVAILABLE}), or on any other
     *                               failure
     */
    public Run createAhead(boolean waitForOtherInstance) {
        return locked(CREATE_LOCK, waitForOtherInstance, (connection, now) ->
                createAhead(connection, now));
    }

    /**
     * Detaches and drops the partitions whose upper bound lies more than {@code retention} in the past and that hold
     * no record expiring later (one claimed under a longer retention keeps its partition until it expires) nor a
     * claim whose lease is live (its holder still at work keeps it until the claim is finished; claims whose lease
     * has run out are deleted first, under their row locks, so that one taken over or renewed meanwhile keeps its
     * partition rather than go with it), and the one whose detach an earlier call left pending, whatever
     * {@code retention} says now; creates nothing. Skipped (and reported so) while another instance drops partitions.
     * First drops the tables an earlier call detached but did not drop; one of those that cannot be dropped (an object
     * depends on it, or its lock was not had in time) is reported in {@link Run#notDropped()} and tried again by the
     * next call, while the others and the expired partitions are still dropped.
     *
     * @throws IllegalStateException when a lock of an expired partition was not available within the DDL lock
     *                               timeout (its concurrent detach: within the detach wait), or on any other
     *                               failure; what was not dropped is dropped by a later call
     */
    public Run dropExpired(Duration retention) {
        return dropExpired(retention, name -> { });
    }

    /**
     * As {@link #dropExpired(Duration)}, telling {@code afterDrop} the name of each table as soon as it is dropped: a
     * call that fails later (another partition's lock not had in time, its drop refused) has still dropped those.
     * Claims deleted unresolved with an expired partition are not told: see
     * {@link #dropExpired(Duration, Consumer, Consumer)}.
     */
    public Run dropExpired(Duration retention, Consumer<String> afterDrop) {
        return dropExpired(retention, afterDrop, key -> { });
    }

    /**
     * As {@link #dropExpired(Duration, Consumer)}, telling {@code abandoned} the key of each claim deleted with its
     * partition as soon as it is deleted: an intent-first claim whose lease ran out and that no retry and no sweeper
     * resolved within the retention. Its outcome (did the side effect happen?) was never recorded, and a retry of it
     * from now on runs the request again: what the caller tells it is all a reconciliation will have of it.
     */
    public Run dropExpired(Duration retention, Consumer<String> afterDrop, Consumer<ScopedKey> abandoned) {
        Objects.requireNonNull(afterDrop, "afterDrop");
        Objects.requireNonNull(abandoned, "abandoned");
        return locked(DROP_LOCK, false, (connection, now) -> dropExpired(connection, now.minus(retention),
                afterDrop, abandoned));
    }

    /**
     * Why the connection's role cannot keep the table's partitions as asked, or null when it can. PostgreSQL lets only
     * the owner of a table (or a member of the owning role) attach a partition to it, detach one or drop one: so
     * creating needs the table, and CREATE on the schema new partitions are made in (the connection's current schema,
     * where the table's name is found); dropping needs the table and each of its partitions, also those someone else
     * made. A role granted only what requests need (a table made by a DBA) starts while partitions made ahead still
     * cover the present, and then fails every run: until the last one runs out, and with it every claim, when it
     * creates them; for good, the table growing, when it only drops them.
     *
     * @param creates whether the application creates partitions
     * @param drops   whether it detaches and drops expired ones
     */
    public String maintenanceDenied(boolean creates, boolean drops) {
        try (Connection connection = ReadConnections.borrow(dataSource);
             PreparedStatement statement = connection.prepareStatement("SELECT current_user,"
                     + " pg_has_role(current_user, c.relowner, 'USAGE'), c.relowner::regrole::text,"
                     + " current_schema() IS NOT NULL AND has_schema_privilege(current_schema(), 'CREATE'),"
                     + " current_schema(), (SELECT string_agg(p.oid::regclass::text || ' (' || p.relowner::regrole::text"
                     + " || ')', ', ' ORDER BY p.oid::regclass::text) FROM pg_inherits i JOIN pg_class p"
                     + " ON p.oid = i.inhrelid WHERE i.inhparent = c.oid"
                     // a default partition is never dropped (nor any other while there is one)
                     + " AND p.oid <> (SELECT partdefid FROM pg_partitioned_table WHERE partrelid = c.oid)"
                     + " AND NOT pg_has_role(current_user, p.relowner, 'USAGE'))"
                     + " FROM pg_class c WHERE c.oid = to_regclass(?)")) {
            statement.setString(1, table);
            try (ResultSet rs = statement.executeQuery()) {
                if (!rs.next() || !(creates || drops)) {
                    return null; // no such table: the maintenance's own runs say so
                }
                List<String> lacks = new ArrayList<>();
                if (!rs.getBoolean(2)) {
                    lacks.add("does not own table " + table + " (its owner is " + rs.getString(3) + ")");
                }
                if (creates && !rs.getBoolean(4)) {
                    lacks.add("lacks CREATE on schema " + rs.getString(5) + ", where new partitions are made");
                }
                if (drops && rs.getString(6) != null) {
                    lacks.add("does not own its partitions " + rs.getString(6));
                }
                return lacks.isEmpty() ? null : "the database role " + rs.getString(1) + " " + String.join(" and ",
                        lacks);
            }
        } catch (SQLException e) {
            throw new IllegalStateException("could not look up who may maintain the partitions of " + table, e);
        }
    }

    /**
     * Whether an attached partition covers the database's current time, so that a claim now has one to go into: a
     * range partition, or a default partition (which one made outside the library may have).
     */
    public boolean coversNow() {
        try (Connection connection = ReadConnections.borrow(dataSource)) {
            Instant now = databaseNow(connection);
            return hasDefaultPartition(connection) || partitions(connection).stream()
                    .anyMatch(p -> !p.detachPending() && !now.isBefore(p.from()) && now.isBefore(p.to()));
        } catch (SQLException e) {
            throw new IllegalStateException("could not list the partitions of " + table, e);
        }
    }

    /** Whether {@code failure} (or one of its causes) is PostgreSQL's answer to a lock not had within the timeout. */
    public static boolean isLockNotAvailable(Throwable failure) {
        for (Throwable t = failure; t != null; t = t.getCause()) {
            if (t instanceof SQLException sql && LOCK_NOT_AVAILABLE.equals(sql.getSQLState())) {
                return true;
            }
        }
        return false;
    }

    private interface Work {
        Run run(Connection connection, Instant now) throws SQLException;
    }

    /** {@code work} under the session advisory lock {@code lock}, with the DDL lock timeout; skipped when not had. */
    private Run locked(String lock, boolean wait, Work work) {
        // a connection of its own, also inside an application's transaction (through a TransactionAwareDataSourceProxy
        // the transaction's own connection, whose switch to auto-commit would commit the application's work)
        try (Connection connection = ReadConnections.unproxied(dataSource).getConnection()) {
            boolean previousAutoCommit = connection.getAutoCommit();
            connection.setAutoCommit(true); // DETACH … CONCURRENTLY cannot run inside a transaction block
            String previousLockTimeout = currentSetting(connection, "lock_timeout");
            long previousStatementTimeout = statementTimeoutMillis(connection);
            try {
                // before the advisory lock: waiting for another instance is bounded by it too
                setLockTimeout(connection, ddlLockTimeout);
                // a statement_timeout the pool's connections have, shorter than the lock timeout, would end the waits
                // as another failure than a lock not had, which a starting instance must tell apart: raised above it
                // for the run, still bounding the statements (none when the pool had none)
                if (previousStatementTimeout > 0) {
                    execute(connection, "SET statement_timeout = '" + Math.max(previousStatementTimeout,
                            Math.min(Integer.MAX_VALUE, ddlLockTimeout.toMillis() + 1000)) + "ms'");
                }
                checkPartitioned(connection); // also before the lock, whose key is the table's
                if (!lock(connection, lock, wait)) {
                    return new Run(true, List.of(), List.of());
                }
                try {
                    return work.run(connection, databaseNow(connection));
                } finally {
                    unlock(connection, lock);
                }
            } finally { // the pooled connection goes back as it came (a pool need not reset what a borrower changed),
                // each setting restored even when one before it could not be
                try {
                    restoreSetting(connection, "statement_timeout", String.valueOf(previousStatementTimeout)); // ms
                } finally {
                    try {
                        restoreSetting(connection, "lock_timeout", previousLockTimeout);
                    } finally {
                        connection.setAutoCommit(previousAutoCommit);
                    }
                }
            }
        } catch (SQLException e) {
            throw new IllegalStateException("maintenance of the partitions of " + table + " failed: "
                    + e.getMessage(), e);
        }
    }

    private static String currentSetting(Connection connection, String name) throws SQLException {
        try (PreparedStatement statement = connection.prepareStatement("SELECT current_setting(?)")) {
            statement.setString(1, name);
            try (ResultSet rs = statement.executeQuery()) {
                rs.next();
                return rs.getString(1);
            }
        }
    }

    /** The connection's {@code statement_timeout} in milliseconds; 0 for none. */
    private static long statementTimeoutMillis(Connection connection) throws SQLException {
        try (Statement statement = connection.createStatement();
             ResultSet rs = statement.executeQuery("SELECT setting::bigint FROM pg_settings"
                     + " WHERE name = 'statement_timeout'")) {
            return rs.next() ? rs.getLong(1) : 0;
        }
    }

    private static void restoreSetting(Connection connection, String name, String value) throws SQLException {
        try (PreparedStatement statement = connection.prepareStatement("SELECT set_config(?, ?, false)")) {
            statement.setString(1, name);
            statement.setString(2, value);
            statement.execute();
        }
    }

    /** The partitions attached now, oldest first. */
    public List<Partition> partitions() {
        try (Connection connection = ReadConnections.borrow(dataSource)) {
            return partitions(connection);
        } catch (SQLException e) {
            throw new IllegalStateException("could not list the partitions of " + table, e);
        }
    }

    /**
     * One attached partition and its range [from, to); an end left open (MINVALUE, MAXVALUE, in a partition made
     * elsewhere) is {@link Instant#MIN} or {@link Instant#MAX}. The name is as SQL writes it: quoted where it must be,
     * and with its schema when the search path does not find it there.
     */
    public record Partition(String name, Instant from, Instant to, boolean detachPending) {
    }

    private void checkPartitioned(Connection connection) throws SQLException {
        try (PreparedStatement statement = connection.prepareStatement(
                "SELECT relkind FROM pg_class WHERE oid = to_regclass(?)")) {
            statement.setString(1, table);
            try (ResultSet rs = statement.executeQuery()) {
                if (!rs.next()) {
                    throw new IllegalStateException("table " + table + " does not exist in the connection's schema");
                }
                if (!"p".equals(rs.getString(1))) {
                    throw new IllegalStateException("table " + table + " is not partitioned, so its partitions cannot"
                            + " be maintained: it was created for batched deletes. Create it from "
                            + IdempotencySchema.POSTGRESQL_PARTITIONED_SCRIPT + " (or keep the delete mode).");
                }
            }
        }
    }

    private Run createAhead(Connection connection, Instant now) throws SQLException {
        List<Partition> existing = partitions(connection);
        long step = interval.getSeconds();
        long first = Math.floorDiv(now.getEpochSecond(), step) * step;
        List<String> created = new ArrayList<>();
        List<String> blocked = new ArrayList<>();
        String defaultPartition = defaultPartition(connection);
        for (int i = 0; i <= ahead; i++) {
            Instant rangeFrom = Instant.ofEpochSecond(first + i * step);
            // what partitions (of this interval, or of another one used before) leave uncovered of this range
            for (Instant[] gap : uncovered(existing, rangeFrom, rangeFrom.plus(interval))) {
                Instant from = gap[0];
                Instant to = gap[1];
                String name = table + "_p" + NAME.format(from);
                dropLeftover(connection, name);
                // a standalone table first: CREATE … PARTITION OF would wait behind open claims. With the table's
                // generated columns as generated ones, which PostgreSQL requires of a partition (an identity column
                // it gives the partition itself, and refuses one of its own from PostgreSQL 17 on). With the plain
                // table's room on each page, so that completing a claim stays a HOT update: a partitioned table has no
                // storage parameters for LIKE to copy
                execute(connection, "CREATE TABLE IF NOT EXISTS " + name + " (LIKE " + table
                        + " INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED) WITH (fillfactor = 90)");
                try {
                    attach(connection, name, from, to, defaultPartition);
                } catch (SQLException e) {
                    if (!"23514".equals(e.getSQLState())) {
                        throw e;
                    }
                    // a default partition holds rows in this range: the later ranges can still be made
                    execute(connection, "DROP TABLE IF EXISTS " + name);
                    blocked.add("[" + from + ", " + to + ")");
                    continue;
                }
                created.add(name);
            }
        }
        return new Run(false, created, List.of(), blocked);
    }

    /**
     * Drops the table {@code name} in the schema partitions are made in when it is one an earlier run made for a range
     * and did not attach (the attach's lock not had in time, or the run stopped between the two): no partition of
     * anything, and empty. It is made again in the table's shape of now; reused, it would keep the shape the table
     * had then, and PostgreSQL refuses to attach a table that lacks a column added to the table since. A table of that
     * name that holds rows, or is a partition, is left as it is, and so is one that cannot be dropped (each drop is a
     * statement of its own, in auto-commit: a failed one leaves nothing to roll back).
     */
    private static void dropLeftover(Connection connection, String name) throws SQLException {
        String leftover;
        try (PreparedStatement statement = connection.prepareStatement("SELECT c.oid::regclass::text FROM pg_class c"
                + " WHERE c.oid = to_regclass(quote_ident(current_schema()) || '.' || ?) AND c.relkind = 'r'"
                + " AND NOT c.relispartition")) {
            statement.setString(1, name);
            try (ResultSet rs = statement.executeQuery()) {
                if (!rs.next()) {
                    return;
                }
                leftover = rs.getString(1);
            }
        }
        try (Statement statement = connection.createStatement();
             ResultSet rs = statement.executeQuery("SELECT EXISTS (SELECT 1 FROM " + leftover + ")")) {
            rs.next();
            if (rs.getBoolean(1)) {
                return;
            }
        }
        try {
            execute(connection, "DROP TABLE " + leftover);
        } catch (SQLException e) {
            // kept (something made on it, its lock not had in time): attached as it is, if PostgreSQL takes it
        }
    }

    /**
     * The parts of [from, to) that no partition of {@code existing} (oldest first, not overlapping) covers. A range
     * is usually covered whole or not at all; after the interval was changed, partitions of the earlier one may
     * cover only part of it, and the rest still needs a partition, or claims in it would find none.
     */
    private static List<Instant[]> uncovered(List<Partition> existing, Instant from, Instant to) {
        List<Instant[]> gaps = new ArrayList<>();
        Instant cursor = from;
        for (Partition partition : existing) {
            if (!partition.from().isBefore(to)) {
                break;
            }
            if (!partition.to().isAfter(cursor)) {
                continue;
            }
            if (partition.from().isAfter(cursor)) {
                gaps.add(new Instant[]{cursor, partition.from()});
            }
            cursor = partition.to();
        }
        if (cursor.isBefore(to)) {
            gaps.add(new Instant[]{cursor, to});
        }
        return gaps;
    }

    /**
     * Attaches the standalone table {@code name} for [from, to). Beside a default partition, {@code ATTACH} also takes
     * an ACCESS EXCLUSIVE lock on that partition (to check it holds no row of the range), which every claim's look-up
     * reads: queued behind one open claim, it would hold up every new claim. So there the lock is taken without
     * waiting, in the attach's transaction; when a claim holds it, the attach fails with {@value #LOCK_NOT_AVAILABLE}
     * and is tried again at the next run, while the default partition takes the rows meanwhile.
     */
    private void attach(Connection connection, String name, Instant from, Instant to, String defaultPartition)
            throws SQLException {
        String attach = "ALTER TABLE " + table + " ATTACH PARTITION " + name
                + " FOR VALUES FROM ('" + from + "') TO ('" + to + "')";
        if (defaultPartition == null) {
            execute(connection, attach);
            return;
        }
        connection.setAutoCommit(false);
        try {
            execute(connection, "LOCK TABLE " + defaultPartition + " IN ACCESS EXCLUSIVE MODE NOWAIT");
            execute(connection, attach);
            connection.commit();
        } catch (SQLException e) {
            connection.rollback();
            throw e;
        } finally {
            connection.setAutoCommit(true);
        }
    }

    /** The table's default partition, as a name to put in SQL, or null when it has none. */
    private String defaultPartition(Connection connection) throws SQLException {
        try (PreparedStatement statement = connection.prepareStatement("SELECT partdefid::regclass::text FROM"
                + " pg_partitioned_table WHERE partrelid = to_regclass(?) AND partdefid <> 0")) {
            statement.setString(1, table);
            try (ResultSet rs = statement.executeQuery()) {
                return rs.next() ? rs.getString(1) : null;
            }
        }
    }

    private Run dropExpired(Connection connection, Instant expiredBefore, Consumer<String> afterDrop,
                            Consumer<ScopedKey> abandoned) throws SQLException {
        String mark = removalMark(connection);
        List<String> dropped = new ArrayList<>();
        List<String> notDropped = new ArrayList<>();
        dropDetachedLeftovers(connection, mark, dropped, notDropped, afterDrop);
        List<Partition> partitions = partitions(connection);
        // a detach an earlier run left pending is finished first: while one is pending, PostgreSQL refuses to detach
        // any other partition of the table, so an older partition that has expired since would fail every run
        partitions.sort(Comparator.comparing(partition -> !partition.detachPending()));
        for (Partition partition : partitions) {
            // a pending one is finished whatever the retention says now (it may have been raised since): the table
            // has not shown its records since its detach began, and it would keep every other detach refused
            if (!partition.detachPending() && partition.to().isAfter(expiredBefore)) {
                continue;
            }
            if (!partition.detachPending() && (holdsUnexpiredRecords(connection, partition)
                    || !removeAbandonedClaims(connection, partition, abandoned))) {
                // claimed under a longer retention than the one configured now: kept until its own expires_at; or
                // a claim still held under a live lease: kept until it is finished or its lease runs out
                continue;
            }
            // marked first: a run that ends between the detach and the drop (the process stopped, the connection
            // lost, the drop's lock not had in time) leaves a table that is no partition any more, which the next run
            // finds by this mark and drops
            execute(connection, "COMMENT ON TABLE " + partition.name() + " IS " + literal(mark));
            // detach without blocking new claims, then drop the table no claim can reach any more
            try {
                if (partition.detachPending()) {
                    execute(connection, "ALTER TABLE " + table + " DETACH PARTITION " + partition.name() + " FINALIZE");
                } else {
                    // waits for the requests in progress on the table, holding no lock meanwhile: bounded by the
                    // detach wait, not the DDL lock timeout, which a request longer than it would make every detach
                    // leave pending. Nor by the run's statement_timeout, which would cut the wait short just the same:
                    // the detach wait alone bounds it
                    String statementTimeout = currentSetting(connection, "statement_timeout");
                    setLockTimeout(connection, detachWait);
                    execute(connection, "SET statement_timeout = 0");
                    try {
                        execute(connection, "ALTER TABLE " + table + " DETACH PARTITION " + partition.name()
                                + " CONCURRENTLY");
                    } finally {
                        setLockTimeout(connection, ddlLockTimeout);
                        restoreSetting(connection, "statement_timeout", statementTimeout);
                    }
                }
            } catch (SQLException e) {
                // still a partition (a detach refused, or not had in time; one left pending is marked again by the run
                // that finishes it): unmarked, so that whoever detaches it to keep its rows — beside a default
                // partition, which makes PostgreSQL refuse every concurrent detach, that is the default partition's
                // manager — does not have it taken for a table this library detached and dropped
                try {
                    execute(connection, "COMMENT ON TABLE " + partition.name() + " IS NULL");
                } catch (SQLException unmarked) {
                    e.addSuppressed(unmarked);
                }
                throw e;
            }
            execute(connection, "DROP TABLE " + partition.name());
            dropped.add(partition.name());
            afterDrop.accept(partition.name());
        }
        return new Run(false, List.of(), dropped, List.of(), notDropped);
    }

    /**
     * The comment a partition gets before it is detached for removal: names the table it belongs to (with its schema),
     * so that only this table's leftovers are dropped.
     */
    private String removalMark(Connection connection) throws SQLException {
        try (PreparedStatement statement = connection.prepareStatement("SELECT format('%I.%I', n.nspname, c.relname)"
                + " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass(?)")) {
            statement.setString(1, table);
            try (ResultSet rs = statement.executeQuery()) {
                rs.next();
                return "idempotency: detached from " + rs.getString(1) + " to be dropped";
            }
        }
    }

    /**
     * Drops the tables an earlier run detached from this table but did not drop, adding their names to
     * {@code dropped}. One that cannot be dropped goes to {@code notDropped} with the reason, and the others are still
     * dropped: a table that keeps refusing (a view made on it, which a drop without {@code CASCADE} will not take
     * along) must not stop the removal of everything after it, run after run. Each drop is a statement of its own
     * (the connection is in auto-commit), so a failed one leaves nothing to roll back.
     */
    private static void dropDetachedLeftovers(Connection connection, String mark, List<String> dropped,
                                              List<String> notDropped, Consumer<String> afterDrop)
            throws SQLException {
        List<String[]> leftovers = new ArrayList<>();
        try (PreparedStatement statement = connection.prepareStatement("SELECT c.oid::regclass::text, c.relname"
                + " FROM pg_class c JOIN pg_description d ON d.objoid = c.oid AND d.classoid = 'pg_class'::regclass"
                + " AND d.objsubid = 0 WHERE c.relkind = 'r' AND NOT c.relispartition AND d.description = ?")) {
            statement.setString(1, mark);
            try (ResultSet rs = statement.executeQuery()) {
                while (rs.next()) {
                    leftovers.add(new String[]{rs.getString(1), rs.getString(2)});
                }
            }
        }
        for (String[] leftover : leftovers) {
            try {
                execute(connection, "DROP TABLE " + leftover[0]);
            } catch (SQLException e) {
                notDropped.add(leftover[1] + ": " + String.join(" ", String.valueOf(e.getMessage()).strip()
                        .split("\\s*\\R\\s*")));
                continue;
            }
            dropped.add(leftover[1]);
            afterDrop.accept(leftover[1]);
        }
    }

    private static String literal(String text) {
        return "'" + text.replace("'", "''") + "'";
    }

    /**
     * Whether a record in {@code partition} has not expired yet, or is a claim whose lease is live — its holder still
     * working on it, renewing the lease, however long ago it was claimed: dropped, its answer would find no record and
     * a retry would run its request again beside it (found through the indexes on expires_at and locked_until).
     */
    private static boolean holdsUnexpiredRecords(Connection connection, Partition partition) throws SQLException {
        try (Statement statement = connection.createStatement();
             ResultSet rs = statement.executeQuery("SELECT EXISTS (SELECT 1 FROM " + partition.name()
                     + " WHERE expires_at >= now()) OR EXISTS (SELECT 1 FROM " + partition.name()
                     + " WHERE locked_until >= now() AND status = 'PROCESSING')")) {
            rs.next();
            return rs.getBoolean(1);
        }
    }

    /**
     * Deletes the claims of {@code partition} whose lease and expiry have both run out, then looks again: true when
     * the partition may go, false when a claim was given a live lease again in the meantime. The look before saw no
     * live record, but a claim whose lease has run out may be taken over (a sweeper, a retry asking the resolver
     * again) or renewed (its holder, late) at any moment until the detach: it would go with the partition while its
     * lease is live again. The delete takes each such claim's row lock and looks at its latest version, so a takeover
     * committed first keeps its claim (and the partition), and one that comes after finds no claim to take. What is
     * left cannot come back to life: a completed record is never written again, and a takeover of a FAILED one writes
     * it into the current partition (its creation time is the takeover's). Waits for a row another transaction is
     * writing at most the DDL lock timeout; a wait that runs out fails the run, and a later run tries again.
     */
    private static boolean removeAbandonedClaims(Connection connection, Partition partition,
                                                 Consumer<ScopedKey> abandoned) throws SQLException {
        List<ScopedKey> removed = new ArrayList<>();
        try (Statement statement = connection.createStatement();
             // found through the index on locked_until, which holds leased claims only: a claim without a lease is
             // neither renewed nor taken over as stale, so it cannot come back to life
             ResultSet rs = statement.executeQuery("DELETE FROM " + partition.name() + " WHERE locked_until < now()"
                     + " AND status = 'PROCESSING' AND expires_at < now()"
                     + " RETURNING caller, scope, idempotency_key")) {
            while (rs.next()) {
                try {
                    removed.add(new ScopedKey(rs.getString(1), rs.getString(2), rs.getString(3)));
                } catch (IllegalArgumentException | NullPointerException unlike) {
                    // a row no claim of the library's wrote (an empty key, one too long for a ScopedKey, in a table
                    // made wider by hand): named as near as a key can name it, rather than failing the run (the
                    // delete has committed) with the rest unnamed
                    removed.add(new ScopedKey(named(rs.getString(1)), named(rs.getString(2)),
                            named(rs.getString(3))));
                }
            }
        }
        // told once the delete has committed (the connection commits each statement): never a claim still there
        removed.forEach(abandoned);
        return !holdsUnexpiredRecords(connection, partition);
    }

    /**
     * {@code part} as a part of a {@link ScopedKey} can hold it: not empty, at most 255 characters (its log line makes
     * it printable).
     */
    private static String named(String part) {
        if (part == null || part.isEmpty()) {
            return "(none)";
        }
        return part.length() <= ScopedKey.MAX_LENGTH ? part : part.substring(0, part.offsetByCodePoints(0,
                Math.min(part.codePointCount(0, part.length()), ScopedKey.MAX_LENGTH / 2 - 1))) + "…";
    }

    private List<Partition> partitions(Connection connection) throws SQLException {
        // the name as SQL must write it (quoted where needed, with its schema when the search path does not find it):
        // a partition attached by someone else may be named in any case, or live in another schema
        String sql = "SELECT c.oid::regclass::text, pg_get_expr(c.relpartbound, c.oid), i.inhdetachpending"
                + " FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                + " WHERE i.inhparent = to_regclass(?) ORDER BY 2";
        List<Partition> partitions = new ArrayList<>();
        try (PreparedStatement statement = connection.prepareStatement(sql)) {
            statement.setString(1, table);
            try (ResultSet rs = statement.executeQuery()) {
                while (rs.next()) {
                    if (rs.getString(2) == null) {
                        // dropped (by another instance) since this statement's snapshot, which still shows its rows:
                        // PostgreSQL shows the bounds of a relation that exists only
                        continue;
                    }
                    if ("DEFAULT".equals(rs.getString(2))) {
                        continue; // a catch-all made outside the library: never created nor dropped here
                    }
                    Matcher bounds = BOUNDS.matcher(rs.getString(2));
                    if (!bounds.find()) {
                        throw new IllegalStateException("unexpected bounds of partition " + rs.getString(1) + ": "
                                + rs.getString(2));
                    }
                    partitions.add(new Partition(rs.getString(1), parseBound(connection, bounds.group(1)),
                            parseBound(connection, bounds.group(2)), rs.getBoolean(3)));
                }
            }
        }
        partitions.sort((a, b) -> a.from().compareTo(b.from()));
        return partitions;
    }

    private boolean hasDefaultPartition(Connection connection) throws SQLException {
        try (PreparedStatement statement = connection.prepareStatement("SELECT EXISTS (SELECT 1 FROM"
                + " pg_partitioned_table WHERE partrelid = to_regclass(?) AND partdefid <> 0)")) {
            statement.setString(1, table);
            try (ResultSet rs = statement.executeQuery()) {
                rs.next();
                return rs.getBoolean(1);
            }
        }
    }

    /** A bound as {@code pg_get_expr} shows it: a quoted time, or MINVALUE or MAXVALUE as the earliest or latest. */
    private static Instant parseBound(Connection connection, String bound) throws SQLException {
        if (bound.equals("MINVALUE")) {
            return Instant.MIN;
        }
        if (bound.equals("MAXVALUE")) {
            return Instant.MAX;
        }
        return parseTimestamp(connection, bound.substring(1, bound.length() - 1));
    }

    private static Instant parseTimestamp(Connection connection, String text) throws SQLException {
        try (PreparedStatement statement = connection.prepareStatement("SELECT ?::timestamptz")) {
            statement.setString(1, text);
            try (ResultSet rs = statement.executeQuery()) {
                rs.next();
                return rs.getTimestamp(1).toInstant();
            }
        }
    }

    private static Instant databaseNow(Connection connection) throws SQLException {
        try (Statement statement = connection.createStatement();
             ResultSet rs = statement.executeQuery("SELECT now()")) {
            rs.next();
            Timestamp now = rs.getTimestamp(1);
            return now.toInstant();
        }
    }

    private boolean lock(Connection connection, String lock, boolean wait) throws SQLException {
        try (PreparedStatement statement = connection.prepareStatement(wait
                ? "SELECT true FROM pg_advisory_lock(" + LOCK_KEY + ")"
                : "SELECT pg_try_advisory_lock(" + LOCK_KEY + ")")) {
            statement.setString(1, lock);
            statement.setString(2, table);
            try (ResultSet rs = statement.executeQuery()) {
                rs.next();
                return rs.getBoolean(1);
            }
        }
    }

    private void unlock(Connection connection, String lock) throws SQLException {
        try (PreparedStatement statement = connection.prepareStatement(
                "SELECT pg_advisory_unlock(" + LOCK_KEY + ")")) {
            statement.setString(1, lock);
            statement.setString(2, table);
            statement.execute();
        }
    }

    /** Sets the session's {@code lock_timeout}: at least a millisecond, at most what PostgreSQL takes (about 24.8 days). */
    private static void setLockTimeout(Connection connection, Duration timeout) throws SQLException {
        long millis = timeout.compareTo(Duration.ofMillis(Integer.MAX_VALUE)) > 0 ? Integer.MAX_VALUE
                : Math.max(1, timeout.toMillis());
        execute(connection, "SET lock_timeout = '" + millis + "ms'");
    }

    private static void execute(Connection connection, String sql) throws SQLException {
        try (Statement statement = connection.createStatement()) {
            statement.execute(sql);
        }
    }
}
