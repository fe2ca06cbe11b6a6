package io.idempotency.liquibase;

import io.idempotency.liquibase.app.LiquibaseTestApplication;
import io.idempotency.testkit.Await;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The partitioned table managed by the application's Liquibase, as the README says for {@code drop-partitions} mode:
 * {@code idempotency.jdbc.initialize-schema=false}, and a changelog that applies {@code partitioned-schema.sql} from
 * the jar with {@code validCheckSum ANY} and {@code sqlFile}. The startup check accepts the table, the library makes
 * its partitions on it, an {@code @Idempotent} endpoint runs once and replays over real HTTP on real PostgreSQL, and
 * the scheduled runs make the partitions that fall due and drop the expired ones.
 */
@SpringBootTest(classes = LiquibaseTestApplication.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = {"spring.liquibase.change-log=classpath:db/self-managed-partitioned.xml",
                "idempotency.jdbc.initialize-schema=false",
                "idempotency.retention.cleanup.mode=drop-partitions",
                "idempotency.retention.cleanup.partition-interval=1h",
                "idempotency.retention.cleanup.partitions-ahead=3",
                "idempotency.retention.cleanup.interval=500ms",
                "idempotency.retention.ttl=1d",
                "idempotency.retention.max-retry-window=1h"})
class LiquibaseManagedPartitionedSchemaIntegrationTest {

    static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    private static final String PARTITIONS = "select count(*) from pg_inherits i join pg_class c on c.oid = i.inhrelid"
            + " where i.inhparent = to_regclass('idempotency_keys')";
    private static final String MADE_AHEAD = PARTITIONS + " and c.relname like 'idempotency_keys_p%'";

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DATABASE.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @LocalServerPort
    int port;

    final HttpClient http = HttpClient.newHttpClient();

    @Test
    void theChangelogMadeThePartitionedTableFromTheScriptAndTheLibraryItsPartitions() {
        assertThat(DATABASE.queryString("select filename from databasechangelog where id = 'idempotency-keys'"))
                .isEqualTo("db/self-managed-partitioned.xml");
        assertThat(DATABASE.queryString("select to_regclass('idempotency_schema_history')")).isNull();
        // the script's every statement ran: the table partitioned by range of created_at, its key and both indexes
        assertThat(DATABASE.queryString("select p.partstrat::text || ' ' || a.attname from pg_partitioned_table p"
                + " join pg_attribute a on a.attrelid = p.partrelid and a.attnum = p.partattrs[0]"
                + " where p.partrelid = to_regclass('idempotency_keys')")).isEqualTo("r created_at");
        assertThat(DATABASE.queryString("select string_agg(c.relname, ' ' order by c.relname) from pg_index x"
                + " join pg_class c on c.oid = x.indexrelid where x.indrelid = to_regclass('idempotency_keys')"))
                .isEqualTo("idempotency_keys_expires_at_idx idempotency_keys_locked_until_idx idempotency_keys_pkey");
        // the current hour's partition and the three made ahead, none of them by Liquibase
        assertThat(DATABASE.queryLong(MADE_AHEAD)).isGreaterThanOrEqualTo(4);
        assertThat(DATABASE.queryLong("select count(*) from pg_inherits i join pg_class c on c.oid = i.inhrelid"
                + " where i.inhparent = to_regclass('idempotency_keys') and c.relname like 'idempotency_keys_p%'"
                + " and pg_get_expr(c.relpartbound, c.oid) like 'FOR VALUES FROM%'"
                + " and now() >= (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \\(''([^'']+)''\\)'))[1]"
                + "::timestamptz and now() < (regexp_match(pg_get_expr(c.relpartbound, c.oid),"
                + " 'TO \\(''([^'']+)''\\)'))[1]::timestamptz")).as("a partition for now").isEqualTo(1);
    }

