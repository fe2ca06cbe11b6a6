package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.Transactions;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.Async;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;

import java.sql.Timestamp;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Two instances keep the partitions of one table with different partition intervals, as while a change of
 * {@code partition-interval} reaches one instance after the other: first the instance with the earlier interval alone,
 * then both (one after the other, in either order, or at once from two threads), then the one with the new interval
 * alone. The database's clock is moved on between their runs (functions {@code now()}, {@code statement_timestamp()}
 * and {@code clock_timestamp()} that shadow PostgreSQL's in the connection's search path, adding an offset kept in a
 * table), by at most half the shorter of the two kept-ahead spans, as runs at least every cleanup interval allow, so
 * that one test sees weeks of runs.
 *
 * <p>After every step: no run failed (no partition refused as overlapping another); the partitions from the one that
 * holds the current time on are contiguous, and reach at least the shorter kept-ahead span beyond it, and a claim at
 * the current time and at a moment within that span finds a partition; every bound is a multiple of one of the two
 * intervals since the epoch and no partition is longer than the longer interval (so their number is bounded by the two
 * grids: no fragmentation that creeps run after run); no partition is kept much longer than the longest retention
 * after its end; and every record claimed so far is still there until its own expiry.
 */
@Tag("slow") // weeks of maintenance runs: once, on the main PostgreSQL, not again on every version
class InstancesWithDifferentPartitionIntervalsIntegrationTest {

    private static final String TABLE = "idempotency_keys";
    private static final String HASH = "c".repeat(64);
    private static final int STEPS = 100;

    @ParameterizedTest(name = "{0} ahead {1}, ttl {2}; and {3} ahead {4}, ttl {5}")
    @CsvSource({
            "PT1H, 3, P1D, P1D, 7, P2D",
            "P7D, 2, P10D, P1D, 14, P3D",
            "PT2H, 4, P1D, PT3H, 3, P2D"})
    void twoIntervalsKeepingOneTableLeaveNoGapNoOverlapAndNoCreepingFragments(
            Duration firstInterval, int firstAhead, Duration firstTtl,
            Duration secondInterval, int secondAhead, Duration secondTtl) throws Exception {
        long seed = System.nanoTime();
        Random random = new Random(seed);
        TestPostgres.Database database = movableClockDatabase();
        try (HikariDataSource firstPool = database.dataSource(3); HikariDataSource secondPool = database.dataSource(3);
             HikariDataSource requests = database.dataSource(3)) {
            new IdempotencySchemaMigrator(firstPool, TABLE, true).migrate();
            List<Instance> instances = List.of(
                    new Instance(new PostgresPartitionMaintenance(firstPool, TABLE, firstInterval, firstAhead,
                            Duration.ofSeconds(5), Duration.ofSeconds(30)), firstTtl),
                    new Instance(new PostgresPartitionMaintenance(secondPool, TABLE, secondInterval, secondAhead,
                            Duration.ofSeconds(5), Duration.ofSeconds(30)), secondTtl));
            Duration shorterSpan = min(firstInterval.multipliedBy(firstAhead), secondInterval.multipliedBy(secondAhead));
            Duration longerInterval = firstInterval.compareTo(secondInterval) > 0 ? firstInterval : secondInterval;
            Duration longerTtl = firstTtl.compareTo(secondTtl) > 0 ? firstTtl : secondTtl;
            long[] grids = {firstInterval.getSeconds(), secondInterval.getSeconds()};
            long maxStep = shorterSpan.getSeconds() / 2;
            JdbcTemplate jdbc = new JdbcTemplate(requests);
            PartitionedPostgresIdempotencyStore store = new PartitionedPostgresIdempotencyStore(requests, TABLE);
            Transactions transactions = new SpringTransactions(new DataSourceTransactionManager(requests));
            Map<String, Instant> expiries = new HashMap<>();
            int mostPartitions = 0;
            int dropped = 0;

            instances.get(0).maintenance().createAhead(true); // the first instance starts alone
            for (int step = 0; step < STEPS; step++) {
                String at = "seed " + seed + ", step " + step;
                // the first quarter the first instance alone, the last quarter the second one alone, both between
                List<Instance> running = step < STEPS / 4 ? instances.subList(0, 1)
                        : step >= STEPS * 3 / 4 ? instances.subList(1, 2) : instances;
                moveClock(jdbc, 1 + (long) (random.nextDouble() * maxStep));
                dropped += runAll(running, random.nextInt(3), at);
                Instant now = databaseNow(jdbc);

                List<PostgresPartitionMaintenance.Partition> partitions = instances.get(0).maintenance().partitions();
                mostPartitions = Math.max(mostPartitions, partitions.size());
                assertThat(partitions).as(at).noneMatch(PostgresPartitionMaintenance.Partition::detachPending);
                int current = -1;
                for (int i = 0; i < partitions.size(); i++) {
                    PostgresPartitionMaintenance.Partition partition = partitions.get(i);
                    assertThat(onAGrid(partition.from(), grids) && onAGrid(partition.to(), grids))
                            .as("%s: %s lies on one of the intervals' bounds", at, partition).isTrue();
                    assertThat(Duration.between(partition.from(), partition.to()))
                            .as("%s: %s spans at most the longer interval", at, partition)
                            .isPositive().isLessThanOrEqualTo(longerInterval);
                    assertThat(partition.to()).as("%s: %s is dropped after the longest retention", at, partition)
                            .isAfterOrEqualTo(now.minus(longerTtl).minusSeconds(maxStep));
                    if (i > 0) {
                        assertThat(partition.from()).as("%s: %s overlaps no other", at, partition)
                                .isAfterOrEqualTo(partitions.get(i - 1).to());
                    }
                    if (current >= 0) {
                        assertThat(partition.from()).as("%s: no time without a partition before %s", at, partition)
                                .isEqualTo(partitions.get(i - 1).to());
                    } else if (!now.isBefore(partition.from()) && now.isBefore(partition.to())) {
                        current = i;
                    }
                }
                assertThat(current).as("%s: a partition holds the current time %s", at, now).isNotNegative();
                assertThat(partitions.get(partitions.size() - 1).to()).as("%s: kept ahead", at)
                        .isAfterOrEqualTo(now.plus(shorterSpan));

                // a claim now, under either instance's retention, and one at a moment within the span kept ahead
                Instance claimer = running.get(random.nextInt(running.size()));
                claim(store, transactions, jdbc, claimer.ttl(), expiries, at);
                long ahead = (long) (random.nextDouble() * shorterSpan.getSeconds());
                moveClock(jdbc, ahead);
                claim(store, transactions, jdbc, claimer.ttl(), expiries, at + ", " + ahead + " s ahead");
                moveClock(jdbc, -ahead);

                Set<String> present = new HashSet<>(jdbc.queryForList("select idempotency_key from " + TABLE,
                        String.class));
                Instant nowAgain = databaseNow(jdbc);
                for (Map.Entry<String, Instant> record : expiries.entrySet()) {
                    if (record.getValue().isAfter(nowAgain)) {
                        assertThat(present).as("%s: a record expiring at %s is kept", at, record.getValue())
                                .contains(record.getKey());
                    }
                }
            }

            assertThat(dropped).as("seed %d: expired partitions went", seed).isPositive();
            System.err.printf("[partition intervals] %s ahead %d and %s ahead %d: at most %d partitions, %d dropped,"
                            + " %d claims (seed %d)%n", firstInterval, firstAhead, secondInterval, secondAhead,
                    mostPartitions, dropped, expiries.size(), seed);
        }
    }

