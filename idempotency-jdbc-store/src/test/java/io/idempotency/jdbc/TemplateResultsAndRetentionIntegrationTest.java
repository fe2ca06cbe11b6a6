package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.DownstreamKeys;
import io.idempotency.core.ExpiredRecordCleaner;
import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.IdempotencyRecord;
import io.idempotency.core.IdempotencyTemplate;
import io.idempotency.core.RecordStatus;
import io.idempotency.core.ReplayCache;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StoragePolicy;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.EnumSource;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The template on two instances of one PostgreSQL database, one keeping answers in memory and one not: every result
 * is read back by the other instance with the very bytes stored; a record is honoured until it is removed, expired or
 * not; the cleanup removes nothing of an execution still running past its expiry; and a redelivery under the key with
 * other input meanwhile is refused once the first execution committed, or runs once it rolled back.
 */
class TemplateResultsAndRetentionIntegrationTest {

    /** A TTL that has passed by the time the cleanup runs: every completed record is expired at once. */
    private static final Duration SHORT_TTL = Duration.ofMillis(1);
    private static final Duration LEASE = Duration.ofSeconds(2);
    /** The cap on stored results: above the large result, which the default cap would refuse. */
    private static final long CAP = 16 << 20;
    private static final byte[] MESSAGE = "{\"payment\":\"p-1\"}".getBytes(StandardCharsets.UTF_8);

    private HikariDataSource poolA;
    private HikariDataSource poolB;
    private JdbcTemplate jdbc;
    private PostgresIdempotencyStore store;
    /** An instance keeping answers in memory. */
    private IdempotencyEngine instanceA;
    /** An instance keeping nothing in memory: every answer comes from the database. */
    private IdempotencyEngine instanceB;
    private ExpiredRecordCleaner cleaner;