    @Test
    void anOrderIsMadeOnceAndReplayedFromAPartition() throws Exception {
        String key = UUID.randomUUID().toString();
        String body = "{\"reference\":\"order-" + key + "\"}";

        HttpResponse<String> first = post(key, body);
        HttpResponse<String> second = post(key, body);

        assertThat(first.statusCode()).isEqualTo(201);
        assertThat(first.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(second.statusCode()).isEqualTo(201);
        assertThat(second.body()).isEqualTo(first.body());
        assertThat(second.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(DATABASE.queryLong("select count(*) from orders where reference = 'order-" + key + "'"))
                .isEqualTo(1);
        assertThat(DATABASE.queryString("select status || ' ' || response_status || ' '"
                + " || (tableoid::regclass::text like 'idempotency_keys_p%') from idempotency_keys"
                + " where idempotency_key = '" + key + "'")).isEqualTo("SUCCEEDED 201 true");
    }

    @Test
    void theScheduledRunsMakeThePartitionsDueAndDropTheExpiredOnes() throws Exception {
        // a partition the scheduled runs find missing: the newest made ahead, gone
        String newest = DATABASE.queryString("select c.relname from pg_inherits i join pg_class c"
                + " on c.oid = i.inhrelid where i.inhparent = to_regclass('idempotency_keys')"
                + " and c.relname like 'idempotency_keys_p%' order by c.relname desc limit 1");
        long madeAhead = DATABASE.queryLong(MADE_AHEAD);
        DATABASE.queryString("drop table " + newest);
        Await.until("a scheduled run makes " + newest + " again", Duration.ofSeconds(20),
                () -> DATABASE.queryLong(MADE_AHEAD + " and c.relname = '" + newest + "'") == 1);
        assertThat(DATABASE.queryLong(MADE_AHEAD)).isGreaterThanOrEqualTo(madeAhead);

        // a partition four days past, more than the TTL (a day), holding a completed record that has expired
        String key = UUID.randomUUID().toString();
        String body = "{\"reference\":\"order-" + key + "\"}";
        assertThat(post(key, body).statusCode()).isEqualTo(201);
        String scope = DATABASE.queryString("select scope from idempotency_keys where idempotency_key = '" + key + "'");
        String expiredKey = UUID.randomUUID().toString();
        DATABASE.queryString("create table idempotency_keys_expired (like idempotency_keys including defaults"
                + " including constraints)");
        DATABASE.queryString("insert into idempotency_keys_expired (caller, scope, idempotency_key, status,"
                + " request_hash, fencing_token, response_status, response_body, created_at, updated_at, expires_at)"
                + " values ('', '" + scope + "', '" + expiredKey + "', 'SUCCEEDED', repeat('0', 64), gen_random_uuid(),"
                + " 201, 'stored'::bytea, now() - interval '4 days 12 hours', now() - interval '4 days 12 hours',"
                + " now() - interval '3 days 12 hours')");
        DATABASE.queryString("do $$ begin execute format('alter table idempotency_keys attach partition"
                + " idempotency_keys_expired for values from (%L) to (%L)', now() - interval '5 days',"
                + " now() - interval '4 days'); end $$");

        Await.until("a scheduled run drops the expired partition", Duration.ofSeconds(20),
                () -> DATABASE.queryString("select to_regclass('idempotency_keys_expired')") == null);
        assertThat(DATABASE.queryLong("select count(*) from idempotency_keys where idempotency_key = '"
                + expiredKey + "'")).isZero();
        // the key is free again: a request with it runs as a new one
        HttpResponse<String> again = post(expiredKey, "{\"reference\":\"order-" + expiredKey + "\"}");
        assertThat(again.statusCode()).isEqualTo(201);
        assertThat(again.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(DATABASE.queryLong("select count(*) from orders where reference = 'order-" + expiredKey + "'"))
                .isEqualTo(1);
        assertThat(DATABASE.queryLong("select count(*) from databasechangelog")).isEqualTo(2);
    }

    private HttpResponse<String> post(String key, String body) throws Exception {
        return http.send(HttpRequest.newBuilder(URI.create("http://localhost:" + port + "/orders"))
                        .header("Content-Type", "application/json")
                        .header("Idempotency-Key", key)
                        .POST(HttpRequest.BodyPublishers.ofString(body, StandardCharsets.UTF_8)).build(),
                HttpResponse.BodyHandlers.ofString());
    }
}
