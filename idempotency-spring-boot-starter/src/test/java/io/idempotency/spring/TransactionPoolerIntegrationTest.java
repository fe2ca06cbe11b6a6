package io.idempotency.spring;

import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.Idempotent;
import io.idempotency.core.RecordStatus;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StoredResponse;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.web.server.context.WebServerApplicationContext;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Import;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.UUID;
import java.util.concurrent.Callable;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The starter behind PgBouncer in transaction pooling mode (see {@link PgBouncer}): two application instances, each
 * with more pooled connections than the pooler has server connections, so that the transactions of different
 * requests and of both instances run one after another on the same server connections. Claims, replays, refusals,
 * the bounded wait and the batched delete must work there, and nothing the library does may leave a setting, a lock
 * or a prepared statement on a server connection, where it would reach another client's transactions.
 */
@Tag("container")
class TransactionPoolerIntegrationTest {

    private static final int SERVER_CONNECTIONS = 3;
    private static final int CLIENT_CONNECTIONS = 6;

    private static TestPostgres.Database database;
    private static PgBouncer pgBouncer;
    private static final List<ConfigurableApplicationContext> instances = new ArrayList<>();
    private static final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();

    static volatile CountDownLatch gate = new CountDownLatch(0);
    static volatile CountDownLatch entered = new CountDownLatch(0);

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(PaymentsController.class)
    static class App {
    }

    @RestController
    static class PaymentsController {

        private final JdbcTemplate jdbc;

        PaymentsController(JdbcTemplate jdbc) {
            this.jdbc = jdbc;
        }

        @PostMapping("/pooled/payments")
        @Idempotent
        String pay(@RequestBody String note) throws InterruptedException {
            long id = jdbc.queryForObject("insert into orders (note) values (?) returning id", Long.class, note);
            entered.countDown();
            gate.await(10, TimeUnit.SECONDS);
            Thread.sleep(100); // long enough for duplicates to meet the claim in progress
            return "payment " + id + " for " + note;
        }
    }

    @BeforeAll
    static void start() {
        if (PgBouncer.skipReason().isPresent()) {
            return; // each test is reported skipped, saying why
        }
        database = TestDatabases.withOrders();
        pgBouncer = PgBouncer.start(database, SERVER_CONNECTIONS);
        instances.add(instance());
        instances.add(instance());
    }

    @BeforeEach
    void notLeftOut() {
        Assumptions.assumeTrue(PgBouncer.skipReason().isEmpty(), () -> PgBouncer.skipReason().orElse(""));
    }

    private static ConfigurableApplicationContext instance(String... properties) {
        return instance(pgBouncer, properties);
    }

    private static ConfigurableApplicationContext instance(PgBouncer through, String... properties) {
        SpringApplicationBuilder application = new SpringApplicationBuilder(App.class)
                .web(WebApplicationType.SERVLET)
                .properties("server.port=0", "idempotency.in-flight-wait=3s",
                        "idempotency.retention.cleanup.enabled=false");
        through.springPropertyValues(CLIENT_CONNECTIONS).forEach(application::properties);
        application.properties(properties);
        return application.run();
    }

    @AfterAll
    static void stop() {
        instances.forEach(ConfigurableApplicationContext::close);
        if (pgBouncer != null) {
            pgBouncer.close();
        }
    }

    @Test
    void duplicatesSentToBothInstancesAtOnceRunOnceAndAllGetItsAnswer() throws Exception {
        String key = UUID.randomUUID().toString();
        List<Callable<HttpResponse<String>>> calls = new ArrayList<>();
        for (int i = 0; i < 12; i++) {
            int port = port(instances.get(i % 2));
            calls.add(() -> post(port, key, key));
        }

        List<HttpResponse<String>> responses = all(calls);

        assertThat(TestDatabases.rows(database, key)).as("executions").isEqualTo(1);
        String answer = responses.get(0).body();
        assertThat(responses).allSatisfy(response -> {
            assertThat(response.statusCode()).as(response.body()).isEqualTo(200);
            assertThat(response.body()).isEqualTo(answer);
        });
        assertThat(responses).filteredOn(r -> r.headers().firstValue("Idempotent-Replayed").isPresent()).hasSize(11);
        assertThat(post(port(instances.get(1)), key, "another payment").statusCode())
                .as("another payload under the key").isEqualTo(422);
        assertNoSessionStateLeft();
    }

