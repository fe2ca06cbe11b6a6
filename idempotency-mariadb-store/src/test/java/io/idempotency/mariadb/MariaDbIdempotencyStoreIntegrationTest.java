package io.idempotency.mariadb;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.RecordStatus;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StoredResponse;
import io.idempotency.core.Transactions;
import io.idempotency.jdbc.SpringTransactions;
import io.idempotency.testkit.Async;
import io.idempotency.testkit.CountingStatements;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIf;
import org.springframework.dao.DataAccessException;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.jdbc.datasource.DelegatingDataSource;
import org.springframework.transaction.TransactionDefinition;
import org.springframework.transaction.support.TransactionTemplate;

import javax.sql.DataSource;
import java.lang.reflect.InvocationTargetException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import java.util.TimeZone;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Supplier;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The MariaDB store against the whole store contract, on a table made from the shipped script. */
@EnabledIf("io.idempotency.mariadb.TestMariaDb#available")
class MariaDbIdempotencyStoreIntegrationTest extends MariaDbStoreContract {

    private static OwnDatabase DATABASE;

    @BeforeAll
    static void makeDatabase() {
        DATABASE = OwnDatabase.create(TestMariaDb.newDatabase().dataSource(MIN_POOL_SIZE + 4));
    }

    @AfterAll
    static void closePool() {
        OwnDatabase.close(DATABASE);
    }

    @Override
    protected OwnDatabase database() {
        return DATABASE;
    }

    /**
     * A transaction that holds no connection of the store's DataSource (another pool) must not get a claim that
     * commits on its own: the claim refuses, and writes nothing. The store's pool runs at READ COMMITTED, so that
     * only this check can refuse.
     */
    @Test
    void aClaimInATransactionOnAnotherDataSourceIsRefused() {
        ScopedKey key = newKey();
        try (HikariDataSource storePool = TestMariaDb.newDatabase().dataSource(2,
                config -> config.setTransactionIsolation("TRANSACTION_READ_COMMITTED"));
             HikariDataSource otherPool = TestMariaDb.newDatabase().dataSource(1)) {
            new JdbcTemplate(storePool).execute(MariaDbIdempotencyStore.schema("idempotency_keys"));
            MariaDbIdempotencyStore store = new MariaDbIdempotencyStore(storePool, "idempotency_keys");
            TransactionTemplate other = new TransactionTemplate(new DataSourceTransactionManager(otherPool));
            assertThatThrownBy(() -> other.executeWithoutResult(status -> {
                new JdbcTemplate(otherPool).execute("SELECT 1"); // the other transaction holds its connection
                store.claim(new ClaimRequest(key, "c".repeat(64), Duration.ofDays(1), Duration.ofMillis(100)));
            })).isInstanceOf(IllegalStateException.class)
                    .hasMessageContaining("holds no connection of the idempotency store's DataSource");
            assertThat(store.find(key)).as("nothing was written for the refused claim").isEmpty();
        }
    }

    /**
     * A claim that meets another transaction's uncommitted claim looks again after each pause until the bounded wait
     * has passed, and is then busy (409), however many looks that took: they are no record changing under the claim,
     * and must not use up its attempts, or a long wait (an idempotency.in-flight-wait of minutes) would end in an
     * error instead. Here the store allows three attempts, far fewer than half a second of pauses takes.
     */
    @Test
    void aClaimWaitingForAnUncommittedClaimIsBusyOnlyOnceTheWholeWaitHasPassed() throws Exception {
        ScopedKey key = newKey();
        String hash = "c".repeat(64);
        MariaDbIdempotencyStore store = new MariaDbIdempotencyStore(pool(), "idempotency_keys", 3);
        TransactionTemplate transaction = readCommitted(pool());
        CountDownLatch release = new CountDownLatch(1);
        CompletableFuture<ClaimResult> holder = holdUncommittedClaim(key, hash, release);
        try {
            long start = System.nanoTime();
            ClaimResult waited = transaction.execute(status ->
                    store.claim(new ClaimRequest(key, hash, Duration.ofDays(1), Duration.ofMillis(500))));
            long tookMillis = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            assertThat(waited).isInstanceOf(ClaimResult.Busy.class);
            assertThat(tookMillis).as("the whole bounded wait").isGreaterThanOrEqualTo(450);
        } finally {
            release.countDown();
        }
        assertThat(holder.get(30, TimeUnit.SECONDS)).isInstanceOf(ClaimResult.Claimed.class);
    }

    /**
     * A claim waiting for another transaction's uncommitted claim looks again after a pause that doubles from 2 ms up
     * to 25 ms, as mariadb.md says: a second of waiting is at most about a hundred statements (a look-up and an insert that
     * does not wait, each time), not a stream of them that keeps a connection and the server busy for the whole wait.
     */
    @Test
    void aClaimWaitingForAnUncommittedClaimLooksAgainAfterAGrowingPause() throws Exception {
        ScopedKey key = newKey();
        String hash = "c".repeat(64);
        java.util.concurrent.atomic.AtomicInteger statements = new java.util.concurrent.atomic.AtomicInteger();
        DataSource counting = CountingStatements.dataSource(pool(), statements);
        MariaDbIdempotencyStore waitingStore = new MariaDbIdempotencyStore(counting, "idempotency_keys");
        TransactionTemplate waiting = readCommitted(counting);
        CountDownLatch release = new CountDownLatch(1);
        CompletableFuture<ClaimResult> holder = holdUncommittedClaim(key, hash, release);
        try {
            ClaimResult waited = waiting.execute(status -> {
                statements.set(0);
                return waitingStore.claim(new ClaimRequest(key, hash, Duration.ofDays(1), Duration.ofSeconds(1)));
            });
            assertThat(waited).isInstanceOf(ClaimResult.Busy.class);
            // pauses of 2, 4, 8, 16, then 25 ms: at most about 45 looks in a second, two statements each
            assertThat(statements.get()).as("statements of the claim that waited a second").isBetween(4, 100);
        } finally {
            release.countDown();
        }
        assertThat(holder.get(30, TimeUnit.SECONDS)).isInstanceOf(ClaimResult.Claimed.class);
    }

