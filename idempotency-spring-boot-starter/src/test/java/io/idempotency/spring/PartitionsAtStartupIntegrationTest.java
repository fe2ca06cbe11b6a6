package io.idempotency.spring;

import io.idempotency.jdbc.PostgresPartitionMaintenance;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import io.idempotency.spring.app.TestApplication;
import io.idempotency.testkit.Await;
import io.idempotency.testkit.TestPostgres;
import com.zaxxer.hikari.HikariDataSource;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.boot.web.server.context.WebServerApplicationContext;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.SmartLifecycle;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.jdbc.core.JdbcTemplate;

import javax.sql.DataSource;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicLong;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

/**
 * Partitioned mode on a real server: the partitions a claim needs exist before anything takes requests, on every
 * instance (cleanup enabled or not), and a lock not had at startup does not stop an application whose current
 * partition exists.
 */
@ExtendWith(OutputCaptureExtension.class)
class PartitionsAtStartupIntegrationTest {

    private static final String ATTACHED = "select count(*) from pg_inherits i join pg_class c on c.oid = i.inhrelid"
            + " where i.inhparent = to_regclass('idempotency_keys')";
    private static final String MADE_AHEAD = ATTACHED + " and c.relname like 'idempotency_keys_p%'";

    private final HttpClient http = HttpClient.newHttpClient();

    @Test
    void onAFreshDatabaseThePartitionsExistBeforeAnythingStartsAndTheFirstRequestSucceeds() throws Exception {
        TestPostgres.Database database = TestDatabases.withOrders();
        FirstPhaseProbe.partitionsSeen.set(-1);

        try (ConfigurableApplicationContext context = start(database, FirstPhaseProbe.class,
                "idempotency.retention.cleanup.partition-interval=1h", "idempotency.retention.ttl=1d",
                "idempotency.retention.max-retry-window=1h", "idempotency.retention.cleanup.partitions-ahead=3")) {
            assertThat(FirstPhaseProbe.partitionsSeen.get())
                    .as("partitions when the earliest lifecycle phase starts, before the web server's")
                    .isEqualTo(4);
            assertThat(post(context).statusCode()).as("the first request after startup").isEqualTo(201);
        }
    }

    @Test
    void withCleanupDisabledTheInstanceStillCreatesPartitionsButDropsNone() throws Exception {
        TestPostgres.Database database = TestDatabases.withOrders();
        try (HikariDataSource dataSource = partitionedTable(database)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute("create table idempotency_keys_expired (like idempotency_keys including defaults"
                    + " including constraints)");
            jdbc.execute("do $$ begin execute format('alter table idempotency_keys attach partition"
                    + " idempotency_keys_expired for values from (%L) to (%L)', now() - interval '5 days',"
                    + " now() - interval '4 days'); end $$");
        }

        try (ConfigurableApplicationContext context = start(database, null,
                "idempotency.retention.cleanup.enabled=false", "idempotency.retention.cleanup.interval=100ms",
                "idempotency.retention.ttl=1d", "idempotency.retention.max-retry-window=1h",
                "idempotency.retention.cleanup.partition-interval=1h", "idempotency.retention.cleanup.partitions-ahead=2")) {
            assertThat(database.queryLong(MADE_AHEAD)).as("created at startup").isEqualTo(3);
            assertThat(post(context).statusCode()).isEqualTo(201);

            for (int round = 0; round < 2; round++) { // two rounds: the first run's drop step, had it one, is over
                String newest = database.queryString("select c.relname from pg_inherits i join pg_class c"
                        + " on c.oid = i.inhrelid where i.inhparent = to_regclass('idempotency_keys')"
                        + " and c.relname like 'idempotency_keys_p%' order by c.relname desc limit 1");
                database.queryString("drop table " + newest);
                Await.until("the scheduled run creates " + newest + " again", Duration.ofSeconds(20),
                        () -> database.queryLong(MADE_AHEAD) == 3);
            }
            assertThat(database.queryLong(ATTACHED + " and c.relname = 'idempotency_keys_expired'"))
                    .as("an expired partition is left to the instances whose cleanup is enabled").isEqualTo(1);
        }
    }

    @Test
    void aLockNotHadAtStartupIsLeftToTheNextRunWhenAPartitionCoversNow(CapturedOutput output) throws Exception {
        TestPostgres.Database database = TestDatabases.withOrders();
        try (HikariDataSource dataSource = partitionedTable(database)) {
            // the current hour and the next, waiting for any other maintenance of a table of this name in the database
            new PostgresPartitionMaintenance(dataSource, "idempotency_keys", Duration.ofHours(1), 1,
                    Duration.ofSeconds(5)).createAhead(true);
        }
        assertThat(database.queryLong(MADE_AHEAD)).isEqualTo(2);

        try (Connection other = holdLockOnTheTable(database);
             ConfigurableApplicationContext context = start(database, null,
                     "idempotency.retention.cleanup.interval=200ms",
                     "idempotency.retention.cleanup.partition-interval=1h",
                     "idempotency.retention.ttl=1d", "idempotency.retention.max-retry-window=1h",
                     "idempotency.retention.cleanup.partitions-ahead=3")) {
            assertThat(output).contains("Idempotency partitions could not all be created at startup");
            assertThat(post(context).statusCode()).as("the current partition takes claims").isEqualTo(201);

            other.rollback(); // the lock is gone: a scheduled run creates the missing partitions
            Await.until("the partitions ahead are created", Duration.ofSeconds(20),
                    () -> database.queryLong(MADE_AHEAD) == 4);
        }
    }