    private record Instance(PostgresPartitionMaintenance maintenance, Duration ttl) {
    }

    /**
     * A run of each instance, each with its own retention: one after the other in the order given ({@code order} 0),
     * in the other order (1), or at once from two threads (2). Returns how many partitions they dropped.
     */
    private static int runAll(List<Instance> instances, int order, String at) throws Exception {
        if (instances.size() == 1 || order < 2) {
            List<Instance> ordered = new ArrayList<>(instances);
            if (order == 1) {
                java.util.Collections.reverse(ordered);
            }
            int dropped = 0;
            for (Instance instance : ordered) {
                dropped += instance.maintenance().run(instance.ttl()).dropped().size();
            }
            return dropped;
        }
        CountDownLatch go = new CountDownLatch(1);
        List<CompletableFuture<Integer>> runs = instances.stream().map(instance -> Async.supply(() -> {
            try {
                go.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException(e);
            }
            return instance.maintenance().run(instance.ttl()).dropped().size();
        })).toList();
        go.countDown();
        int dropped = 0;
        for (CompletableFuture<Integer> run : runs) {
            dropped += run.get(60, TimeUnit.SECONDS);
        }
        return dropped;
    }

    private static void claim(PartitionedPostgresIdempotencyStore store, Transactions transactions, JdbcTemplate jdbc,
                              Duration ttl, Map<String, Instant> expiries, String at) {
        String key = UUID.randomUUID().toString();
        Transactions.Transaction transaction = transactions.begin();
        try {
            assertThat(store.claim(new ClaimRequest(new ScopedKey("", "POST /x", key), HASH, ttl,
                    Duration.ofSeconds(5)))).as("%s: a claim finds a partition", at)
                    .isInstanceOf(ClaimResult.Claimed.class);
            transaction.commit();
        } finally {
            transaction.rollback();
        }
        expiries.put(key, jdbc.queryForObject("select expires_at from " + TABLE + " where idempotency_key = ?",
                Timestamp.class, key).toInstant());
    }

    private static boolean onAGrid(Instant bound, long[] grids) {
        for (long grid : grids) {
            if (Math.floorMod(bound.getEpochSecond(), grid) == 0 && bound.getNano() == 0) {
                return true;
            }
        }
        return false;
    }

    private static Duration min(Duration a, Duration b) {
        return a.compareTo(b) < 0 ? a : b;
    }

    private static void moveClock(JdbcTemplate jdbc, long seconds) {
        jdbc.update("update test_clock set shift = shift + ? * interval '1 second'", seconds);
    }

    private static Instant databaseNow(JdbcTemplate jdbc) {
        return jdbc.queryForObject("select now()", Timestamp.class).toInstant();
    }

    /**
     * A database whose connections see {@code now()}, {@code statement_timestamp()} and {@code clock_timestamp()}
     * moved by the interval in the table {@code test_clock} (in the test's own schema, named before pg_catalog).
     */
    private static TestPostgres.Database movableClockDatabase() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        database.queryString("create table " + database.schema() + ".test_clock (shift interval not null)");
        database.queryString("insert into " + database.schema() + ".test_clock values (interval '0')");
        for (String clock : List.of("now() returns timestamptz language sql stable",
                "statement_timestamp() returns timestamptz language sql stable",
                "clock_timestamp() returns timestamptz language sql volatile")) {
            database.queryString("create function " + database.schema() + "." + clock + " as $$ select pg_catalog."
                    + clock.substring(0, clock.indexOf(')') + 1) + " + (select shift from " + database.schema()
                    + ".test_clock) $$");
        }
        return new TestPostgres.Database(database.url() + ",pg_catalog", database.user(), database.password(),
                database.schema());
    }
}
