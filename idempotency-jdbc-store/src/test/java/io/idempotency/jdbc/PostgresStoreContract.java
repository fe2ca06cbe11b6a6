package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.IdempotencyRecord;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StoredResponse;
import io.idempotency.core.Transactions;
import io.idempotency.testkit.Async;
import io.idempotency.testkit.CountingStatements;
import io.idempotency.testkit.IdempotencyStoreContract;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.transaction.support.TransactionTemplate;

import javax.sql.DataSource;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;
import java.util.function.Function;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The store contract, and what every PostgreSQL store promises beyond it, on a database of the test class's own. The
 * class makes it once, in a static field (JUnit makes an instance of the class for every test), and closes its pool
 * after its last test; the store under test, its transactions and its pool all come from it.
 */
abstract class PostgresStoreContract extends IdempotencyStoreContract {

    /** The test class's database. */
    protected abstract OwnDatabase database();

    /** The statements the claim of a new key costs on the store under test, as the docs count them. */
    protected abstract int statementsOfAFirstClaim();

    @Override
    protected IdempotencyStore store() {
        return database().store();
    }

    /** The pool of the store under test. */
    protected DataSource dataSource() {
        return database().pool();
    }

    /** A store of the kind under test, on {@code dataSource} (the pool, wrapped to watch its statements). */
    protected IdempotencyStore storeOn(DataSource dataSource) {
        return database().storeOn().apply(dataSource);
    }

    @Override
    protected Transactions transactions() {
        return database().transactions();
    }

    @Override
    protected void awaitBlockedClaim() throws InterruptedException {
        database().postgres().awaitLockWaiter(Duration.ofSeconds(30));
    }

