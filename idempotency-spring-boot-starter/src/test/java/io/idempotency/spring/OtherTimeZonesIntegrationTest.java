package io.idempotency.spring;

import io.idempotency.spring.zone.OtherZoneApplication;
import io.idempotency.testkit.FreePorts;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.UUID;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The starter in a JVM whose default time zone is neither UTC nor a whole number of hours from it (Pacific/Chatham,
 * +13:45 in its summer), on PostgreSQL sessions of yet another zone (America/St_Johns, -03:30, set by the pool's
 * init SQL after pgjdbc has sent the JVM's zone): every time comes from the database's clock and is an instant, so
 * neither zone shows. Keys expire the TTL after their claim, leases end the lease after it, partitions are made for
 * whole days of UTC, the expired one is dropped, and the HTTP date the handler set is GMT (RFC 9110 IMF-fixdate).
 */
class OtherTimeZonesIntegrationTest {

    private static final Duration START = Duration.ofSeconds(60);
    private static final Duration PATIENCE = Duration.ofSeconds(20);
    private static final String JVM_ZONE = "Pacific/Chatham";
    private static final String SESSION_ZONE = "America/St_Johns";
    private static final DateTimeFormatter PARTITION_DAY =
            DateTimeFormatter.ofPattern("yyyyMMdd").withZone(ZoneOffset.UTC);

    private final HttpClient http = HttpClient.newHttpClient();

    @Test
    void keysLeasesPartitionsAndHttpDatesHoldInAJvmAndSessionsOfOddZones(@TempDir Path directory) throws Exception {
        TestPostgres.Database database = TestPostgres.newDatabase();
        int port = FreePorts.outsideEphemeralRange();
        List<String> arguments = new ArrayList<>(List.of(OtherZoneApplication.class.getName(),
                "--server.port=" + port,
                "--spring.datasource.hikari.connection-init-sql=SET TIME ZONE '" + SESSION_ZONE + "'",
                "--idempotency.in-flight-wait=200ms",
                "--idempotency.retention.ttl=1d",
                "--idempotency.retention.max-retry-window=1h",
                "--idempotency.retention.cleanup.mode=drop-partitions",
                "--idempotency.retention.cleanup.interval=2s",
                "--idempotency.sweeper.enabled=false"));
        database.springPropertyValues().forEach(property -> arguments.add("--" + property));
        Path log = directory.resolve("application.log");
        Process application = TestJvms.java(List.of("-Duser.timezone=" + JVM_ZONE, "-Xmx256m"), arguments, log);
        try {
            awaitStarted(application, log);
            assertThat(Files.readString(log)).contains("JVM time zone: " + JVM_ZONE);
            assertThat(get(port, "/zone/session")).isEqualTo(SESSION_ZONE);

            // the partitions made at startup: today's of UTC and 7 more, each a whole UTC day, named for it
            Instant now = Instant.parse(database.queryString(
                    "select to_char(now() at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"));
            Instant today = now.truncatedTo(java.time.temporal.ChronoUnit.DAYS);
            for (int day = 0; day <= 7; day++) {
                Instant from = today.plus(Duration.ofDays(day));
                String name = "idempotency_keys_p" + PARTITION_DAY.format(from) + "_000000";
                assertThat(database.queryString("select pg_get_expr(c.relpartbound, c.oid) = format('FOR VALUES"
                        + " FROM (%L) TO (%L)', '" + from + "'::timestamptz, '" + from.plus(Duration.ofDays(1))
                        + "'::timestamptz) from pg_class c where c.oid = to_regclass('" + name + "')"))
                        .as(name).isEqualTo("t");
            }
            // an expired partition of three days ago, holding an expired record
            database.queryString("do $$ begin execute format('create table idempotency_keys_old partition of"
                    + " idempotency_keys for values from (%L) to (%L)', now() - interval '72 hours',"
                    + " now() - interval '48 hours'); end $$");
            database.queryString("insert into idempotency_keys (caller, scope, idempotency_key, status, request_hash,"
                    + " fencing_token, response_status, created_at, updated_at, expires_at) values ('', 'old', 'old',"
                    + " 'SUCCEEDED', repeat('a', 64), gen_random_uuid(), 201, now() - interval '60 hours',"
                    + " now() - interval '60 hours', now() - interval '36 hours')");

            // default mode: first execution, replay; the expiry is the TTL after the claim, on the database's clock
            String key = UUID.randomUUID().toString();
            HttpResponse<String> first = post(port, "/zone/payments", key, "pay", "no");
            assertThat(first.statusCode()).as(first.body()).isEqualTo(201);
            assertThat(first.headers().firstValue("Last-Modified")).hasValue("Thu, 01 Jan 2026 00:00:00 GMT");
            HttpResponse<String> replay = post(port, "/zone/payments", key, "pay", "no");
            assertThat(replay.statusCode()).isEqualTo(201);
            assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
            assertThat(replay.headers().firstValue("Last-Modified")).hasValue("Thu, 01 Jan 2026 00:00:00 GMT");
            assertThat(replay.body()).isEqualTo(first.body());
            assertThat(executions(port, "pay")).isEqualTo(1);
            assertThat(database.queryString("select (expires_at - created_at = interval '24 hours')"
                    + " and created_at between now() - interval '1 minute' and now()"
                    + " and tableoid::regclass::text = 'idempotency_keys_p'"
                    + " || to_char(created_at at time zone 'UTC', 'YYYYMMDD') || '_000000'"
                    + " from idempotency_keys where idempotency_key = '" + key + "'")).isEqualTo("t");

            // intent-first: an unknown outcome keeps the claim for its lease (8 s, not shifted by either zone's
            // offset), a retry meanwhile gets 409, and once the lease has ended on the database's clock a retry
            // takes the claim over
            String charge = UUID.randomUUID().toString();
            HttpResponse<String> unknown = post(port, "/zone/charges", charge, "charge", "unknown");
            assertThat(unknown.statusCode()).as(unknown.body()).isEqualTo(500);
            assertThat(database.queryString("select status || ' ' || (locked_until - created_at = interval '8 seconds')"
                    + " from idempotency_keys where idempotency_key = '" + charge + "'")).isEqualTo("PROCESSING true");
            // and as the store reads them in the application's JVM: the same instants
            String scope = database.queryString("select scope from idempotency_keys where idempotency_key = '"
                    + charge + "'");
            List<Instant> read = Arrays.stream(get(port, "/zone/record?scope=" + URLEncoder.encode(scope,
                    StandardCharsets.UTF_8) + "&key=" + charge).split(" ")).map(Instant::parse).toList();
            List<Instant> stored = Arrays.stream(database.queryString("select concat_ws(' ', "
                    + String.join(", ", Stream.of("created_at", "expires_at", "locked_until").map(column -> "to_char("
                    + column + " at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')").toList())
                    + ") from idempotency_keys where idempotency_key = '" + charge + "'").split(" "))
                    .map(Instant::parse).toList();
            assertThat(read).hasSize(3).isEqualTo(stored);
            HttpResponse<String> held = post(port, "/zone/charges", charge, "charge", "no");
            assertThat(held.statusCode()).as(held.body()).isEqualTo(409);
            assertThat(held.headers().firstValue("Retry-After")).hasValueSatisfying(
                    value -> assertThat(value).matches("[0-9]+"));
            assertThat(database.queryString("select locked_until > now() from idempotency_keys"
                    + " where idempotency_key = '" + charge + "'")).as("409 while the lease lasts").isEqualTo("t");
            long deadline = System.nanoTime() + PATIENCE.toNanos();
            while (!"t".equals(database.queryString("select locked_until < now() from idempotency_keys"
                    + " where idempotency_key = '" + charge + "'"))) {
                assertThat(System.nanoTime() - deadline).as("the lease ends").isNegative();
                Thread.sleep(100);
            }
            HttpResponse<String> takenOver = post(port, "/zone/charges", charge, "charge", "no");
            assertThat(takenOver.statusCode()).as(takenOver.body()).isEqualTo(201);
            assertThat(takenOver.headers().firstValue("Idempotent-Replayed")).isEmpty();
            assertThat(executions(port, "charge")).isEqualTo(2);

            // the scheduled run drops the expired partition, and only that one
            deadline = System.nanoTime() + PATIENCE.toNanos();
            while (database.queryString("select to_regclass('idempotency_keys_old')") != null) {
                assertThat(System.nanoTime() - deadline).as("the expired partition dropped").isNegative();
                Thread.sleep(200);
            }
            assertThat(database.queryLong("select count(*) from pg_inherits"
                    + " where inhparent = 'idempotency_keys'::regclass")).isEqualTo(8);
            assertThat(database.queryLong("select count(*) from idempotency_keys")).isEqualTo(2);
        } finally {
            application.destroyForcibly().waitFor();
        }
    }

    private static void awaitStarted(Process application, Path log) throws Exception {
        long deadline = System.nanoTime() + START.toNanos();
        while (System.nanoTime() < deadline) {
            String text = Files.exists(log) ? Files.readString(log) : "";
            if (text.contains("Started OtherZoneApplication")) {
                return;
            }
            assertThat(application.isAlive()).as("the application stopped:\n" + text).isTrue();
            Thread.sleep(200);
        }
        throw new AssertionError("not started within " + START + ":\n" + Files.readString(log));
    }

    private int executions(int port, String note) throws Exception {
        return Integer.parseInt(get(port, "/zone/executions?note=" + note));
    }

    private String get(int port, String path) throws Exception {
        HttpRequest request = HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                .timeout(PATIENCE).build();
        return http.send(request, HttpResponse.BodyHandlers.ofString()).body();
    }

    private HttpResponse<String> post(int port, String path, String key, String note, String fail) throws Exception {
        HttpRequest request = HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                .timeout(PATIENCE)
                .header("Content-Type", "application/json")
                .header("Idempotency-Key", key)
                .header("X-Fail", fail)
                .POST(HttpRequest.BodyPublishers.ofString("{\"note\":\"" + note + "\"}", StandardCharsets.UTF_8))
                .build();
        return http.send(request, HttpResponse.BodyHandlers.ofString());
    }
}