    @Test
    void manyKeysInterleavedOnFewServerConnectionsEachRunOnce() throws Exception {
        String prefix = UUID.randomUUID().toString().substring(0, 8);
        List<Callable<HttpResponse<String>>> calls = new ArrayList<>();
        for (int i = 0; i < 24; i++) {
            String note = prefix + "-" + (i / 2); // each key sent twice, to either instance
            int port = port(instances.get(i % 2));
            calls.add(() -> post(port, note, note));
        }

        List<HttpResponse<String>> responses = all(calls);

        assertThat(responses).allSatisfy(r -> assertThat(r.statusCode()).as(r.body()).isEqualTo(200));
        assertThat(database.queryLong("select count(*) from orders where note like '" + prefix + "-%'")).isEqualTo(12);
        assertThat(database.queryLong("select count(distinct note) from orders where note like '" + prefix + "-%'"))
                .isEqualTo(12);
        assertNoSessionStateLeft();
    }

    @Test
    void aDuplicateOfAClaimHeldTooLongIsBusyAfterTheBoundedWaitAndTheWaitLeavesNoSetting() throws Exception {
        String key = UUID.randomUUID().toString();
        gate = new CountDownLatch(1);
        ExecutorService executor = Executors.newSingleThreadExecutor();
        try {
            entered = new CountDownLatch(1);
            executor.submit(() -> post(port(instances.get(0)), key, key));
            assertThat(entered.await(10, TimeUnit.SECONDS)).as("the first request's handler runs").isTrue();
            long started = System.nanoTime();
            HttpResponse<String> duplicate = post(port(instances.get(1)), key, key);
            long waited = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);

            assertThat(duplicate.statusCode()).as(duplicate.body()).isEqualTo(409);
            assertThat(waited).as("the bounded wait, in ms").isBetween(2_500L, 8_000L);
        } finally {
            gate.countDown();
            executor.shutdown();
            assertThat(executor.awaitTermination(15, TimeUnit.SECONDS)).isTrue();
        }
        assertThat(post(port(instances.get(1)), key, key).headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertNoSessionStateLeft();
    }

    @Test
    void theBatchedDeleteRemovesExpiredRecordsThroughThePooler() throws Exception {
        String prefix = UUID.randomUUID().toString().substring(0, 8);
        database.queryString("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash,"
                + " fencing_token, created_at, updated_at, expires_at, locked_until)"
                + " select 'c', 's', '" + prefix + "-' || i, case when i % 10 = 0 then 'PROCESSING' else 'FAILED' end,"
                + " 'h', gen_random_uuid(), now() - interval '2 days', now() - interval '2 days',"
                + " now() - interval '1 day', case when i % 10 = 0 then now() - interval '1 day' end"
                + " from generate_series(1, 100) i");
        IdempotencyStore store = instances.get(0).getBean(IdempotencyStore.class);
        IdempotencyStore other = instances.get(1).getBean(IdempotencyStore.class);

        int removed = 0;
        for (int batch = 0; batch < 20; batch++) {
            removed += store.deleteExpired(7) + other.deleteExpired(7);
        }

        assertThat(removed).isEqualTo(90);
        assertThat(database.queryLong("select count(*) from idempotency_keys where idempotency_key like '"
                + prefix + "-%'")).as("the PROCESSING records, kept").isEqualTo(10);
        assertNoSessionStateLeft();
    }