    /**
     * Claims {@code key} on another thread in a transaction it keeps open, uncommitted, until {@code release}, then
     * rolls back; returns once the claim is made, with what the claim will have given.
     */
    private CompletableFuture<ClaimResult> holdUncommittedClaim(ScopedKey key, String hash,
                                                                CountDownLatch release)
            throws InterruptedException {
        CountDownLatch claimed = new CountDownLatch(1);
        CompletableFuture<ClaimResult> holder = Async.supply(() -> readCommitted(pool()).execute(status -> {
            ClaimResult result = store().claim(new ClaimRequest(key, hash, Duration.ofDays(1), Duration.ofSeconds(1)));
            claimed.countDown();
            try {
                release.await(30, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            status.setRollbackOnly();
            return result;
        }));
        boolean made = claimed.await(30, TimeUnit.SECONDS);
        if (!made) {
            release.countDown();
        }
        assertThat(made).as("the held claim is made").isTrue();
        return holder;
    }

    /** Transactions on {@code dataSource} at READ COMMITTED, the isolation the store requires. */
    private static TransactionTemplate readCommitted(DataSource dataSource) {
        TransactionTemplate transaction = new TransactionTemplate(new DataSourceTransactionManager(dataSource));
        transaction.setIsolationLevel(TransactionDefinition.ISOLATION_READ_COMMITTED);
        return transaction;
    }

    /**
     * A claim, a renewal and a takeover made late in a long transaction (a caller that claims inside a transaction of
     * its own) write the whole lease and retention from the time they are made (UTC_TIMESTAMP(6) is the statement's
     * start, not the transaction's), and a lease that ran out while the transaction was open is seen to have run out.
     */
    @Test
    void timesAreTakenWhenTheStatementRunsNotWhenItsTransactionBegan() {
        ScopedKey key = newKey();
        JdbcTemplate jdbc = new JdbcTemplate(pool());
        TransactionTemplate transaction = readCommitted(pool());
        transaction.executeWithoutResult(status -> {
            jdbc.queryForObject("SELECT SLEEP(" + LATE.toMillis() / 1000.0 + ")", Integer.class);
            String beforeTheClaim = databaseNow();
            ClaimResult claimed = store().claim(new ClaimRequest(key, "c".repeat(64), Duration.ofDays(1),
                    Duration.ofSeconds(5), LEASE));
            assertThat(claimed).isInstanceOf(ClaimResult.Claimed.class);
            assertFullLeaseAndRetention(key, "the claim", beforeTheClaim, Duration.ofDays(1));
            jdbc.queryForObject("SELECT SLEEP(" + LATE.toMillis() / 1000.0 + ")", Integer.class);
            String beforeTheRenewal = databaseNow();
            assertThat(store().renew(key, ((ClaimResult.Claimed) claimed).fencingToken(), LEASE)).isTrue();
            assertFullLeaseAndRetention(key, "the renewal", beforeTheRenewal, null);
        });

        ScopedKey expiring = newKey();
        transaction.executeWithoutResult(status -> {
            jdbc.queryForObject("SELECT 1", Integer.class); // the transaction starts before the other's lease runs out
            String token = Async.supply(() -> transaction.execute(inner -> ((ClaimResult.Claimed) store().claim(
                    new ClaimRequest(expiring, "c".repeat(64), Duration.ofDays(1), Duration.ofSeconds(5),
                            Duration.ofMillis(200)))).fencingToken())).join();
            jdbc.queryForObject("SELECT SLEEP(" + LATE.toMillis() / 1000.0 + ")", Integer.class);
            assertThat(store().find(expiring).orElseThrow().leaseExpired()).as("the lease that ran out").isTrue();
            assertThat(store().findExpiredLeases(1000)).as("the stale claims")
                    .anyMatch(record -> record.key().equals(expiring));
            String beforeTheTakeover = databaseNow();
            assertThat(store().takeOver(expiring, token, LEASE)).as("the takeover").isPresent();
            assertFullLeaseAndRetention(expiring, "the takeover", beforeTheTakeover, null);
        });
    }

    /**
     * A claim that met a concurrent, uncommitted claim of the key, which then rolled back, is made when it looks
     * again: its lease runs its whole length from then, not from when it began to wait.
     */
    @Test
    void aClaimThatWaitedForAnotherClaimOfTheKeyHoldsItsWholeLease() throws Exception {
        ScopedKey key = newKey();
        String hash = "c".repeat(64);
        CountDownLatch release = new CountDownLatch(1);
        CompletableFuture<ClaimResult> holder = holdUncommittedClaim(key, hash, release);
        try {
            CompletableFuture<ClaimResult> waiting = Async.supply(() -> readCommitted(pool()).execute(status ->
                    store().claim(new ClaimRequest(key, hash, Duration.ofDays(1), Duration.ofSeconds(30), LEASE))));
            Thread.sleep(LATE.toMillis());
            assertThat(waiting).as("the claim waits while the other is uncommitted").isNotDone();
            String beforeTheRelease = databaseNow();
            release.countDown();
            assertThat(waiting.get(30, TimeUnit.SECONDS)).isInstanceOf(ClaimResult.Claimed.class);
            assertFullLeaseAndRetention(key, "the claim that waited", beforeTheRelease, Duration.ofDays(1));
        } finally {
            release.countDown();
            holder.get(30, TimeUnit.SECONDS);
        }
    }

    /** How long the claims of the tests above are made after their transaction, or their wait, began. */
    private static final Duration LATE = Duration.ofMillis(1500);
    private static final Duration LEASE = Duration.ofSeconds(3);

    /** The database's clock in UTC (whatever the session's time zone), as text, read just before a write. */
    private String databaseNow() {
        return new JdbcTemplate(pool()).queryForObject("SELECT CAST(UTC_TIMESTAMP(6) AS CHAR)", String.class);
    }

    /**
     * Checks that the record of {@code key} holds {@link #LEASE} and, unless null, {@code retention}, counted from no
     * earlier than {@code before} (the database's clock read just before the write): counted from its transaction's or
     * its wait's start, they would end {@link #LATE} too early. A slow machine only adds to what is measured.
     */
    private void assertFullLeaseAndRetention(ScopedKey key, String what, String before, Duration retention) {
        Map<String, Object> held = new JdbcTemplate(pool()).queryForMap("SELECT"
                + " TIMESTAMPDIFF(MICROSECOND, CAST(? AS DATETIME(6)), locked_until) DIV 1000 AS lease,"
                + " TIMESTAMPDIFF(MICROSECOND, CAST(? AS DATETIME(6)), expires_at) DIV 1000 AS retention"
                + " FROM idempotency_keys WHERE caller = ? AND scope = ? AND idempotency_key = ?",
                before, before, key.caller(), key.scope(), key.key());
        assertThat(((Number) held.get("lease")).longValue()).as("milliseconds of the lease of %s", what)
                .isGreaterThan(LEASE.toMillis() - 500);
        if (retention != null) {
            assertThat(((Number) held.get("retention")).longValue())
                    .as("milliseconds of the retention of %s", what).isGreaterThan(retention.toMillis() - 500);
        }
    }

    /** Expiry and leases are UTC on the database's clock, whatever time zone the session runs in. */
    @Test
    void timesAreUtcWhateverTheSessionsTimeZone() {
        ScopedKey key = newKey();
        Instant before = Instant.now().minusSeconds(5);
        TransactionTemplate transaction = readCommitted(pool());
        transaction.executeWithoutResult(status -> {
            new JdbcTemplate(pool()).execute("SET time_zone = '+09:00'");
            try {
                assertThat(store().claim(new ClaimRequest(key, "c".repeat(64), Duration.ofHours(1),
                        Duration.ofSeconds(1), Duration.ofMinutes(10)))).isInstanceOf(ClaimResult.Claimed.class);
            } finally {
                new JdbcTemplate(pool()).execute("SET time_zone = DEFAULT");
            }
        });
        var record = store().find(key).orElseThrow();
        Instant after = Instant.now().plusSeconds(5);
        assertThat(record.createdAt()).isBetween(before, after);
        assertThat(record.expiresAt()).isBetween(before.plus(Duration.ofHours(1)), after.plus(Duration.ofHours(1)));
        assertThat(record.lockedUntil()).isBetween(before.plus(Duration.ofMinutes(10)),
                after.plus(Duration.ofMinutes(10)));
        assertThat(record.leaseExpired()).isFalse();
    }

    /**
     * The statements a claim costs, as mariadb.md counts them: the claim of a new key is the look-up and the insert,
     * one statement more than on PostgreSQL; the claim that finds a completed record (a replay answered from the
     * database) or another request's record (a mismatch) is the look-up alone.
     */
    @Test
    void aClaimCostsTheStatementsTheDocsCount() {
        java.util.concurrent.atomic.AtomicInteger statements = new java.util.concurrent.atomic.AtomicInteger();
        DataSource counting = CountingStatements.dataSource(pool(), statements);
        MariaDbIdempotencyStore store = new MariaDbIdempotencyStore(counting, "idempotency_keys");
        TransactionTemplate transaction = readCommitted(counting);
        ScopedKey key = newKey();
        String hash = "e".repeat(64);

        transaction.executeWithoutResult(status -> {
            statements.set(0);
            ClaimResult first = store.claim(new ClaimRequest(key, hash, Duration.ofDays(1), Duration.ofSeconds(5)));
            assertThat(first).isInstanceOf(ClaimResult.Claimed.class);
            assertThat(statements).as("the claim of a new key").hasValue(2);
            assertThat(store.complete(key, ((ClaimResult.Claimed) first).fencingToken(),
                    new io.idempotency.core.StoredResponse(201, List.of(), "done".getBytes()))).isTrue();
        });
        for (String request : List.of(hash, "f".repeat(64))) {
            transaction.executeWithoutResult(status -> {
                statements.set(0);
                assertThat(store.claim(new ClaimRequest(key, request, Duration.ofDays(1), Duration.ofSeconds(5))))
                        .isInstanceOf(ClaimResult.Existing.class);
                assertThat(statements).as("the claim of a completed key").hasValue(1);
                status.setRollbackOnly();
            });
        }
    }

    /**
     * retention.md: a record keeps the expiry it was claimed with, and its {@code UPDATE}, with MariaDB's
     * {@code DATE_ADD(created_at, INTERVAL 60 DAY)} for PostgreSQL's interval, extends the records already stored, so
     * that the cleanup keeps them and they are still answered.
     */
    @Test
    void theDocumentedExtensionOfStoredRecordsKeepsThemFromTheCleanup() throws Exception {
        String update = null;
        String mariaDb = null;
        for (String line : Files.readAllLines(Path.of("..", "docs", "retention.md"))) {
            int start = line.indexOf("`UPDATE idempotency_keys SET expires_at");
            if (start >= 0) {
                update = line.substring(start + 1, line.indexOf('`', start + 1));
            }
            int dateAdd = line.indexOf("(MariaDB: `");
            if (dateAdd >= 0) {
                mariaDb = line.substring(dateAdd + 11, line.indexOf('`', dateAdd + 11));
            }
        }
        assertThat(update).as("the statement retention.md gives").contains("created_at + interval '1440 hours'");
        assertThat(mariaDb).as("its MariaDB form").isEqualTo("DATE_ADD(created_at, INTERVAL 60 DAY)");
        update = update.replace("created_at + interval '1440 hours'", mariaDb);
        StoredResponse answer = new StoredResponse(201, List.of(), "paid".getBytes(StandardCharsets.UTF_8));
        ScopedKey extended = newKey();
        ScopedKey left = newKey();
        for (ScopedKey key : List.of(extended, left)) { // claimed under a TTL that runs out at once
            inTransaction(store -> store.complete(key, ((ClaimResult.Claimed) store.claim(new ClaimRequest(key,
                    "e".repeat(64), Duration.ofMillis(1), Duration.ofSeconds(5)))).fencingToken(), answer));
        }
        Thread.sleep(20);

        // the docs' statement, narrowed to this test's record (the table holds the other tests' records too)
        assertThat(new JdbcTemplate(pool()).update(update + " AND idempotency_key = ?", extended.key()))
                .isEqualTo(1);
        while (inTransaction(store -> store.deleteExpired(1000)) > 0) {
            // every expired record gone
        }

        assertThat(store().find(left)).as("a record not extended is removed").isEmpty();
        assertThat(new JdbcTemplate(pool()).queryForObject("SELECT expires_at = DATE_ADD(created_at,"
                + " INTERVAL 60 DAY) FROM idempotency_keys WHERE idempotency_key = ?", Boolean.class,
                extended.key())).as("extended to 60 days after its claim").isTrue();
        ClaimResult again = inTransaction(store -> store.claim(new ClaimRequest(extended, "e".repeat(64),
                Duration.ofMillis(1), Duration.ofSeconds(5))));
        assertThat(again).isInstanceOf(ClaimResult.Existing.class);
        assertThat(((ClaimResult.Existing) again).record().response()).isEqualTo(answer);
    }

    /**
     * A retention longer than a {@code datetime} can add to today (the starter allows up to 36500000d) is cut to 7,000
     * years, as mariadb.md says, rather than failing every claim: the record is kept and expires in the year 9000 or so.
     */
    @Test
    void aRetentionBeyondSevenThousandYearsIsCutToSevenThousandYears() {
        ScopedKey key = newKey();

        assertThat(claimCommitted(key, "c".repeat(64), Duration.ofDays(36_500_000)))
                .isInstanceOf(ClaimResult.Claimed.class);

        var record = store().find(key).orElseThrow();
        assertThat(Duration.between(record.createdAt(), record.expiresAt()))
                .isBetween(Duration.ofDays(365L * 7000).minusSeconds(1), Duration.ofDays(365L * 7000));
    }

    /**
     * A lease longer than a {@code datetime} can add to today (the starter allows any lease the retention covers, and
     * a retention of up to 36500000d) is cut to 7,000 years, as the retention is, rather than failing every claim,
     * renewal and takeover with a datetime overflow: the claim is held until the year 9000 or so.
     */
    @Test
    void aLeaseBeyondSevenThousandYearsIsCutToSevenThousandYears() throws InterruptedException {
        Duration tenThousandYears = Duration.ofDays(3_650_000);
        Duration sevenThousandYears = Duration.ofDays(365L * 7000);
        ScopedKey key = newKey();

        ClaimResult claimed = inTransaction(store -> store.claim(new ClaimRequest(key, "c".repeat(64),
                Duration.ofDays(36_500_000), Duration.ofSeconds(1), tenThousandYears)));

        assertThat(claimed).isInstanceOf(ClaimResult.Claimed.class);
        String token = ((ClaimResult.Claimed) claimed).fencingToken();
        var held = store().find(key).orElseThrow();
        assertThat(Duration.between(held.createdAt(), held.lockedUntil()))
                .isBetween(sevenThousandYears.minusSeconds(1), sevenThousandYears);
        assertThat(holds(store -> store.renew(key, token, tenThousandYears))).as("renewed").isTrue();

        ScopedKey stale = newKey();
        String expired = ((ClaimResult.Claimed) inTransaction(store -> store.claim(new ClaimRequest(stale,
                "c".repeat(64), Duration.ofDays(1), Duration.ofSeconds(1), Duration.ofMillis(1))))).fencingToken();
        Thread.sleep(20); // past its lease
        assertThat(store().takeOver(stale, expired, tenThousandYears)).as("taken over").isPresent();
        var taken = store().find(stale).orElseThrow();
        assertThat(taken.leaseExpired()).isFalse();
        assertThat(taken.lockedUntil()).isAfter(held.createdAt().plus(sevenThousandYears).minusSeconds(10));
    }

    /**
     * A DataSource of the test database on which, the first time a connection prepares the takeover of a FAILED record,
     * {@code interloper} runs on a thread of its own, its outcome set into {@code outcome}, before the takeover is
     * sent: what another request does between a retry's look-up and its takeover.
     */
    private <T> DataSource beforeTheTakeover(AtomicReference<T> outcome, Supplier<T> interloper) {
        return new DelegatingDataSource(pool()) {
            @Override
            public Connection getConnection() throws SQLException {
                Connection connection = super.getConnection();
                return (Connection) Proxy.newProxyInstance(getClass().getClassLoader(),
                        new Class<?>[] {Connection.class}, (proxy, method, args) -> {
                            if (method.getName().equals("prepareStatement") && ((String) args[0]).contains("UPDATE")
                                    && ((String) args[0]).contains("SET status = 'PROCESSING'")
                                    && outcome.get() == null) {
                                outcome.set(Async.supply(interloper).get(30, TimeUnit.SECONDS));
                            }
                            try {
                                return method.invoke(connection, args);
                            } catch (InvocationTargetException e) {
                                throw e.getCause();
                            }
                        });
            }
        };
    }

    /**
     * A retry that finds the FAILED record, and loses it to another retry whose takeover commits between that look-up
     * and its own takeover, looks again and sees that claim: the request does not run twice. The other retry is run
     * as the first one sends its takeover.
     */
    @Test
    void aRetryThatLosesTheFailedRecordBetweenLookUpAndTakeoverSeesTheClaimThatTookItOver() throws Exception {
        ScopedKey key = newKey();
        String hash = "c".repeat(64);
        String failed = ((ClaimResult.Claimed) claimCommitted(key, hash, Duration.ofDays(1))).fencingToken();
        assertThat(holds(store -> store.fail(key, failed))).isTrue();
        AtomicReference<ClaimResult> other = new AtomicReference<>();
        DataSource otherRetryFirst = beforeTheTakeover(other, () -> claimCommitted(key, hash, Duration.ofDays(1)));
        MariaDbIdempotencyStore store = new MariaDbIdempotencyStore(otherRetryFirst, "idempotency_keys");
        Transactions.Transaction transaction =
                new SpringTransactions(new DataSourceTransactionManager(otherRetryFirst)).begin();
        try {
            ClaimResult result = store.claim(new ClaimRequest(key, hash, Duration.ofDays(1), Duration.ofSeconds(1)));

            assertThat(other.get()).as("the other retry").isInstanceOf(ClaimResult.Claimed.class);
            assertThat(result).as("the retry that lost the record").isInstanceOf(ClaimResult.Existing.class);
            assertThat(((ClaimResult.Existing) result).record().fencingToken())
                    .isEqualTo(((ClaimResult.Claimed) other.get()).fencingToken());
        } finally {
            transaction.rollback();
        }
    }

    /**
     * A retry's takeover is tied to the FAILED record it looked up, by that record's fencing token: when the record is
     * deleted between the look-up and the takeover, and another request claims the key and fails in its turn, the
     * key holds a FAILED record again, but of another request, which the retry must not take over (its request would
     * run and its answer be stored for the other request's key). It looks again and gets that record.
     */
    @Test
    void aFailedRecordReplacedByAnotherRequestsWhileTheRetryLookedIsNotTakenOver() throws Exception {
        ScopedKey key = newKey();
        String hashA = "a".repeat(64);
        String hashB = "b".repeat(64);
        String first = ((ClaimResult.Claimed) claimCommitted(key, hashA, Duration.ofDays(1))).fencingToken();
        assertThat(holds(store -> store.fail(key, first))).isTrue();
        AtomicReference<String> replacing = new AtomicReference<>();
        // on connections of their own, committed before the retry's takeover runs
        DataSource replacedBeforeTheTakeover = beforeTheTakeover(replacing, () -> {
            new JdbcTemplate(pool()).update("DELETE FROM idempotency_keys"
                    + " WHERE caller = ? AND scope = ? AND idempotency_key = ?", key.caller(), key.scope(), key.key());
            String second = ((ClaimResult.Claimed) claimCommitted(key, hashB, Duration.ofDays(1))).fencingToken();
            assertThat(holds(store -> store.fail(key, second))).isTrue();
            return second;
        });
        MariaDbIdempotencyStore store = new MariaDbIdempotencyStore(replacedBeforeTheTakeover, "idempotency_keys");
        Transactions.Transaction transaction =
                new SpringTransactions(new DataSourceTransactionManager(replacedBeforeTheTakeover)).begin();
        try {
            ClaimResult retry = store.claim(new ClaimRequest(key, hashA, Duration.ofDays(1), Duration.ofSeconds(5)));

            assertThat(replacing.get()).as("the record was replaced after the retry looked").isNotNull();
            assertThat(retry).as("the retry of the first request").isInstanceOf(ClaimResult.Existing.class);
            assertThat(((ClaimResult.Existing) retry).record().requestHash()).isEqualTo(hashB);
        } finally {
            transaction.rollback();
        }
        var record = store().find(key).orElseThrow();
        assertThat(record.status()).isEqualTo(RecordStatus.FAILED);
        assertThat(record.requestHash()).as("still the other request's").isEqualTo(hashB);
        assertThat(record.fencingToken()).isEqualTo(replacing.get());
    }

    /**
     * Two retries of one request look the key up on two instances, find nothing, and insert only after the first
     * attempt's claim has been committed and marked FAILED. Meeting that record must not leave each of their
     * transactions a shared lock on it (as a duplicate-key error does): each then finds the FAILED record of its own
     * request and tries to take it over, and the key is free, so one of them must get it, rather than both waiting on
     * each other's lock until their wait has passed and being told "in progress" for a key nobody holds. The winner
     * holds its claim until the other has answered, which therefore waits for it (busy).
     */
    @Test
    void twoRetriesThatMeetTheFailedRecordOnInsertTakeItOverOnce() throws Exception {
        ScopedKey key = newKey();
        String hash = "c".repeat(64);
        // the first attempt claims and fails on a thread of its own, outside the retries' transactions
        CyclicBarrier bothLookedUp = new CyclicBarrier(2, () -> Async.run(() -> {
            String first = ((ClaimResult.Claimed) claimCommitted(key, hash, Duration.ofDays(1))).fencingToken();
            assertThat(holds(store -> store.fail(key, first))).isTrue();
        }).join());
        DataSource insertAfterTheFailure = new DelegatingDataSource(pool()) {
            @Override
            public Connection getConnection() throws SQLException {
                Connection connection = super.getConnection();
                boolean[] waited = new boolean[1];
                return (Connection) Proxy.newProxyInstance(getClass().getClassLoader(),
                        new Class<?>[] {Connection.class}, (proxy, method, args) -> {
                            if (method.getName().equals("prepareStatement")
                                    && ((String) args[0]).contains("INSERT INTO") && !waited[0]) {
                                waited[0] = true;
                                bothLookedUp.await(30, TimeUnit.SECONDS);
                            }
                            try {
                                return method.invoke(connection, args);
                            } catch (InvocationTargetException e) {
                                throw e.getCause();
                            }
                        });
            }
        };
        MariaDbIdempotencyStore store = new MariaDbIdempotencyStore(insertAfterTheFailure, "idempotency_keys");
        Transactions transactions = new SpringTransactions(new DataSourceTransactionManager(insertAfterTheFailure));
        CountDownLatch bothClaimed = new CountDownLatch(2);
        java.util.function.Supplier<ClaimResult> retry = () -> {
            Transactions.Transaction transaction = transactions.begin();
            try {
                ClaimResult result = store.claim(new ClaimRequest(key, hash, Duration.ofDays(1),
                        Duration.ofSeconds(2)));
                bothClaimed.countDown();
                // the winner holds its claim until the other has answered, as a handler would
                bothClaimed.await(30, TimeUnit.SECONDS);
                if (result instanceof ClaimResult.Claimed) {
                    transaction.commit();
                }
                return result;
            } catch (InterruptedException e) {
                throw new IllegalStateException(e);
            } finally {
                transaction.rollback();
            }
        };
        CompletableFuture<ClaimResult> one = Async.supply(retry);
        CompletableFuture<ClaimResult> other = Async.supply(retry);
        List<ClaimResult> results = List.of(one.get(30, TimeUnit.SECONDS), other.get(30, TimeUnit.SECONDS));

        assertThat(results).as("one retry takes the FAILED record over, the other waits for it")
                .extracting(result -> result.getClass().getSimpleName())
                .containsExactlyInAnyOrder("Claimed", "Busy");
    }

    /** The UTC times the table holds are read as UTC whatever the JVM's time zone. */
    @Test
    void timesAreReadAsUtcWhateverTheJvmsTimeZone() {
        TimeZone jvm = TimeZone.getDefault();
        TimeZone.setDefault(TimeZone.getTimeZone("Asia/Tokyo"));
        try (HikariDataSource dataSource = TestMariaDb.newDatabase().dataSource(2)) {
            new JdbcTemplate(dataSource).execute(MariaDbIdempotencyStore.schema("idempotency_keys"));
            MariaDbIdempotencyStore store = new MariaDbIdempotencyStore(dataSource, "idempotency_keys");
            ScopedKey key = newKey();
            Instant before = Instant.now().minusSeconds(5);
            TransactionTemplate transaction = readCommitted(dataSource);
            ClaimResult claim = transaction.execute(status -> store.claim(new ClaimRequest(key, "c".repeat(64),
                    Duration.ofHours(1), Duration.ofSeconds(1), Duration.ofMinutes(10))));
            assertThat(claim).isInstanceOf(ClaimResult.Claimed.class);

            var record = store.find(key).orElseThrow();
            Instant after = Instant.now().plusSeconds(5);
            assertThat(record.createdAt()).isBetween(before, after);
            assertThat(record.expiresAt()).isBetween(before.plus(Duration.ofHours(1)), after.plus(Duration.ofHours(1)));
            assertThat(record.lockedUntil()).isBetween(before.plus(Duration.ofMinutes(10)),
                    after.plus(Duration.ofMinutes(10)));
        } finally {
            TimeZone.setDefault(jvm);
        }
    }

    /**
     * A claim whose thread is interrupted while it waits for another transaction's claim of the key is told "busy",
     * as when its wait runs out, and keeps the interrupt: the thread is being stopped, the request is not at fault.
     */
    @Test
    void aClaimInterruptedWhileItWaitsIsBusyAndKeepsTheInterrupt() throws Exception {
        ScopedKey key = newKey();
        Transactions.Transaction holder = transactions().begin();
        try {
            assertThat(store().claim(new ClaimRequest(key, "c".repeat(64), Duration.ofDays(1), Duration.ofSeconds(1))))
                    .isInstanceOf(ClaimResult.Claimed.class);
            ClaimResult[] result = new ClaimResult[1];
            boolean[] interrupted = new boolean[1];
            Thread waiter = new Thread(() -> {
                Transactions.Transaction transaction = transactions().begin();
                try {
                    Thread.currentThread().interrupt();
                    result[0] = store().claim(new ClaimRequest(key, "c".repeat(64), Duration.ofDays(1),
                            Duration.ofSeconds(10)));
                    interrupted[0] = Thread.interrupted();
                } finally {
                    transaction.rollback();
                }
            });
            waiter.start();
            waiter.join(TimeUnit.SECONDS.toMillis(30));
            assertThat(result[0]).isInstanceOf(ClaimResult.Busy.class);
            assertThat(interrupted[0]).as("the interrupt is kept").isTrue();
        } finally {
            holder.rollback();
        }
    }

    /**
     * A claim made with no transaction open commits before it returns, at READ COMMITTED whatever the pool's default
     * (here InnoDB's, REPEATABLE READ), on a pool that does not auto-commit too: left to the connection, the claim
     * would be refused, or rolled back when the connection goes back after it had been reported claimed, and the next
     * request with the key would claim it again. A write made in a scope without a transaction (propagation SUPPORTS),
     * whose connection nobody commits, persists too.
     */
    @Test
    void aClaimAndAWriteOutsideATransactionPersistOnAPoolThatDoesNotAutoCommit() {
        try (HikariDataSource pool = TestMariaDb.newDatabase().dataSource(2, config -> config.setAutoCommit(false))) {
            new JdbcTemplate(pool).execute(MariaDbIdempotencyStore.schema("idempotency_keys"));
            MariaDbIdempotencyStore store = new MariaDbIdempotencyStore(pool, "idempotency_keys");
            ScopedKey key = newKey();
            ClaimRequest claim = new ClaimRequest(key, "c".repeat(64), Duration.ofDays(1), Duration.ofSeconds(1),
                    Duration.ofSeconds(30));
            ClaimResult first = store.claim(claim);
            assertThat(first).isInstanceOf(ClaimResult.Claimed.class);
            assertThat(store.claim(claim)).as("the key claimed again").isInstanceOf(ClaimResult.Existing.class);

            TransactionTemplate supports = new TransactionTemplate(new DataSourceTransactionManager(pool));
            supports.setPropagationBehavior(TransactionDefinition.PROPAGATION_SUPPORTS);
            supports.executeWithoutResult(status -> {
                new JdbcTemplate(pool).queryForObject("SELECT 1", Integer.class); // the scope holds a connection
                assertThat(store.fail(key, ((ClaimResult.Claimed) first).fencingToken())).isTrue();
            });
            assertThat(store.find(key)).map(record -> record.status().name()).as("marked FAILED")
                    .hasValue("FAILED");
        }
    }

    /** At REPEATABLE READ (InnoDB's default) a look-up after a conflict would miss the record: refused. */
    @Test
    void aClaimAtRepeatableReadIsRefused() {
        TransactionTemplate repeatableRead = new TransactionTemplate(new DataSourceTransactionManager(pool()));
        repeatableRead.setIsolationLevel(TransactionDefinition.ISOLATION_REPEATABLE_READ);
        ScopedKey key = newKey();
        assertThatThrownBy(() -> repeatableRead.executeWithoutResult(status -> store().claim(new ClaimRequest(key,
                "c".repeat(64), Duration.ofDays(1), Duration.ofSeconds(1)))))
                .isInstanceOf(IllegalStateException.class).hasMessageContaining("must run at READ COMMITTED");
        assertThat(store().find(key)).isEmpty();
    }

    /** The schema script makes a table of the longest name the store accepts (64 characters, MariaDB's limit). */
    @Test
    void theSchemaTakesTheLongestTableName() {
        String table = "t".repeat(64);
        new JdbcTemplate(pool()).execute(MariaDbIdempotencyStore.schema(table));
        try {
            MariaDbIdempotencyStore store = new MariaDbIdempotencyStore(pool(), table);
            ScopedKey key = newKey();
            String token = ((ClaimResult.Claimed) inTransaction(ignored -> store.claim(new ClaimRequest(key,
                    "c".repeat(64), Duration.ofDays(1), Duration.ofSeconds(1))))).fencingToken();
            assertThat(store.find(key).orElseThrow().fencingToken()).isEqualTo(token);
        } finally {
            new JdbcTemplate(pool()).execute("DROP TABLE " + table);
        }
    }

    /**
     * A claim the database refuses for a reason other than a concurrent claim of the key (here a trigger; in production
     * a server gone read-only, a full disk) fails with the database's error, at once: it is not taken for a record
     * that changed and looked up again.
     */
    @Test
    void aClaimRefusedByTheDatabaseFailsWithItsError() {
        String table = "refusing_keys";
        JdbcTemplate jdbc = new JdbcTemplate(pool());
        jdbc.execute(MariaDbIdempotencyStore.schema(table));
        jdbc.execute("CREATE TRIGGER refuse_claims BEFORE INSERT ON " + table
                + " FOR EACH ROW SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'claims are refused here'");
        try {
            MariaDbIdempotencyStore store = new MariaDbIdempotencyStore(pool(), table);
            assertThatThrownBy(() -> inTransaction(ignored -> store.claim(new ClaimRequest(newKey(), "c".repeat(64),
                    Duration.ofDays(1), Duration.ofSeconds(1)))))
                    .isInstanceOf(DataAccessException.class).hasMessageContaining("claims are refused here");
        } finally {
            jdbc.execute("DROP TABLE " + table);
        }
    }

    /**
     * With Connector/J's bulk statements a batch reports no count per row; cleanup still reports what it deleted,
     * which its scheduler relies on to go on while whole batches are deleted.
     */
    @Test
    void cleanupWithBulkStatementsReportsWhatItDeleted() throws Exception {
        try (HikariDataSource dataSource = TestMariaDb.newDatabase().dataSource(4, config -> {
            config.addDataSourceProperty("useBulkStmts", "true");
            config.addDataSourceProperty("useServerPrepStmts", "true");
        })) {
            new JdbcTemplate(dataSource).execute(MariaDbIdempotencyStore.schema("idempotency_keys"));
            MariaDbIdempotencyStore store = new MariaDbIdempotencyStore(dataSource, "idempotency_keys");
            Transactions transactions = new SpringTransactions(new DataSourceTransactionManager(dataSource));
            for (int i = 0; i < 5; i++) {
                ScopedKey expired = newKey();
                Transactions.Transaction transaction = transactions.begin();
                store.fail(expired, ((ClaimResult.Claimed) store.claim(new ClaimRequest(expired, "c".repeat(64),
                        Duration.ofMillis(1), Duration.ofSeconds(1)))).fencingToken());
                transaction.commit();
            }
            Thread.sleep(10);

            assertThat(store.deleteExpired(3)).isEqualTo(3);
            assertThat(store.deleteExpired(3)).isEqualTo(2);
            assertThat(new JdbcTemplate(dataSource).queryForObject("SELECT count(*) FROM idempotency_keys",
                    Integer.class)).isZero();
        }
    }

    /**
     * Cleanup on a pool left at InnoDB's default, REPEATABLE READ, while claims come in: at that level its search for
     * expired records would lock the gaps it scans — up to the end of the table when every record there has expired —
     * and a claim's insert into such a gap would be refused until cleanup commits. Cleanup is made slow here (a
     * trigger that sleeps on each delete); a claim made meanwhile is not held up.
     */
    @Test
    void cleanupOnARepeatableReadPoolDoesNotHoldUpAClaim() throws Exception {
        try (HikariDataSource dataSource = TestMariaDb.newDatabase().dataSource(4)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute(MariaDbIdempotencyStore.schema("idempotency_keys"));
            assertThat(jdbc.queryForObject("SELECT @@tx_isolation", String.class)).isEqualTo("REPEATABLE-READ");
            MariaDbIdempotencyStore store = new MariaDbIdempotencyStore(dataSource, "idempotency_keys");
            Transactions transactions = new SpringTransactions(new DataSourceTransactionManager(dataSource));
            for (int i = 0; i < 3; i++) {
                ScopedKey expired = newKey();
                Transactions.Transaction transaction = transactions.begin();
                store.fail(expired, ((ClaimResult.Claimed) store.claim(new ClaimRequest(expired, "c".repeat(64),
                        Duration.ofMillis(1), Duration.ofSeconds(1)))).fencingToken());
                transaction.commit();
            }
            // three deletes of a second each: the claim below, slow on a loaded machine, still comes while they run
            jdbc.execute("CREATE TRIGGER slow_cleanup BEFORE DELETE ON idempotency_keys FOR EACH ROW DO SLEEP(1)");
            Thread.sleep(10);

            CompletableFuture<Integer> cleanup = Async.supply(() -> store.deleteExpired(100));
            Thread.sleep(200); // cleanup is deleting its batch
            Transactions.Transaction transaction = transactions.begin();
            try {
                assertThat(store.claim(new ClaimRequest(newKey(), "c".repeat(64), Duration.ofDays(1),
                        Duration.ofMillis(300)))).isInstanceOf(ClaimResult.Claimed.class);
                assertThat(cleanup).as("cleanup still runs").isNotDone();
            } finally {
                transaction.rollback();
            }
            assertThat(cleanup.get(30, TimeUnit.SECONDS)).isEqualTo(3);
        }
    }
}