    @BeforeEach
    void twoInstances() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        poolA = database.dataSource(4);
        poolB = database.dataSource(4);
        new IdempotencySchemaMigrator(poolA, "idempotency_keys").migrate();
        jdbc = new JdbcTemplate(poolA);
        jdbc.execute("create table effects (id bigserial primary key, message text)");
        store = new PostgresIdempotencyStore(poolA, "idempotency_keys");
        instanceA = new IdempotencyEngine(store, new SpringTransactions(new DataSourceTransactionManager(poolA)),
                StoragePolicy.DEFAULT, SHORT_TTL, Duration.ofSeconds(2), StaleClaimResolver.RERUN,
                new DownstreamKeys("secret"),
                new ReplayCache(100, 64 * 1024, 1 << 20, Duration.ofMinutes(10), 1_000), CAP);
        instanceB = new IdempotencyEngine(new PostgresIdempotencyStore(poolB, "idempotency_keys"),
                new SpringTransactions(new DataSourceTransactionManager(poolB)), StoragePolicy.DEFAULT, SHORT_TTL,
                Duration.ofSeconds(2), StaleClaimResolver.RERUN, new DownstreamKeys("secret"), ReplayCache.NONE, CAP);
        cleaner = new ExpiredRecordCleaner(new PostgresIdempotencyStore(poolB, "idempotency_keys"), 100);
    }

    @AfterEach
    void stop() {
        instanceA.shutdown();
        instanceB.shutdown();
        poolA.close();
        poolB.close();
    }

    /**
     * Results holding every byte value (NUL, 0x80–0xFF, bytes that are no UTF-8), an empty one and one of 8 MiB (far
     * above what the memory of instance A keeps) come back from the other instance, and from the first one again,
     * with the very bytes the work returned, without the work running again.
     */
    @ParameterizedTest
    @EnumSource(IdempotencyMode.class)
    void everyResultIsReadBackWithTheBytesTheWorkReturnedOnEitherInstance(IdempotencyMode mode) throws Exception {
        byte[] everyByte = new byte[512];
        for (int i = 0; i < everyByte.length; i++) {
            everyByte[i] = (byte) (255 - i % 256);
        }
        byte[] large = new byte[8 << 20];
        new Random(42).nextBytes(large);
        for (byte[] returned : List.of(everyByte, new byte[0], large, new byte[] {0})) {
            ScopedKey key = newKey();
            AtomicInteger runs = new AtomicInteger();
            IdempotencyTemplate.Result first = new IdempotencyTemplate(instanceA).execute(key, MESSAGE, mode, LEASE,
                    () -> {
                        runs.incrementAndGet();
                        return returned.clone();
                    });
            IdempotencyTemplate.Result onB = new IdempotencyTemplate(instanceB).execute(key, MESSAGE, mode, LEASE,
                    () -> {
                        runs.incrementAndGet();
                        return new byte[] {1};
                    });
            IdempotencyTemplate.Result againOnA = new IdempotencyTemplate(instanceA).execute(key, MESSAGE, mode,
                    LEASE, () -> {
                        runs.incrementAndGet();
                        return new byte[] {1};
                    });

            assertThat(runs).as("ran once, for a result of %d bytes", returned.length).hasValue(1);
            assertThat(first.replayed()).isFalse();
            assertThat(first.value()).isEqualTo(returned);
            assertThat(onB.replayed()).isTrue();
            assertThat(onB.value()).as("read back by the other instance").isEqualTo(returned);
            assertThat(againOnA.replayed()).isTrue();
            assertThat(againOnA.value()).isEqualTo(returned);
            assertThat(store.find(key)).get().extracting(record -> record.response().body()).isEqualTo(returned);
        }
    }

    /**
     * A record that still exists is honoured, expired or not: the work runs past its record's expiry while a cleanup
     * runs (which removes nothing of it) and a redelivery on the other instance is told to come back later; once it
     * completed, the expired record is replayed by the instance that never saw it. Only once the cleanup removed it
     * does that instance run the message again — and the instance that kept the answer in memory replays it from
     * there, as documented, without failing.
     */
    @ParameterizedTest
    @EnumSource(IdempotencyMode.class)
    void anExecutionRunningPastItsExpiryIsNotRemovedAndItsExpiredRecordIsHonouredUntilRemoved(IdempotencyMode mode)
            throws Exception {
        ScopedKey key = newKey();
        AtomicInteger runs = new AtomicInteger();
        CountDownLatch working = new CountDownLatch(1);
        CountDownLatch finish = new CountDownLatch(1);
        CompletableFuture<IdempotencyTemplate.Result> first = CompletableFuture.supplyAsync(() -> {
            try {
                return new IdempotencyTemplate(instanceA).execute(key, MESSAGE, mode, LEASE, () -> {
                    int run = runs.incrementAndGet();
                    jdbc.update("insert into effects (message) values (?)", key.key());
                    working.countDown();
                    assertThat(finish.await(30, TimeUnit.SECONDS)).isTrue();
                    return ("booked by run " + run).getBytes(StandardCharsets.UTF_8);
                });
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
        assertThat(working.await(10, TimeUnit.SECONDS)).isTrue();
        Thread.sleep(20); // past the TTL: the claim is expired while its work runs
        assertThat(cleaner.run().deleted()).as("nothing of a running execution is removed").isZero();
        assertThatThrownBy(() -> new IdempotencyTemplate(instanceB).execute(key, MESSAGE, mode, LEASE,
                () -> {
                    runs.incrementAndGet();
                    return "ran twice".getBytes(StandardCharsets.UTF_8);
                })).isInstanceOf(IdempotencyTemplate.InProgressException.class);
        assertThat(cleaner.run().deleted()).isZero();
        finish.countDown();
        IdempotencyTemplate.Result completed = first.get(30, TimeUnit.SECONDS);
        assertThat(completed.replayed()).isFalse();

        IdempotencyTemplate.Result expiredButThere = new IdempotencyTemplate(instanceB).execute(key, MESSAGE, mode,
                LEASE, () -> {
                    runs.incrementAndGet();
                    return "ran twice".getBytes(StandardCharsets.UTF_8);
                });
        assertThat(expiredButThere.replayed()).as("an expired record not yet removed is replayed").isTrue();
        assertThat(expiredButThere.value()).asString(StandardCharsets.UTF_8).isEqualTo("booked by run 1");
        assertThat(runs).hasValue(1);
        assertThat(jdbc.queryForObject("select count(*) from effects", Integer.class)).isEqualTo(1);

        assertThat(cleaner.run().deleted()).isEqualTo(1);
        IdempotencyTemplate.Result fromMemory = new IdempotencyTemplate(instanceA).execute(key, MESSAGE, mode, LEASE,
                () -> {
                    runs.incrementAndGet();
                    return "ran again on A".getBytes(StandardCharsets.UTF_8);
                });
        assertThat(fromMemory.replayed()).isTrue();
        assertThat(fromMemory.value()).asString(StandardCharsets.UTF_8).isEqualTo("booked by run 1");
        IdempotencyTemplate.Result afterRemoval = new IdempotencyTemplate(instanceB).execute(key, MESSAGE, mode,
                LEASE, () -> {
                    runs.incrementAndGet();
                    return "ran again on B".getBytes(StandardCharsets.UTF_8);
                });
        assertThat(afterRemoval.replayed()).as("the key is free once its record is removed").isFalse();
        assertThat(runs).hasValue(2);
        assertThat(store.find(key)).get().extracting(IdempotencyRecord::status).isEqualTo(RecordStatus.SUCCEEDED);
    }

    /**
     * Another message under the key while the first one's work still runs, on the other instance or on the same one:
     * refused as a reuse of the key once the first one committed, and run once the first one rolled back (its work
     * threw after its write) in the default mode, which waits for the claim (in the database, or in memory behind the
     * same instance's run, alike); after intent-first work that threw, whose outcome is unknown, the key stays with the
     * first input and the other one stays refused. Never both run.
     */
    @ParameterizedTest(name = "{0}, same instance: {1}")
    @CsvSource({"ONE_TRANSACTION, false", "ONE_TRANSACTION, true", "INTENT_FIRST, false", "INTENT_FIRST, true"})
    void otherInputUnderTheKeyWhileTheFirstStillRunsIsRefusedIfItCommitsAndRunsIfItRollsBack(IdempotencyMode mode,
                                                                                            boolean sameInstance)
            throws Exception {
        IdempotencyEngine otherInstance = sameInstance ? instanceA : instanceB;
        for (boolean firstFails : List.of(false, true)) {
            ScopedKey key = newKey();
            CountDownLatch working = new CountDownLatch(1);
            CountDownLatch finish = new CountDownLatch(1);
            CompletableFuture<IdempotencyTemplate.Result> first = CompletableFuture.supplyAsync(() -> {
                try {
                    return new IdempotencyTemplate(instanceA).execute(key, MESSAGE, mode, LEASE, () -> {
                        jdbc.update("insert into effects (message) values (?)", "first " + key.key());
                        working.countDown();
                        assertThat(finish.await(30, TimeUnit.SECONDS)).isTrue();
                        if (firstFails) {
                            throw new IllegalStateException("the payment provider declined after the insert");
                        }
                        return "first".getBytes(StandardCharsets.UTF_8);
                    });
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });
            assertThat(working.await(10, TimeUnit.SECONDS)).isTrue();
            byte[] other = "{\"payment\":\"p-2\"}".getBytes(StandardCharsets.UTF_8);
            List<Throwable> refusals = new ArrayList<>();
            // the first one holds the key: another message is refused or told to come back later, never run
            try {
                new IdempotencyTemplate(otherInstance).execute(key, other, mode, LEASE,
                        () -> "second".getBytes(StandardCharsets.UTF_8));
                throw new AssertionError("other input ran while the first execution held the key");
            } catch (IdempotencyTemplate.InProgressException | IdempotencyTemplate.KeyReusedException e) {
                refusals.add(e);
            }
            CompletableFuture<IdempotencyTemplate.Result> second = CompletableFuture.supplyAsync(() -> {
                try {
                    return new IdempotencyTemplate(otherInstance).execute(key, other, mode, LEASE, () -> {
                        jdbc.update("insert into effects (message) values (?)", "second " + key.key());
                        return "second".getBytes(StandardCharsets.UTF_8);
                    });
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });
            Thread.sleep(200); // the second one waits for the key
            finish.countDown();
            if (firstFails) {
                assertThatThrownBy(() -> first.get(30, TimeUnit.SECONDS)).hasRootCauseMessage(
                        "the payment provider declined after the insert");
            } else {
                assertThat(first.get(30, TimeUnit.SECONDS).replayed()).isFalse();
            }
            IdempotencyTemplate.Result secondResult = null;
            Throwable secondFailure = null;
            try {
                secondResult = second.get(30, TimeUnit.SECONDS);
            } catch (java.util.concurrent.ExecutionException e) {
                secondFailure = e.getCause().getCause();
            }
            List<String> effects = jdbc.queryForList("select message from effects where message like ?",
                    String.class, "% " + key.key());
            if (firstFails && mode == IdempotencyMode.ONE_TRANSACTION) {
                assertThat(secondFailure).as("waited for the claim's rollback, then ran").isNull();
                assertThat(secondResult.replayed()).isFalse();
                assertThat(effects).as("the first one's write was rolled back").containsExactly("second " + key.key());
                assertThat(new IdempotencyTemplate(instanceA).execute(key, other, mode, LEASE, () -> new byte[] {1})
                        .value()).asString(StandardCharsets.UTF_8).isEqualTo("second");
            } else if (firstFails) {
                // the outcome of intent-first work that threw is unknown: its claim stays with its own input (for its
                // redelivery or the stale-claim resolver), and the other input stays refused
                assertThat(secondResult).isNull();
                assertThat(secondFailure).isInstanceOf(IdempotencyTemplate.KeyReusedException.class);
                assertThat(effects).as("the first one's write was rolled back").isEmpty();
                assertThat(store.find(key)).get().extracting(IdempotencyRecord::status)
                        .isEqualTo(RecordStatus.PROCESSING);
                assertThatThrownBy(() -> new IdempotencyTemplate(otherInstance).execute(key, other, mode, LEASE,
                        () -> new byte[] {1})).isInstanceOf(IdempotencyTemplate.KeyReusedException.class);
            } else {
                assertThat(secondResult).as("other input never runs after the first one committed").isNull();
                assertThat(secondFailure).isInstanceOfAny(IdempotencyTemplate.KeyReusedException.class,
                        IdempotencyTemplate.InProgressException.class);
                assertThat(effects).containsExactly("first " + key.key());
                assertThatThrownBy(() -> new IdempotencyTemplate(otherInstance).execute(key, other, mode, LEASE,
                        () -> new byte[] {1})).isInstanceOf(IdempotencyTemplate.KeyReusedException.class);
            }
            assertThat(refusals).hasSize(1);
        }
    }

    /**
     * Two different messages under one key, each delivered to eight consumers of two instances at once: exactly one
     * message runs, once; every delivery of it gets its result or is told to come back later, and every delivery of
     * the other one is refused as a reuse of the key or told to come back later — never given the first one's result.
     */
    @ParameterizedTest
    @EnumSource(IdempotencyMode.class)
    void twoMessagesUnderOneKeyOnSixteenConsumersOfTwoInstancesRunOneOfThemOnce(IdempotencyMode mode)
            throws Exception {
        ScopedKey key = newKey();
        List<byte[]> messages = List.of("{\"payment\":\"p-1\"}".getBytes(StandardCharsets.UTF_8),
                "{\"payment\":\"p-2\"}".getBytes(StandardCharsets.UTF_8));
        AtomicInteger[] runs = {new AtomicInteger(), new AtomicInteger()};
        java.util.concurrent.ExecutorService consumers = java.util.concurrent.Executors.newFixedThreadPool(16);
        java.util.concurrent.CyclicBarrier together = new java.util.concurrent.CyclicBarrier(16);
        List<java.util.concurrent.Future<IdempotencyTemplate.Result>> deliveries = new ArrayList<>();
        for (int consumer = 0; consumer < 16; consumer++) {
            int message = consumer % 2;
            IdempotencyTemplate template = new IdempotencyTemplate(consumer % 4 < 2 ? instanceA : instanceB);
            deliveries.add(consumers.submit(() -> {
                together.await();
                return template.execute(key, messages.get(message), mode, LEASE, () -> {
                    runs[message].incrementAndGet();
                    jdbc.update("insert into effects (message) values (?)", "p-" + (message + 1));
                    Thread.sleep(100); // long enough for the others to meet the claim
                    return ("booked p-" + (message + 1)).getBytes(StandardCharsets.UTF_8);
                });
            }));
        }
        List<String> answers = new ArrayList<>();
        for (int consumer = 0; consumer < 16; consumer++) {
            try {
                IdempotencyTemplate.Result result = deliveries.get(consumer).get(30, TimeUnit.SECONDS);
                answers.add((consumer % 2) + ":" + new String(result.value(), StandardCharsets.UTF_8));
            } catch (java.util.concurrent.ExecutionException e) {
                assertThat(e.getCause()).isInstanceOfAny(IdempotencyTemplate.InProgressException.class,
                        IdempotencyTemplate.KeyReusedException.class);
                answers.add((consumer % 2) + ":" + e.getCause().getClass().getSimpleName());
            }
        }
        consumers.shutdownNow();

        assertThat(runs[0].get() + runs[1].get()).as("one message ran, once: %s", answers).isEqualTo(1);
        int winner = runs[0].get() == 1 ? 0 : 1;
        assertThat(jdbc.queryForList("select message from effects", String.class))
                .containsExactly("p-" + (winner + 1));
        assertThat(answers).as("only the message that ran is given its result").allSatisfy(answer ->
                assertThat(answer).matches(winner + ":booked p-" + (winner + 1) + "|\\d:InProgressException|"
                        + (1 - winner) + ":KeyReusedException"));
    }

    /**
     * A definitely failed execution's record, expired, is being removed by a cleanup batch (which holds its row) as its
     * redelivery takes it over: the redelivery waits for the batch, finds the key free, claims it afresh and runs
     * once — neither refused nor run against a record that is gone. Then a batch that meets the redelivery's own
     * record removes nothing of it while its work runs.
     */
    @ParameterizedTest
    @EnumSource(IdempotencyMode.class)
    void aRedeliveryTakingOverAFailedRecordTheCleanupIsRemovingClaimsTheKeyAfreshAndRunsOnce(IdempotencyMode mode)
            throws Exception {
        ScopedKey key = newKey();
        assertThatThrownBy(() -> new IdempotencyTemplate(instanceA).execute(key, MESSAGE, IdempotencyMode.INTENT_FIRST,
                LEASE, () -> {
                    throw new io.idempotency.core.DefiniteFailureException("the gateway declined");
                })).isInstanceOf(io.idempotency.core.DefiniteFailureException.class);
        assertThat(store.find(key)).get().extracting(IdempotencyRecord::status).isEqualTo(RecordStatus.FAILED);
        Thread.sleep(20); // past the TTL
        AtomicInteger runs = new AtomicInteger();
        CountDownLatch working = new CountDownLatch(1);
        CountDownLatch finish = new CountDownLatch(1);
        CompletableFuture<IdempotencyTemplate.Result> redelivery;
        try (java.sql.Connection cleanup = poolB.getConnection()) {
            cleanup.setAutoCommit(false);
            // as the cleanup's batch does: the expired, unlocked rows are selected for update, then deleted
            try (java.sql.PreparedStatement select = cleanup.prepareStatement("select 1 from idempotency_keys"
                    + " where expires_at < statement_timestamp() and status <> 'PROCESSING' and idempotency_key = ?"
                    + " for update skip locked")) {
                select.setString(1, key.key());
                assertThat(select.executeQuery().next()).isTrue();
            }
            redelivery = CompletableFuture.supplyAsync(() -> {
                try {
                    return new IdempotencyTemplate(instanceB).execute(key, MESSAGE, mode, LEASE, () -> {
                        runs.incrementAndGet();
                        jdbc.update("insert into effects (message) values (?)", key.key());
                        working.countDown();
                        assertThat(finish.await(30, TimeUnit.SECONDS)).isTrue();
                        return "booked".getBytes(StandardCharsets.UTF_8);
                    });
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });
            Thread.sleep(300); // the redelivery meets the row the batch holds
            assertThat(runs).as("the redelivery waits for the batch").hasValue(0);
            try (java.sql.PreparedStatement delete = cleanup.prepareStatement(
                    "delete from idempotency_keys where idempotency_key = ?")) {
                delete.setString(1, key.key());
                assertThat(delete.executeUpdate()).isEqualTo(1);
            }
            cleanup.commit();
        }
        assertThat(working.await(10, TimeUnit.SECONDS)).as("the redelivery runs once the batch committed").isTrue();
        Thread.sleep(20); // past the TTL of the redelivery's own claim
        assertThat(cleaner.run().deleted()).as("nothing of the running redelivery is removed").isZero();
        finish.countDown();
        IdempotencyTemplate.Result booked = redelivery.get(30, TimeUnit.SECONDS);
        assertThat(booked.replayed()).isFalse();
        assertThat(runs).hasValue(1);
        assertThat(jdbc.queryForList("select message from effects where message = ?", String.class, key.key()))
                .hasSize(1);
        assertThat(store.find(key)).get().extracting(IdempotencyRecord::status).isEqualTo(RecordStatus.SUCCEEDED);
    }

    /**
     * A lease longer than PostgreSQL can add to the current time (a slip of the keyboard in a listener's code, which no
     * startup check sees) is cut to what the table can hold, as on MariaDB, rather than failing every delivery of the
     * message with the database's "timestamp out of range" or a bare arithmetic overflow: the work runs once, a
     * stale claim is taken over with it, and the redelivery is a replay.
     */
    @org.junit.jupiter.api.Test
    void aLeaseBeyondWhatTheTableCanHoldIsCutNotFailed() throws Exception {
        for (Duration lease : List.of(Duration.ofDays(200_000_000L), Duration.ofSeconds(Long.MAX_VALUE))) {
            ScopedKey key = newKey();
            AtomicInteger runs = new AtomicInteger();
            IdempotencyTemplate.Result first = new IdempotencyTemplate(instanceB).execute(key, MESSAGE,
                    IdempotencyMode.INTENT_FIRST, lease, () -> {
                        runs.incrementAndGet();
                        return "booked".getBytes(StandardCharsets.UTF_8);
                    });
            IdempotencyTemplate.Result again = new IdempotencyTemplate(instanceB).execute(key, MESSAGE,
                    IdempotencyMode.INTENT_FIRST, lease, () -> {
                        runs.incrementAndGet();
                        return "booked again".getBytes(StandardCharsets.UTF_8);
                    });
            assertThat(first.replayed()).as("lease %s", lease).isFalse();
            assertThat(again.replayed()).isTrue();
            assertThat(runs).hasValue(1);

            // a consumer that crashed left its claim, whose lease has run out: the redelivery takes it over
            ScopedKey stale = newKey();
            assertThatThrownBy(() -> new IdempotencyTemplate(instanceA).execute(stale, MESSAGE,
                    IdempotencyMode.INTENT_FIRST, Duration.ofMillis(1), () -> {
                        throw new IllegalStateException("the consumer crashed");
                    })).hasMessage("the consumer crashed");
            Thread.sleep(20);
            IdempotencyTemplate.Result takenOver = new IdempotencyTemplate(instanceB).execute(stale, MESSAGE,
                    IdempotencyMode.INTENT_FIRST, lease, () -> "rerun".getBytes(StandardCharsets.UTF_8));
            assertThat(takenOver.replayed()).isFalse();
            assertThat(takenOver.value()).asString(StandardCharsets.UTF_8).isEqualTo("rerun");
        }
    }

    private static ScopedKey newKey() {
        return new ScopedKey("", "payment-events", UUID.randomUUID().toString());
    }
}