    /**
     * The lease of an intent-first claim through the pooler: claimed by one instance outside any transaction, its
     * holder stalled past the lease, taken over by the other instance, whose lease the former holder can then neither
     * renew nor complete, and which two instances taking over at once win once. These are the writes the store
     * commits in transactions of its own.
     */
    @Test
    void aStaleClaimIsTakenOverOnceAndItsFormerHolderFindsItLost() throws Exception {
        IdempotencyStore first = instances.get(0).getBean(IdempotencyStore.class);
        IdempotencyStore second = instances.get(1).getBean(IdempotencyStore.class);
        ScopedKey key = new ScopedKey("pooled", "POST /leases", UUID.randomUUID().toString());
        ClaimResult claimed = first.claim(new ClaimRequest(key, "a".repeat(64), Duration.ofDays(1),
                Duration.ofSeconds(2), Duration.ofMinutes(5)));
        assertThat(claimed).isInstanceOf(ClaimResult.Claimed.class);
        String stalled = ((ClaimResult.Claimed) claimed).fencingToken();
        assertThat(first.renew(key, stalled, Duration.ofMinutes(5))).isTrue();
        database.queryString("update idempotency_keys set locked_until = now() - interval '1 second'"
                + " where idempotency_key = '" + key.key() + "'");

        List<Optional<String>> takeovers = all(List.<Callable<Optional<String>>>of(
                () -> first.takeOver(key, stalled, Duration.ofMinutes(5)),
                () -> second.takeOver(key, stalled, Duration.ofMinutes(5))));

        assertThat(takeovers).filteredOn(Optional::isPresent).as("takeovers that won").hasSize(1);
        String taken = takeovers.stream().flatMap(Optional::stream).findFirst().orElseThrow();
        assertThat(first.renew(key, stalled, Duration.ofMinutes(5))).as("the former holder's renewal").isFalse();
        assertThat(first.complete(key, stalled, new StoredResponse(201, List.of(), "late".getBytes())))
                .as("the former holder's completion").isFalse();
        assertThat(second.renew(key, taken, Duration.ofMinutes(5))).isTrue();
        assertThat(second.complete(key, taken, new StoredResponse(201, List.of(), "done".getBytes()))).isTrue();
        assertThat(first.find(key).orElseThrow().status()).isEqualTo(RecordStatus.SUCCEEDED);
        assertNoSessionStateLeft();
    }

    /**
     * A partitioned table whose partitions a tool of the operator's manages ({@code create-partitions=false},
     * {@code cleanup.enabled=false}): the partition maintenance, whose session locks and settings need a session
     * pooler, does not run, and the startup's check that a partition covers the current time and the claims, each
     * under a transaction-scoped advisory lock of its key, work through the transaction pooler.
     */
    @Test
    void partitionsManagedElsewhereWorkThroughThePooler() throws Exception {
        TestPostgres.Database partitioned = TestDatabases.withOrders();
        try (var schema = getClass().getResourceAsStream("/io/idempotency/jdbc/postgresql/partitioned-schema.sql")) {
            partitioned.queryString(new String(schema.readAllBytes(), java.nio.charset.StandardCharsets.UTF_8));
        }
        partitioned.queryString("create table idempotency_keys_default partition of idempotency_keys default");
        try (PgBouncer through = PgBouncer.start(partitioned, SERVER_CONNECTIONS)) {
            ConfigurableApplicationContext one = instance(through, "idempotency.retention.cleanup.mode=drop-partitions",
                    "idempotency.retention.cleanup.create-partitions=false");
            ConfigurableApplicationContext two = instance(through, "idempotency.retention.cleanup.mode=drop-partitions",
                    "idempotency.retention.cleanup.create-partitions=false");
            try {
                String prefix = UUID.randomUUID().toString().substring(0, 8);
                List<Callable<HttpResponse<String>>> calls = new ArrayList<>();
                for (int i = 0; i < 16; i++) {
                    String note = prefix + "-" + (i / 4); // each key four times, to both instances
                    int port = port(i % 2 == 0 ? one : two);
                    calls.add(() -> post(port, note, note));
                }
                List<HttpResponse<String>> responses = all(calls);
                assertThat(responses).allSatisfy(r -> assertThat(r.statusCode()).as(r.body()).isEqualTo(200));
                assertThat(partitioned.queryLong("select count(*) from orders where note like '" + prefix + "-%'"))
                        .as("executions").isEqualTo(4);
                assertThat(partitioned.queryLong("select count(*) from idempotency_keys")).isEqualTo(4);
                assertThat(post(port(two), prefix + "-0", "another payment").statusCode()).isEqualTo(422);
            } finally {
                one.close();
                two.close();
            }
            assertThat(partitioned.queryLong("select count(*) from pg_inherits"
                    + " where inhparent = 'idempotency_keys'::regclass")).as("partitions, the default one alone")
                    .isEqualTo(1);
            assertNoSessionStateLeft(through, "read committed");
        }
    }

