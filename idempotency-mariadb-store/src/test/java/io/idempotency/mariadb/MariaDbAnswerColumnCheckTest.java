package io.idempotency.mariadb;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyRecord;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StoredResponse;
import io.idempotency.spring.IdempotencyAutoConfiguration;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIf;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.assertj.AssertableApplicationContext;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.boot.test.context.runner.ContextConsumer;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.transaction.support.TransactionTemplate;

import javax.sql.DataSource;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The stored answer's body column must hold every answer the library stores: a table made by hand with MariaDB's
 * {@code BLOB} (65,535 bytes) in place of the script's {@code LONGBLOB} takes the small answers of the first tests,
 * then cuts a larger one short where the server's SQL mode is not strict (and every replay of it sends a different
 * body than the first answer did), or refuses it where the mode is strict (the request, its handler having run, is
 * rolled back and answered 500, for every answer above 64 KB). The startup check refuses such a table.
 */
@EnabledIf("io.idempotency.mariadb.TestMariaDb#available")
class MariaDbAnswerColumnCheckTest {

    private static final String TABLE = "api_requests";
    private static final String HASH = "a".repeat(64);
    /** Well within the body cap the starter stores by default, above what a BLOB holds. */
    private static final int ANSWER_SIZE = 100_000;

    @Test
    void aBodyColumnTooSmallForTheStoredAnswersIsRefused() {
        assertThat(ANSWER_SIZE).isLessThan((int) IdempotencyEngine.DEFAULT_MAX_STORED_BODY_SIZE);
        TestMariaDb.Database database = TestMariaDb.newDatabase();
        try (HikariDataSource strict = database.dataSource(2);
             HikariDataSource lenient = database.dataSource(2, config -> config.setConnectionInitSql(
                     "SET SESSION sql_mode = ''"))) {
            new JdbcTemplate(strict).execute(MariaDbIdempotencyStore.schema(TABLE)
                    .replace("response_body    longblob", "response_body    blob"));

            // what the check prevents: an answer cut short, replayed so for as long as the record is kept
            MariaDbIdempotencyStore onLenient = new MariaDbIdempotencyStore(lenient, TABLE);
            byte[] body = answer();
            ScopedKey cut = newKey();
            assertThat(store(onLenient, lenient, cut, body)).isTrue();
            IdempotencyRecord kept = onLenient.find(cut).orElseThrow();
            assertThat(kept.response().body()).as("the body kept for replay").hasSize(65_535);

            // and, with the server's default (strict) mode, an answer that cannot be stored at all
            MariaDbIdempotencyStore onStrict = new MariaDbIdempotencyStore(strict, TABLE);
            assertThatThrownBy(() -> store(onStrict, strict, newKey(), body))
                    .hasStackTraceContaining("response_body");

            assertThatThrownBy(onStrict::checkTable).isInstanceOf(IllegalStateException.class)
                    .hasMessageContaining("response_body is blob")
                    .hasMessageContaining(MariaDbIdempotencyStore.SCHEMA_SCRIPT.substring(1));
        }
    }

