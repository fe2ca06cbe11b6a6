package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.ExpiredRecordCleaner;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StoredResponse;
import io.idempotency.core.Transactions;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.testkit.Async;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/** Batched cleanup of expired records: under load it never makes a claim wait, and parallel cleaners share the work. */
class ExpiredRecordCleanupIntegrationTest {

    private static final String HASH = "f".repeat(64);
    private static final int CLIENTS = 16;
    /**
     * A claim that waited longer than this for a lock answers Busy: the test counts those. It is the default
     * {@code idempotency.in-flight-wait}, past which a client would be answered 409. New claims do wait for each other
     * briefly, on the lock that extends the table by a page (pg_locks shows {@code extend} and nothing else waiting
     * here), and on a loaded two-core machine PostgreSQL 14 has been seen to hold it for more than 200 ms. The bound
     * covers the locks a claim waits for as it runs (rows, transactions, that extension lock), not the table's own
     * lock, which a statement takes before its {@code lock_timeout} is set (docs/how-it-works.md).
     */
    private static final Duration LOCK_WAIT_BOUND = Duration.ofSeconds(2);

    /**
     * Tagged {@code load}: the longest test of the module, run on the configured server only; the cleanup's statements
     * run on every PostgreSQL version the build runs in the two tests below.
     */
    @Test
    @Tag("load")
    void aMillionExpiredRowsAreCleanedWhileSixteenClientsClaimWithoutWaiting() throws Exception {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(CLIENTS + 4)) {
            JdbcTemplate jdbc = prepare(dataSource, 1_000_000);
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            Transactions transactions = new SpringTransactions(new DataSourceTransactionManager(dataSource));

            Load without = claimUnderLoad(store, transactions, () -> false, Duration.ofSeconds(3));
            AtomicBoolean cleaning = new AtomicBoolean(true);
            CompletableFuture<ExpiredRecordCleaner.Run> cleanup = Async.supply(() -> {
                try {
                    return new ExpiredRecordCleaner(store, 5_000).run();
                } finally {
                    cleaning.set(false);
                }
            });
            Load during = claimUnderLoad(store, transactions, cleaning::get, Duration.ofMinutes(5));
            ExpiredRecordCleaner.Run run = cleanup.get(5, TimeUnit.MINUTES);

            System.out.printf("[cleanup] %d expired rows removed in %d ms (%d batches of at most 5000)%n",
                    run.deleted(), run.took().toMillis(), run.batches());
            System.out.printf("[cleanup] claim latency with %d clients: without cleanup p50 %.1f ms, p99 %.1f ms"
                            + " (%d claims); during cleanup p50 %.1f ms, p99 %.1f ms (%d claims); busy: %d%n",
                    CLIENTS, without.percentile(50), without.percentile(99), without.claims(),
                    during.percentile(50), during.percentile(99), during.claims(), without.busy() + during.busy());

            assertThat(run.deleted()).isEqualTo(1_000_000);
            assertThat(during.claims()).as("claims went on during the cleanup").isPositive();
            assertThat(without.busy() + during.busy()).as("claims that waited on a lock").isZero();
            assertThat(jdbc.queryForObject("select count(*) from idempotency_keys where expires_at < now()", Long.class))
                    .isZero();
            assertThat(jdbc.queryForObject("select count(*) from idempotency_keys", Long.class))
                    .as("every new claim survived").isEqualTo(without.claims() + during.claims());
        }
    }

    @Test
    void twoCleanersInParallelRemoveEveryExpiredRowOnce() throws Exception {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(6)) {
            JdbcTemplate jdbc = prepare(dataSource, 200_000);
            jdbc.update("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash,"
                    + " fencing_token, response_status, expires_at) values ('', 'POST /live', 'live', 'SUCCEEDED', ?,"
                    + " gen_random_uuid(), 200, now() + interval '1 day')", HASH);
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            ExecutorService executor = Executors.newFixedThreadPool(2);
            try {
                Future<ExpiredRecordCleaner.Run> first = executor.submit(() -> new ExpiredRecordCleaner(store, 1_000).run());
                Future<ExpiredRecordCleaner.Run> second = executor.submit(() -> new ExpiredRecordCleaner(store, 1_000).run());
                ExpiredRecordCleaner.Run a = first.get(5, TimeUnit.MINUTES);
                ExpiredRecordCleaner.Run b = second.get(5, TimeUnit.MINUTES);

                System.out.printf("[cleanup] two cleaners in parallel removed %d and %d rows%n", a.deleted(), b.deleted());
                assertThat(a.deleted() + b.deleted()).as("each expired row removed exactly once").isEqualTo(200_000);
                assertThat(a.deleted()).as("both did part of the work").isPositive();
                assertThat(b.deleted()).isPositive();
                assertThat(jdbc.queryForObject("select count(*) from idempotency_keys", Long.class))
                        .as("only the live record is left").isEqualTo(1);
            } finally {
                executor.shutdownNow();
            }
        }
    }

    /**
     * A pool whose connections default to REPEATABLE READ (a setting payment applications choose, and that the claim
     * copes with by asking for READ COMMITTED): there a batch's snapshot predates the rows another cleaner deletes
     * meanwhile, and locking one of them would fail with "could not serialize access due to concurrent update" instead
     * of skipping it. The batches run at READ COMMITTED whatever the pool's default, so parallel cleaners still share
     * the work without failing.
     */
    @Test
    void twoCleanersInParallelShareTheWorkOnAPoolThatDefaultsToRepeatableRead() throws Exception {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(4,
                config -> config.setTransactionIsolation("TRANSACTION_REPEATABLE_READ"))) {
            JdbcTemplate jdbc = prepare(dataSource, 50_000);
            PostgresIdempotencyStore store = new PostgresIdempotencyStore(dataSource, "idempotency_keys");
            ExecutorService executor = Executors.newFixedThreadPool(2);
            try {
                Future<ExpiredRecordCleaner.Run> first = executor.submit(() -> new ExpiredRecordCleaner(store, 100).run());
                Future<ExpiredRecordCleaner.Run> second = executor.submit(() -> new ExpiredRecordCleaner(store, 100).run());
                ExpiredRecordCleaner.Run a = first.get(5, TimeUnit.MINUTES);
                ExpiredRecordCleaner.Run b = second.get(5, TimeUnit.MINUTES);

                assertThat(a.deleted() + b.deleted()).as("each expired row removed exactly once").isEqualTo(50_000);
                assertThat(jdbc.queryForObject("select count(*) from idempotency_keys", Long.class)).isZero();
                assertThat(jdbc.queryForObject("show transaction_isolation", String.class))
                        .as("the pool's own default is left as it was").isEqualTo("repeatable read");
            } finally {
                executor.shutdownNow();
            }
        }
    }

    private static JdbcTemplate prepare(HikariDataSource dataSource, int expiredRows) {
        new IdempotencySchemaMigrator(dataSource, "idempotency_keys").migrate();
        JdbcTemplate jdbc = new JdbcTemplate(dataSource);
        jdbc.update("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash, fencing_token,"
                + " response_status, response_headers, response_body, created_at, updated_at, expires_at)"
                + " select '', 'POST /old', 'old-' || g, 'SUCCEEDED', ?, gen_random_uuid(), 201,"
                + " 'Content-Type: application/json', convert_to('{\"id\":' || g || '}', 'UTF8'),"
                + " now() - interval '40 days', now() - interval '40 days', now() - interval '10 days'"
                + " from generate_series(1, ?) g", HASH, expiredRows);
        jdbc.execute("analyze idempotency_keys");
        return jdbc;
    }

    private record Load(List<Long> latenciesNanos, int claims, int busy) {
        double percentile(int p) {
            if (latenciesNanos.isEmpty()) {
                return 0;
            }
            List<Long> sorted = new ArrayList<>(latenciesNanos);
            Collections.sort(sorted);
            int index = (int) Math.ceil(p / 100.0 * sorted.size()) - 1;
            return sorted.get(Math.max(0, index)) / 1_000_000.0;
        }
    }

    /** 16 clients claim and complete new keys, each in its own transaction, while {@code going} holds (at least once). */
    private static Load claimUnderLoad(PostgresIdempotencyStore store, Transactions transactions,
                                       java.util.function.BooleanSupplier going, Duration longest) throws Exception {
        List<Long> latencies = Collections.synchronizedList(new ArrayList<>());
        AtomicInteger claims = new AtomicInteger();
        AtomicInteger busy = new AtomicInteger();
        long deadline = System.nanoTime() + longest.toNanos();
        long minimumEnd = System.nanoTime() + Duration.ofSeconds(3).toNanos();
        ExecutorService clients = Executors.newFixedThreadPool(CLIENTS);
        try {
            List<Future<?>> running = new ArrayList<>();
            for (int c = 0; c < CLIENTS; c++) {
                running.add(clients.submit(() -> {
                    while (System.nanoTime() < deadline && (going.getAsBoolean() || System.nanoTime() < minimumEnd)) {
                        ScopedKey key = new ScopedKey("", "POST /new", UUID.randomUUID().toString());
                        long started = System.nanoTime();
                        Transactions.Transaction transaction = transactions.begin();
                        try {
                            ClaimResult result = store.claim(new ClaimRequest(key, HASH, Duration.ofDays(1), LOCK_WAIT_BOUND));
                            if (result instanceof ClaimResult.Claimed claimed) {
                                store.complete(key, claimed.fencingToken(), new StoredResponse(201, List.of(), null));
                                transaction.commit();
                                claims.incrementAndGet();
                            } else {
                                busy.incrementAndGet();
                            }
                        } finally {
                            transaction.rollback();
                        }
                        latencies.add(System.nanoTime() - started);
                    }
                    return null;
                }));
            }
            for (Future<?> client : running) {
                client.get();
            }
        } finally {
            clients.shutdownNow();
        }
        return new Load(latencies, claims.get(), busy.get());
    }
}