    /**
     * A database whose transactions default to SERIALIZABLE ({@code ALTER DATABASE … SET default_transaction_isolation},
     * here given by the pooler to each server connection). The executions and the store's own transactions must run
     * at READ COMMITTED, and must ask for it in the transaction itself: PostgreSQL's driver makes an isolation level
     * set through JDBC a session setting ({@code SET SESSION CHARACTERISTICS}), which the pooler runs on whatever
     * server connection is free, not necessarily the one the transaction then gets, and which stays there for the
     * transactions of every other client.
     */
    @Test
    void onADatabaseDefaultingToSerializableRequestsRunAndTheDefaultStays() throws Exception {
        try (PgBouncer serializable = PgBouncer.start(database, SERVER_CONNECTIONS,
                "default_transaction_isolation TO serializable")) {
            ConfigurableApplicationContext instance = instance(serializable);
            try {
                String prefix = UUID.randomUUID().toString().substring(0, 8);
                List<Callable<HttpResponse<String>>> calls = new ArrayList<>();
                for (int i = 0; i < 16; i++) {
                    String note = prefix + "-" + (i / 2); // each key twice: a claim and a replay or a wait
                    int port = port(instance);
                    calls.add(() -> post(port, note, note));
                }
                List<HttpResponse<String>> responses = all(calls);
                assertThat(responses).allSatisfy(r -> assertThat(r.statusCode()).as(r.body()).isEqualTo(200));
                assertThat(database.queryLong("select count(*) from orders where note like '" + prefix + "-%'"))
                        .isEqualTo(8);
                assertThat(instance.getBean(IdempotencyStore.class).deleteExpired(10)).isZero();
            } finally {
                instance.close();
            }
            assertNoSessionStateLeft(serializable, "serializable");
        }
    }

    /**
     * Pins every server connection of the pool with a transaction of its own and reads what a new transaction finds
     * there: the server's defaults, no advisory lock held by it, no prepared statement.
     */
    static void assertNoSessionStateLeft() throws Exception {
        assertNoSessionStateLeft(pgBouncer, "read committed");
    }

    /** As {@link #assertNoSessionStateLeft()}, through {@code through}, whose server connections default to {@code isolation}. */
    static void assertNoSessionStateLeft(PgBouncer through, String isolation) throws Exception {
        List<Connection> connections = new ArrayList<>();
        try {
            List<String> seen = new ArrayList<>();
            for (int i = 0; i < through.serverConnections(); i++) {
                Connection connection = DriverManager.getConnection(through.jdbcUrl(), through.database().user(),
                        through.database().password());
                connections.add(connection);
                connection.setAutoCommit(false);
                try (Statement statement = connection.createStatement();
                     ResultSet rs = statement.executeQuery("select pg_backend_pid(),"
                             + " current_setting('transaction_isolation'), current_setting('lock_timeout'),"
                             + " current_setting('statement_timeout'), current_setting('idle_in_transaction_session_timeout'),"
                             + " (select count(*) from pg_locks where pid = pg_backend_pid() and locktype = 'advisory'),"
                             + " (select count(*) from pg_prepared_statements),"
                             + " current_setting('default_transaction_read_only'), current_setting('search_path')")) {
                    rs.next();
                    seen.add(rs.getString(2) + ", lock_timeout " + rs.getString(3) + ", statement_timeout "
                            + rs.getString(4) + ", idle timeout " + rs.getString(5) + ", advisory locks "
                            + rs.getLong(6) + ", prepared " + rs.getLong(7) + ", read only " + rs.getString(8)
                            + ", search_path " + rs.getString(9));
                }
            }
            assertThat(seen).as("every server connection of the pooler").allSatisfy(state -> assertThat(state)
                    .isEqualTo(isolation + ", lock_timeout 0, statement_timeout 0, idle timeout 0, advisory locks 0,"
                            + " prepared 0, read only off, search_path " + through.database().schema()));
        } finally {
            for (Connection connection : connections) {
                connection.rollback();
                connection.close();
            }
        }
    }

    static int port(ConfigurableApplicationContext instance) {
        return ((WebServerApplicationContext) instance).getWebServer().getPort();
    }

    static HttpResponse<String> post(int port, String key, String body) throws Exception {
        return http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/pooled/payments"))
                .header("Content-Type", "text/plain").header("Idempotency-Key", key)
                .timeout(Duration.ofSeconds(30))
                .POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofString());
    }

    static <T> List<T> all(List<Callable<T>> calls) throws Exception {
        ExecutorService executor = Executors.newFixedThreadPool(calls.size());
        try {
            List<T> results = new ArrayList<>();
            for (Future<T> future : executor.invokeAll(calls, 60, TimeUnit.SECONDS)) {
                results.add(future.get());
            }
            return results;
        } finally {
            executor.shutdownNow();
        }
    }
}