    @Test
    void aBodyColumnOfTextIsRefused() {
        TestMariaDb.Database database = TestMariaDb.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(2)) {
            new JdbcTemplate(dataSource).execute(MariaDbIdempotencyStore.schema(TABLE)
                    // named: a server whose default is Latin-1 takes any byte in a column of its own
                    .replace("response_body    longblob", "response_body    longtext CHARACTER SET utf8mb4"));
            MariaDbIdempotencyStore store = new MariaDbIdempotencyStore(dataSource, TABLE);
            // what the check prevents: a body that is not text in the column's character set (compressed, an image,
            // Latin-1 text) cannot be stored
            assertThatThrownBy(() -> store(store, dataSource, newKey(), new byte[] {(byte) 0x1f, (byte) 0x8b,
                    (byte) 0xff})).hasStackTraceContaining("response_body");

            assertThatThrownBy(store::checkTable)
                    .isInstanceOf(IllegalStateException.class)
                    .hasMessageContaining("response_body is longtext");
        }
    }

    @Test
    void aStatusColumnTooSmallForEveryHttpStatusIsRefused() {
        TestMariaDb.Database database = TestMariaDb.newDatabase();
        try (HikariDataSource lenient = database.dataSource(2, config -> config.setConnectionInitSql(
                "SET SESSION sql_mode = ''"))) {
            new JdbcTemplate(lenient).execute(MariaDbIdempotencyStore.schema(TABLE)
                    .replace("response_status  int", "response_status  tinyint"));
            MariaDbIdempotencyStore store = new MariaDbIdempotencyStore(lenient, TABLE);
            // what the check prevents: a 404 kept, and replayed, as 127
            ScopedKey key = newKey();
            assertThat(store(store, lenient, key, new StoredResponse(404, List.of(), new byte[0]))).isTrue();
            assertThat(store.find(key).orElseThrow().response().status()).isEqualTo(127);

            assertThatThrownBy(store::checkTable).isInstanceOf(IllegalStateException.class)
                    .hasMessageContaining("response_status is tinyint");
        }
        for (String type : List.of("smallint", "int", "bigint")) {
            TestMariaDb.Database accepted = TestMariaDb.newDatabase();
            try (HikariDataSource dataSource = accepted.dataSource(2)) {
                new JdbcTemplate(dataSource).execute(MariaDbIdempotencyStore.schema(TABLE)
                        .replace("response_status  int", "response_status  " + type));
                new MariaDbIdempotencyStore(dataSource, TABLE).checkTable();
            }
        }
    }

    @Test
    void theBodyColumnsThatHoldEveryStoredAnswerAreAccepted() {
        for (String type : List.of("longblob", "mediumblob")) {
            TestMariaDb.Database database = TestMariaDb.newDatabase();
            try (HikariDataSource dataSource = database.dataSource(2)) {
                new JdbcTemplate(dataSource).execute(MariaDbIdempotencyStore.schema(TABLE)
                        .replace("response_body    longblob", "response_body    " + type));
                MariaDbIdempotencyStore store = new MariaDbIdempotencyStore(dataSource, TABLE);
                store.checkTable();
                ScopedKey key = newKey();
                byte[] body = answer();
                assertThat(store(store, dataSource, key, body)).isTrue();
                assertThat(store.find(key).orElseThrow().response().body()).as(type).isEqualTo(body);
            }
        }
    }

    /**
     * The replayed headers include {@code Link} and {@code Location} by default: a list endpoint's pagination links
     * alone outgrow a {@code varchar(255)}, and cut short they are replayed cut (or, cut inside a name, fail every
     * replay of the key).
     */
    @Test
    void aHeadersColumnTooSmallForTheStoredHeadersIsRefused() {
        TestMariaDb.Database database = TestMariaDb.newDatabase();
        try (HikariDataSource strict = database.dataSource(2);
             HikariDataSource lenient = database.dataSource(2, config -> config.setConnectionInitSql(
                     "SET SESSION sql_mode = ''"))) {
            new JdbcTemplate(strict).execute(MariaDbIdempotencyStore.schema(TABLE)
                    .replace("response_headers mediumtext", "response_headers varchar(255)"));
            List<StoredResponse.Header> headers = List.of(
                    new StoredResponse.Header("Content-Type", "application/json"),
                    new StoredResponse.Header("Link", "<https://api.example.com/reports?page=2&size=100>; rel=\"next\","
                            + " <https://api.example.com/reports?page=9&size=100>; rel=\"last\","
                            + " <https://api.example.com/reports?page=1&size=100>; rel=\"first\""),
                    new StoredResponse.Header("Location", "https://api.example.com/reports/" + UUID.randomUUID()));
            StoredResponse answer = new StoredResponse(200, headers, "{}".getBytes(StandardCharsets.UTF_8));
            assertThat(answer.headersAsText().length()).isGreaterThan(255);

            // what the check prevents: headers cut short, replayed so for as long as the record is kept
            MariaDbIdempotencyStore onLenient = new MariaDbIdempotencyStore(lenient, TABLE);
            ScopedKey cut = newKey();
            assertThat(store(onLenient, lenient, cut, answer)).isTrue();
            String kept = new JdbcTemplate(lenient).queryForObject("SELECT response_headers FROM " + TABLE
                    + " WHERE idempotency_key = ?", String.class, cut.key());
            assertThat(kept).as("the headers kept for replay").hasSize(255).isNotEqualTo(answer.headersAsText());

            // and, with the server's default (strict) mode, an answer that cannot be stored at all
            MariaDbIdempotencyStore onStrict = new MariaDbIdempotencyStore(strict, TABLE);
            assertThatThrownBy(() -> store(onStrict, strict, newKey(), answer))
                    .hasStackTraceContaining("response_headers");

            assertThatThrownBy(onStrict::checkTable).isInstanceOf(IllegalStateException.class)
                    .hasMessageContaining("response_headers is varchar")
                    .hasMessageContaining(MariaDbIdempotencyStore.SCHEMA_SCRIPT.substring(1));
        }
    }

    /**
     * A headers column made without a character set takes the table's or database's default, {@code latin1} on many
     * servers, or {@code utf8mb3}: a header value outside it (a file name in {@code Content-Disposition}, a 4-byte
     * character) is refused when the answer is stored, after its handler ran, or, where the SQL mode is not strict,
     * kept and replayed as '?'.
     */
    @Test
    void aHeadersColumnThatCannotHoldEveryCharacterIsRefused() {
        for (String charset : List.of("latin1", "utf8mb3")) {
            TestMariaDb.Database database = TestMariaDb.newDatabase();
            try (HikariDataSource strict = database.dataSource(2);
                 HikariDataSource lenient = database.dataSource(2, config -> config.setConnectionInitSql(
                         "SET SESSION sql_mode = ''"))) {
                new JdbcTemplate(strict).execute(MariaDbIdempotencyStore.schema(TABLE)
                        .replace("response_headers mediumtext   CHARACTER SET utf8mb4",
                                "response_headers mediumtext   CHARACTER SET " + charset));
                StoredResponse answer = new StoredResponse(201, List.of(new StoredResponse.Header(
                        "Content-Disposition", "attachment; filename=\"Przelew-łódź-\uD83D\uDCB6.pdf\"")),
                        "{}".getBytes(StandardCharsets.UTF_8));

                // what the check prevents: headers replayed mangled for as long as the record is kept
                MariaDbIdempotencyStore onLenient = new MariaDbIdempotencyStore(lenient, TABLE);
                ScopedKey mangled = newKey();
                assertThat(store(onLenient, lenient, mangled, answer)).isTrue();
                assertThat(onLenient.find(mangled).orElseThrow().response().headers()).as(charset)
                        .isNotEqualTo(answer.headers());

                // and, with the server's default (strict) mode, an answer that cannot be stored at all
                MariaDbIdempotencyStore onStrict = new MariaDbIdempotencyStore(strict, TABLE);
                assertThatThrownBy(() -> store(onStrict, strict, newKey(), answer)).as(charset)
                        .hasStackTraceContaining("response_headers");

                assertThatThrownBy(onStrict::checkTable).as(charset).isInstanceOf(IllegalStateException.class)
                        .hasMessageContaining("response_headers is in character set " + charset);
            }
        }
    }

    @Test
    void theHeadersColumnsThatHoldEveryStoredHeaderAreAccepted() {
        for (String type : List.of("mediumtext", "text", "longtext")) {
            TestMariaDb.Database database = TestMariaDb.newDatabase();
            try (HikariDataSource dataSource = database.dataSource(2)) {
                new JdbcTemplate(dataSource).execute(MariaDbIdempotencyStore.schema(TABLE)
                        .replace("response_headers mediumtext", "response_headers " + type));
                new MariaDbIdempotencyStore(dataSource, TABLE).checkTable();
            }
        }
    }

    /**
     * A cap on stored bodies raised beyond what the statement storing an answer may carry (the server's
     * {@code max_allowed_packet}, in which a body's zero bytes, quotes and backslashes travel escaped as two) or the
     * body column holds (a {@code mediumblob} keeps 16 MB) let the application start, and then every answer above
     * what fits, its handler having run, failed when it was stored. The application does not start.
     */
    @Test
    void aCapOnStoredBodiesTheTableOrTheServerCannotHoldIsRefusedAtStartup() {
        long fits;
        TestMariaDb.Database database = TestMariaDb.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(2)) {
            // a longblob: only the server's packet limits what can be stored
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute(MariaDbIdempotencyStore.schema(TABLE));
            long packet = jdbc.queryForObject("SELECT @@max_allowed_packet", Long.class);
            fits = (packet - 256 * 1024) / 2;
            if (packet <= 64 * 1024 * 1024) {
                // what the check prevents: an answer under the cap whose statement the server refuses
                byte[] zeros = new byte[(int) fits + 1_000_000];
                assertThatThrownBy(() -> store(new MariaDbIdempotencyStore(dataSource, TABLE), dataSource, newKey(),
                        zeros)).as("an answer of %d zero bytes, max_allowed_packet %d", zeros.length, packet)
                        .isInstanceOf(RuntimeException.class);
            }

            startWithCap(database, (fits + 1) + "B", context -> assertThat(context).hasFailed().getFailure()
                    .hasStackTraceContaining("idempotency.max-stored-body-size")
                    .hasStackTraceContaining("max_allowed_packet (" + packet + " bytes)")
                    .hasStackTraceContaining("at least " + (2 * (fits + 1) + 256 * 1024) + " bytes"));
            startWithCap(database, fits + "B", context -> assertThat(context).hasNotFailed());
            startWithCap(database, null, context -> assertThat(context).hasNotFailed());
        }

        TestMariaDb.Database medium = TestMariaDb.newDatabase();
        try (HikariDataSource dataSource = medium.dataSource(2)) {
            new JdbcTemplate(dataSource).execute(MariaDbIdempotencyStore.schema(TABLE)
                    .replace("response_body    longblob", "response_body    mediumblob"));
            startWithCap(medium, "17MB", context -> assertThat(context).hasFailed().getFailure()
                    .hasStackTraceContaining("idempotency.max-stored-body-size (17MB)")
                    .hasStackTraceContaining("response_body, is a mediumblob, which holds 16777215 bytes")
                    .hasStackTraceContaining("longblob"));
            // what both the packet and the column hold: a server's packet may be larger than a mediumblob, or smaller
            startWithCap(medium, Math.min(fits, 16_777_215) + "B", context -> assertThat(context).hasNotFailed());
            startWithCap(medium, null, context -> assertThat(context).hasNotFailed());
        }
    }

    /** The starter on {@code database}, the MariaDB store, and {@code cap} on stored bodies (null: the default). */
    private static void startWithCap(TestMariaDb.Database database, String cap,
                                     ContextConsumer<AssertableApplicationContext> check) {
        HikariDataSource dataSource = database.dataSource(2); // closed with the application
        new ApplicationContextRunner().withConfiguration(AutoConfigurations.of(IdempotencyAutoConfiguration.class))
                .withBean(DataSource.class, () -> dataSource)
                .withBean(PlatformTransactionManager.class, () -> new DataSourceTransactionManager(dataSource))
                .withBean(IdempotencyStore.class, () -> new MariaDbIdempotencyStore(dataSource, TABLE))
                .withPropertyValues(cap == null ? new String[0]
                        : new String[] {"idempotency.max-stored-body-size=" + cap})
                .run(check);
    }

    private static boolean store(MariaDbIdempotencyStore store, HikariDataSource dataSource, ScopedKey key,
                                 byte[] body) {
        return store(store, dataSource, key, new StoredResponse(200, List.of(), body));
    }

    private static boolean store(MariaDbIdempotencyStore store, HikariDataSource dataSource, ScopedKey key,
                                 StoredResponse answer) {
        TransactionTemplate transaction = new TransactionTemplate(new DataSourceTransactionManager(dataSource));
        transaction.setIsolationLevel(TransactionTemplate.ISOLATION_READ_COMMITTED);
        return Boolean.TRUE.equals(transaction.execute(status -> {
            ClaimResult claim = store.claim(new ClaimRequest(key, HASH, Duration.ofDays(1), Duration.ofSeconds(1)));
            String token = ((ClaimResult.Claimed) claim).fencingToken();
            return store.complete(key, token, answer);
        }));
    }

    private static byte[] answer() {
        byte[] body = new byte[ANSWER_SIZE];
        Arrays.fill(body, (byte) '7');
        return body;
    }

    private static ScopedKey newKey() {
        return new ScopedKey("", "POST /reports", UUID.randomUUID().toString());
    }
}