    @Test
    void withoutAPartitionForNowALockNotHadStopsTheStartAndSaysWhy() throws Exception {
        TestPostgres.Database database = TestDatabases.withOrders();
        partitionedTable(database).close();

        try (Connection other = holdLockOnTheTable(database)) {
            Throwable failure = catchThrowable(() -> start(database, null).close());
            assertThat(failure).hasStackTraceContaining("No partition of the idempotency table covers the current time")
                    .rootCause().hasMessageContaining("lock timeout");
            other.rollback();
        }
    }

    /**
     * Instances starting together: one creates the partitions while the others wait for it, at most the DDL lock
     * timeout. A {@code statement_timeout} on the pool's connections (a common bound on slow statements) shorter than
     * that must not turn the wait into a failed start: the instance starts as it does when the lock is not had in time,
     * since a partition covers the current time.
     */
    @Test
    void anInstanceWaitingForAnotherOnesCreationStartsDespiteAShorterStatementTimeout(CapturedOutput output)
            throws Exception {
        TestPostgres.Database database = TestDatabases.withOrders();
        try (HikariDataSource dataSource = partitionedTable(database)) {
            new PostgresPartitionMaintenance(dataSource, "idempotency_keys", Duration.ofHours(1), 1,
                    Duration.ofSeconds(5)).createAhead(true);
        }

        try (Connection otherInstance = DriverManager.getConnection(database.url(), database.user(),
                database.password()); Statement statement = otherInstance.createStatement()) {
            // another instance creating partitions right now, for longer than the statement timeout
            statement.execute("select pg_advisory_lock(hashtextextended('idempotency-partitions:'"
                    + " || 'idempotency_keys'::regclass::oid::text, 0))");
            try (ConfigurableApplicationContext context = start(database, null,
                    "spring.datasource.hikari.connection-init-sql=set statement_timeout = '500ms'",
                    "idempotency.retention.cleanup.partition-interval=1h",
                    "idempotency.retention.ttl=1d", "idempotency.retention.max-retry-window=1h",
                    "idempotency.retention.cleanup.partitions-ahead=3")) {
                assertThat(output).contains("Idempotency partitions could not all be created at startup");
                assertThat(post(context).statusCode()).as("the current partition takes claims").isEqualTo(201);
            }
        }
    }

    /** The earliest lifecycle phase, before the web server's: how many partitions it sees when it starts. */
    @Configuration(proxyBeanMethods = false)
    static class FirstPhaseProbe {

        static final AtomicLong partitionsSeen = new AtomicLong(-1);

        @Bean
        SmartLifecycle firstPhaseProbe(DataSource dataSource) {
            return new SmartLifecycle() {
                private volatile boolean running;

                @Override
                public void start() {
                    partitionsSeen.set(new JdbcTemplate(dataSource).queryForObject(ATTACHED, Long.class));
                    running = true;
                }

                @Override
                public void stop() {
                    running = false;
                }

                @Override
                public boolean isRunning() {
                    return running;
                }

                @Override
                public int getPhase() {
                    return Integer.MIN_VALUE;
                }
            };
        }
    }

    /** The test application, partitioned, on a real server at a random port. */
    private static ConfigurableApplicationContext start(TestPostgres.Database database, Class<?> extra,
                                                        String... properties) {
        List<String> args = new ArrayList<>();
        database.springPropertyValues().forEach(value -> args.add("--" + value));
        args.add("--server.port=0");
        args.add("--spring.main.banner-mode=off");
        args.add("--idempotency.retention.cleanup.mode=drop-partitions");
        for (String property : properties) {
            args.add("--" + property);
        }
        SpringApplicationBuilder builder = extra == null
                ? new SpringApplicationBuilder(TestApplication.class)
                : new SpringApplicationBuilder(TestApplication.class, extra);
        return builder.run(args.toArray(String[]::new));
    }

    /** The partitioned table, without partitions. */
    private static HikariDataSource partitionedTable(TestPostgres.Database database) {
        HikariDataSource dataSource = database.dataSource(2);
        new IdempotencySchemaMigrator(dataSource, "idempotency_keys", true).migrate();
        return dataSource;
    }

    /**
     * Another session holding the lock that attaching a partition needs (as a concurrent detach would), but not one
     * that claims wait for; released by rolling back.
     */
    private static Connection holdLockOnTheTable(TestPostgres.Database database) throws Exception {
        Connection connection = DriverManager.getConnection(database.url(), database.user(), database.password());
        connection.setAutoCommit(false);
        try (Statement statement = connection.createStatement()) {
            statement.execute("lock table idempotency_keys in share update exclusive mode");
        }
        return connection;
    }

    private HttpResponse<String> post(ConfigurableApplicationContext context) throws Exception {
        int port = ((WebServerApplicationContext) context).getWebServer().getPort();
        return http.send(HttpRequest.newBuilder(URI.create("http://localhost:" + port + "/orders"))
                .header("Content-Type", "application/json")
                .header("Idempotency-Key", UUID.randomUUID().toString())
                .POST(HttpRequest.BodyPublishers.ofString("{\"note\":\"partitions\"}")).build(),
                HttpResponse.BodyHandlers.ofString());
    }

}