    /**
     * The statements a claim costs, as how-it-works.md and retention.md count them: the claim of a new key is one
     * statement on the plain store, and one more on the partitioned store (the look-up that takes the key's lock, then
     * the look-up and insert); the claim that finds a completed record (a replay answered from the database) or
     * another request's record (a mismatch) is one statement on both, which inserts nothing and takes no lock.
     */
    @Test
    void aClaimCostsTheStatementsTheDocsCount() {
        AtomicInteger statements = new AtomicInteger();
        DataSource counting = CountingStatements.dataSource(dataSource(), statements);
        IdempotencyStore store = storeOn(counting);
        TransactionTemplate transaction = new TransactionTemplate(new DataSourceTransactionManager(counting));
        ScopedKey key = newKey();
        String hash = "e".repeat(64);

        transaction.executeWithoutResult(status -> {
            statements.set(0);
            ClaimResult first = store.claim(new ClaimRequest(key, hash, Duration.ofDays(1), Duration.ofSeconds(5)));
            assertThat(first).isInstanceOf(ClaimResult.Claimed.class);
            assertThat(statements).as("the claim of a new key").hasValue(statementsOfAFirstClaim());
            assertThat(store.complete(key, ((ClaimResult.Claimed) first).fencingToken(),
                    new StoredResponse(201, List.of(), "done".getBytes()))).isTrue();
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
     * The bounded wait of the claim must not leak into the handler's statements: neither when the claim inserts, nor
     * when it finds a record (a FAILED one is taken over, and the handler then runs in that transaction).
     */
    @Test
    void theClaimRestoresTheLockTimeoutTheHandlerRunsWith() {
        ScopedKey key = newKey();
        ClaimResult first = lockTimeoutAfterClaiming(key);
        assertThat(first).isInstanceOf(ClaimResult.Claimed.class);
        new TransactionTemplate(new DataSourceTransactionManager(dataSource())).executeWithoutResult(status ->
                assertThat(store().fail(key, ((ClaimResult.Claimed) first).fencingToken())).isTrue());
        assertThat(lockTimeoutAfterClaiming(key)).as("a FAILED record taken over")
                .isInstanceOf(ClaimResult.Claimed.class);
    }

    /** Claims {@code key} in a transaction whose lock_timeout is 7s, and checks it is 7s again after the claim. */
    private ClaimResult lockTimeoutAfterClaiming(ScopedKey key) {
        JdbcTemplate jdbc = new JdbcTemplate(dataSource());
        return new TransactionTemplate(new DataSourceTransactionManager(dataSource())).execute(status -> {
            jdbc.execute("SET LOCAL lock_timeout = '7s'");
            ClaimResult result = store().claim(new ClaimRequest(key, "d".repeat(64), Duration.ofDays(1),
                    Duration.ofMillis(100)));
            assertThat(jdbc.queryForObject("SHOW lock_timeout", String.class)).isEqualTo("7s");
            return result;
        });
    }

    /**
     * A wait under a millisecond bounds only the wait for another claim of the key: a free key is claimed all the same,
     * not answered Busy before the claim was even tried.
     */
    @Test
    void aClaimWithAWaitUnderAMillisecondClaimsAFreeKey() {
        ScopedKey key = newKey();
        ClaimResult result = new TransactionTemplate(new DataSourceTransactionManager(dataSource())).execute(status -> {
            ClaimResult claimed = store().claim(new ClaimRequest(key, "d".repeat(64), Duration.ofDays(1),
                    Duration.ofNanos(500_000)));
            status.setRollbackOnly();
            return claimed;
        });
        assertThat(result).isInstanceOf(ClaimResult.Claimed.class);
    }

    /**
     * The widest key the library accepts fits the key's index: caller, scope and key of 255 UTF-16 characters each, all
     * three bytes long in UTF-8 and not compressible, make an entry of about 2,300 bytes, under the 2,700 or so a btree
     * entry may hold; a character of four bytes counts two towards the 255, so it makes no wider key. Were the limit
     * counted in code points (255 four-byte characters, 1,020 bytes a part), or raised, claims of such keys would fail
     * on every attempt.
     */
    @Test
    void theWidestKeyTheLibraryAcceptsFitsTheKeysIndex() {
        java.util.Random random = new java.util.Random(42);
        // three-byte characters (CJK), and four-byte ones (CJK extension B), as many as a ScopedKey takes
        for (int[] range : new int[][] {{0x4E00, 0xA000}, {0x20000, 0x2A6E0}}) {
            java.util.function.Supplier<String> widest = () -> {
                String text = random.ints(ScopedKey.MAX_LENGTH, range[0], range[1]).collect(StringBuilder::new,
                        StringBuilder::appendCodePoint, StringBuilder::append).toString();
                while (!accepted(text)) {
                    text = text.substring(0, text.offsetByCodePoints(text.length(), -1));
                }
                return text;
            };
            ScopedKey key = new ScopedKey(widest.get(), widest.get(), widest.get());

            ClaimResult claimed = new TransactionTemplate(new DataSourceTransactionManager(dataSource()))
                    .execute(status -> store().claim(new ClaimRequest(key, "a".repeat(64), Duration.ofDays(1),
                            Duration.ofSeconds(5))));
            assertThat(claimed).as("%d bytes of caller", key.caller().getBytes(StandardCharsets.UTF_8).length)
                    .isInstanceOf(ClaimResult.Claimed.class);
        }
    }

    private static boolean accepted(String part) {
        try {
            new ScopedKey(part, "s", "k");
            return true;
        } catch (IllegalArgumentException e) {
            return false;
        }
    }

    /**
     * A completed request's answer never waits: a transaction that found the record (a replay whose transaction is
     * still open, or a caller that claims inside a longer transaction of its own) holds nothing another replay of the
     * key has to wait for, however many replays of a popular key arrive at once.
     */
    @Test
    void aReplayNeverWaitsForAnotherTransactionThatFoundTheCompletedRecord() throws Exception {
        ScopedKey key = newKey();
        String hash = "d".repeat(64);
        StoredResponse answer = new StoredResponse(201, List.of(), "done".getBytes());
        TransactionTemplate ownTransaction = new TransactionTemplate(new DataSourceTransactionManager(dataSource()));
        ownTransaction.executeWithoutResult(status -> {
            String token = ((ClaimResult.Claimed) store().claim(
                    new ClaimRequest(key, hash, Duration.ofDays(1), Duration.ofSeconds(5)))).fencingToken();
            assertThat(store().complete(key, token, answer)).isTrue();
        });

        Transactions.Transaction firstReplay = transactions().begin();
        try {
            assertThat(store().claim(new ClaimRequest(key, hash, Duration.ofDays(1), Duration.ofSeconds(5))))
                    .isInstanceOf(ClaimResult.Existing.class);
            // the first replay's transaction is still open while a second replay of the key arrives
            ClaimResult secondReplay = Async.supply(() -> ownTransaction.execute(status ->
                    store().claim(new ClaimRequest(key, hash, Duration.ofDays(1), Duration.ofMillis(500)))))
                    .get(30, TimeUnit.SECONDS);
            assertThat(secondReplay).as("the second replay").isInstanceOf(ClaimResult.Existing.class);
            assertThat(((ClaimResult.Existing) secondReplay).record().response()).isEqualTo(answer);
        } finally {
            firstReplay.rollback();
        }
    }

    /**
     * PostgreSQL's {@code now()} is the time the transaction started. A claim, a renewal and a takeover made late in a
     * long transaction (a caller that claims inside a transaction of its own) must still write the whole lease and
     * retention from the time they are made, and a lease that ran out while the transaction was open must be seen to
     * have run out: otherwise the claim looks stale to the others before its holder's lease has passed.
     */
    @Test
    void timesAreTakenWhenTheStatementRunsNotWhenItsTransactionBegan() throws Exception {
        ScopedKey key = newKey();
        JdbcTemplate jdbc = new JdbcTemplate(dataSource());
        TransactionTemplate transaction = new TransactionTemplate(new DataSourceTransactionManager(dataSource()));
        transaction.executeWithoutResult(status -> {
            jdbc.execute("SELECT pg_sleep(" + LATE.toMillis() / 1000.0 + ")");
            String beforeTheClaim = databaseNow();
            ClaimResult claimed = store().claim(new ClaimRequest(key, "d".repeat(64), Duration.ofDays(1),
                    Duration.ofSeconds(5), LEASE));
            assertThat(claimed).isInstanceOf(ClaimResult.Claimed.class);
            assertFullLeaseAndRetention(key, "the claim", beforeTheClaim, Duration.ofDays(1));
            jdbc.execute("SELECT pg_sleep(" + LATE.toMillis() / 1000.0 + ")");
            String beforeTheRenewal = databaseNow();
            assertThat(store().renew(key, ((ClaimResult.Claimed) claimed).fencingToken(), LEASE)).isTrue();
            assertFullLeaseAndRetention(key, "the renewal", beforeTheRenewal, null);
        });

        ScopedKey expiring = newKey();
        transaction.executeWithoutResult(status -> {
            jdbc.execute("SELECT 1"); // the transaction starts before the other's lease runs out
            String token = Async.supply(() -> transaction.execute(inner -> ((ClaimResult.Claimed) store().claim(
                    new ClaimRequest(expiring, "d".repeat(64), Duration.ofDays(1), Duration.ofSeconds(5),
                            Duration.ofMillis(200)))).fencingToken())).join();
            jdbc.execute("SELECT pg_sleep(" + LATE.toMillis() / 1000.0 + ")");
            assertThat(store().find(expiring).orElseThrow().leaseExpired()).as("the lease that ran out").isTrue();
            assertThat(store().findExpiredLeases(1000)).as("the stale claims")
                    .anyMatch(record -> record.key().equals(expiring));
            String beforeTheTakeover = databaseNow();
            assertThat(store().takeOver(expiring, token, LEASE)).as("the takeover").isPresent();
            assertFullLeaseAndRetention(expiring, "the takeover", beforeTheTakeover, null);
        });
    }

    /**
     * retention.md: a record keeps the expiry it was claimed with, so raising the TTL protects only the records claimed
     * from then on, and its {@code UPDATE} extends those already stored; the cleanup then keeps them, and they are
     * still answered. A request answered from its record under a shorter TTL shortens nothing either.
     */
    @Test
    void theDocumentedExtensionOfStoredRecordsKeepsThemFromTheCleanup() throws Exception {
        String update = null;
        for (String line : Files.readAllLines(Path.of("..", "docs", "retention.md"))) {
            int start = line.indexOf("`UPDATE " + IdempotencySchema.DEFAULT_TABLE_NAME + " SET expires_at");
            if (start >= 0) {
                update = line.substring(start + 1, line.indexOf('`', start + 1));
            }
        }
        assertThat(update).as("the statement retention.md gives").contains("interval '1440 hours'");
        StoredResponse answer = new StoredResponse(201, List.of(), "paid".getBytes(StandardCharsets.UTF_8));
        ScopedKey extended = newKey();
        ScopedKey left = newKey();
        for (ScopedKey key : List.of(extended, left)) { // claimed under a TTL that has run out
            inTransaction(store -> store.complete(key, ((ClaimResult.Claimed) store.claim(new ClaimRequest(key,
                    "e".repeat(64), Duration.ofMillis(1), Duration.ofSeconds(5)))).fencingToken(), answer));
        }
        Thread.sleep(20);

        // the docs' statement, narrowed to this test's record (the table holds the other tests' records too)
        assertThat(new JdbcTemplate(dataSource()).update(update + " AND idempotency_key = ?", extended.key()))
                .isEqualTo(1);
        while (inTransaction(store -> store.deleteExpired(1000)) > 0) {
            // every expired record gone
        }

        assertThat(store().find(left)).as("a record not extended is removed").isEmpty();
        IdempotencyRecord record = store().find(extended).orElseThrow();
        assertThat(new JdbcTemplate(dataSource()).queryForObject("SELECT expires_at = created_at + interval '1440 hours'"
                + " FROM " + IdempotencySchema.DEFAULT_TABLE_NAME + " WHERE idempotency_key = ?", Boolean.class,
                extended.key())).as("extended to 60 days after its claim").isTrue();
        ClaimResult again = inTransaction(store -> store.claim(new ClaimRequest(extended, "e".repeat(64),
                Duration.ofMillis(1), Duration.ofSeconds(5))));
        assertThat(again).isInstanceOf(ClaimResult.Existing.class);
        assertThat(((ClaimResult.Existing) again).record().response()).isEqualTo(answer);
        assertThat(store().find(extended).orElseThrow().expiresAt()).as("a replay under a shorter TTL")
                .isEqualTo(record.expiresAt());
    }

    /**
     * A retention or lease beyond what PostgreSQL can add to the current time (given in code, where no startup check
     * sees it) is cut to 100,000 years — in a claim, a takeover of a stale claim and a renewal — rather than failing
     * the statement with "timestamp out of range", or before it with an arithmetic overflow.
     */
    @Test
    void aRetentionOrLeaseBeyondWhatTheTableCanHoldIsCutToAHundredThousandYears() throws Exception {
        for (Duration beyond : List.of(Duration.ofDays(200_000_000L), Duration.ofSeconds(Long.MAX_VALUE))) {
            ScopedKey key = newKey();
            ClaimResult claimed = new TransactionTemplate(new DataSourceTransactionManager(dataSource())).execute(
                    status -> store().claim(new ClaimRequest(key, "d".repeat(64), beyond, Duration.ofSeconds(5),
                            Duration.ofMillis(1))));
            assertThat(claimed).as("claimed with a retention of %s", beyond).isInstanceOf(ClaimResult.Claimed.class);
            assertThat(yearOf("expires_at", key)).isBetween(100_000, 110_000);
            Thread.sleep(20); // the lease of a millisecond has run out
            String token = store().takeOver(key, ((ClaimResult.Claimed) claimed).fencingToken(), beyond)
                    .orElseThrow();
            assertThat(yearOf("locked_until", key)).as("taken over with a lease of %s", beyond)
                    .isBetween(100_000, 110_000);
            assertThat(store().renew(key, token, beyond)).isTrue();
            assertThat(yearOf("locked_until", key)).isBetween(100_000, 110_000);
        }
    }

    private int yearOf(String column, ScopedKey key) {
        return new JdbcTemplate(dataSource()).queryForObject("SELECT extract(year FROM " + column + ")::int FROM "
                + IdempotencySchema.DEFAULT_TABLE_NAME + " WHERE caller = ? AND scope = ? AND idempotency_key = ?",
                Integer.class, key.caller(), key.scope(), key.key());
    }

    /** How long the claims of the test above are made after their transaction began. */
    private static final Duration LATE = Duration.ofMillis(1500);
    private static final Duration LEASE = Duration.ofSeconds(3);

    /** The database's clock, as text, read (on the current transaction's connection) just before a write. */
    private String databaseNow() {
        return new JdbcTemplate(dataSource()).queryForObject("SELECT clock_timestamp()::text", String.class);
    }

    /**
     * Checks that the record of {@code key} holds {@link #LEASE} and, unless null, {@code retention}, counted from no
     * earlier than {@code before} (the database's clock read just before the write): counted from its transaction's
     * start, they would end {@link #LATE} too early. A slow machine only adds to what is measured.
     */
    private void assertFullLeaseAndRetention(ScopedKey key, String what, String before, Duration retention) {
        Map<String, Object> held = new JdbcTemplate(dataSource()).queryForMap("SELECT"
                + " (extract(epoch FROM locked_until - ?::timestamptz) * 1000)::bigint AS lease,"
                + " (extract(epoch FROM expires_at - ?::timestamptz) * 1000)::bigint AS retention FROM "
                + IdempotencySchema.DEFAULT_TABLE_NAME + " WHERE caller = ? AND scope = ? AND idempotency_key = ?",
                before, before, key.caller(), key.scope(), key.key());
        assertThat(((Number) held.get("lease")).longValue()).as("milliseconds of the lease of %s", what)
                .isGreaterThan(LEASE.toMillis() - 500);
        if (retention != null) {
            assertThat(((Number) held.get("retention")).longValue())
                    .as("milliseconds of the retention of %s", what).isGreaterThan(retention.toMillis() - 500);
        }
    }

    /**
     * A new database with a pool large enough for the contract, transactions on the pool, and the store under test,
     * which {@code storeOn} makes on the pool.
     */
    record OwnDatabase(TestPostgres.Database postgres, HikariDataSource pool, Transactions transactions,
                       Function<DataSource, IdempotencyStore> storeOn, IdempotencyStore store) {

        /** A new database, whose schema {@code migration} makes before the store is made. */
        static OwnDatabase create(Consumer<DataSource> migration, Function<DataSource, IdempotencyStore> storeOn) {
            TestPostgres.Database postgres = TestPostgres.newDatabase();
            HikariDataSource pool = postgres.dataSource(MIN_POOL_SIZE + 4);
            Transactions transactions = new SpringTransactions(new DataSourceTransactionManager(pool));
            migration.accept(pool);
            return new OwnDatabase(postgres, pool, transactions, storeOn, storeOn.apply(pool));
        }
    }
}
