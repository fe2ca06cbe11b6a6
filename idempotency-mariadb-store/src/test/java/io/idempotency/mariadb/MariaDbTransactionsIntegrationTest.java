package io.idempotency.mariadb;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyStore;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIf;
import org.slf4j.LoggerFactory;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Bean;
import org.springframework.dao.DuplicateKeyException;
import org.springframework.http.ResponseEntity;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.transaction.annotation.Transactional;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;

import javax.sql.DataSource;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.Statement;
import java.time.Duration;
import java.util.Map;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The starter's handling of the request's transaction, over real HTTP on real MariaDB, as on PostgreSQL: a claim's
 * wait for a key another instance holds is bounded by what is left of the transaction's timeout
 * ({@code spring.transaction.default-timeout} shorter than {@code idempotency.in-flight-wait}) and ends in 409, and a
 * handler's 4xx refusal after a failure that left its transaction rollback-only is sent as it made it, not stored.
 */
@EnabledIf("io.idempotency.mariadb.TestMariaDb#available")
@SpringBootTest(classes = MariaDbTransactionsIntegrationTest.NoteApplication.class,
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT, properties = {
                "spring.transaction.default-timeout=2s", "idempotency.in-flight-wait=10s",
                "idempotency.sweeper.enabled=false",
                "spring.datasource.hikari.transaction-isolation=TRANSACTION_READ_COMMITTED"})
class MariaDbTransactionsIntegrationTest {

    /** Where MariaDB Connector/J logs every error the server returns. */
    private static final String DRIVER_ERRORS = "org.mariadb.jdbc.message.server.ErrorPacket";
    private static final HttpClient HTTP = HttpClient.newHttpClient();
    private static TestMariaDb.Database database;

    @BeforeAll
    static void newDatabase() {
        database = TestMariaDb.newDatabase();
    }

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        // read when the application starts, after the database is made
        registry.add("spring.datasource.url", () -> database.url());
        registry.add("spring.datasource.username", () -> database.user());
        registry.add("spring.datasource.password", () -> database.password()); // null: not set
    }

    @LocalServerPort
    int port;

    @Autowired
    JdbcTemplate jdbc;

    @Test
    void aDuplicateOfAKeyHeldElsewhereGets409BeforeTheTransactionTimesOut() throws Exception {
        String first = UUID.randomUUID().toString();
        assertThat(post("/notes", first, note("tx-timeout-first-" + first)).statusCode()).isEqualTo(201);
        Map<String, Object> scoped = jdbc.queryForMap("SELECT caller, scope FROM idempotency_keys"
                + " WHERE idempotency_key = ?", first);
        String key = UUID.randomUUID().toString();
        String text = "tx-timeout-" + key;
        // another instance's claim of the key, not committed yet
        try (Connection other = DriverManager.getConnection(database.url(), database.user(), database.password());
             Statement statement = other.createStatement()) {
            other.setAutoCommit(false);
            statement.execute("INSERT INTO idempotency_keys (caller, scope, idempotency_key, status, request_hash,"
                    + " fencing_token, created_at, updated_at, expires_at, locked_until) VALUES ('"
                    + scoped.get("caller") + "', '" + scoped.get("scope") + "', '" + key + "', 'PROCESSING',"
                    + " repeat('a', 64), uuid(), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6),"
                    + " UTC_TIMESTAMP(6) + INTERVAL 1 DAY, NULL)");

            ListAppender<ILoggingEvent> driverLog = new ListAppender<>();
            Logger errors = (Logger) LoggerFactory.getLogger(DRIVER_ERRORS);
            driverLog.start();
            errors.addAppender(driverLog);
            long started = System.nanoTime();
            HttpResponse<String> waited;
            try {
                waited = post("/notes", key, note(text));
            } finally {
                errors.detachAppender(driverLog);
            }
            Duration took = Duration.ofNanos(System.nanoTime() - started);

            assertThat(waited.statusCode()).as("the in-flight answer, not the transaction's timeout: %s",
                    waited.body()).isEqualTo(409);
            assertThat(waited.body()).contains("idempotency-request-in-progress");
            assertThat(waited.headers().firstValue("Retry-After")).hasValue("1");
            assertThat(took).as("waited for the key, within the transaction's time")
                    .isGreaterThan(Duration.ofMillis(800)).isLessThan(Duration.ofSeconds(5));
            // what docs/mariadb.md warns of: the driver logs each look again's expected error 1205 at WARN
            assertThat(driverLog.list).filteredOn(event -> event.getLevel() == Level.WARN
                    && event.getFormattedMessage().contains("1205")).as("the driver's WARN lines")
                    .hasSizeGreaterThan(10);
            other.rollback();
        }
        assertThat(notes(text)).isZero();
        assertThat(keyRows(key)).isZero();
        HttpResponse<String> retry = post("/notes", key, note(text));
        assertThat(retry.statusCode()).as("the retry has the whole transaction for its handler").isEqualTo(201);
        assertThat(notes(text)).isEqualTo(1);
    }

    @Test
    void aRefusalInATransactionMarkedRollbackOnlyIsSentAsTheHandlerAnsweredAndNotStored() throws Exception {
        // the handler answers 422 for a @Transactional method it called that failed: nothing can be kept, so its
        // refusal is answered as one its exception handler made, not as a commit that failed
        String key = UUID.randomUUID().toString();
        String text = "rollback-only-refusal-" + key;

        HttpResponse<String> answer = post("/notes/caught-inner-refusal", key, note(text));

        assertThat(answer.statusCode()).as("the handler's refusal: %s", answer.body()).isEqualTo(422);
        assertThat(answer.body()).isEqualTo("{\"refused\":\"refused\"}");
        assertThat(answer.headers().firstValue("X-Refused")).hasValue("inner");
        assertThat(notes(text)).isZero();
        assertThat(notes(text + "-inner")).isZero();
        assertThat(keyRows(key)).as("not stored: a retry runs again").isZero();
        HttpResponse<String> retry = post("/notes/caught-inner-refusal", key, note(text));
        assertThat(retry.statusCode()).isEqualTo(422);
        assertThat(retry.headers().firstValue("Idempotent-Replayed")).isEmpty();
        assertThat(keyRows(key)).isZero();
    }

    @Test
    void aStatementThatFailsUndoesItselfOnlyAndTheAnswerIsStoredWithTheRest() throws Exception {
        // unlike PostgreSQL, which aborts the transaction at the failed statement (nothing of the request can be kept
        // then), InnoDB undoes the statement alone: the handler that tolerates the duplicate carries on in its
        // transaction, and its claim, writes and answer commit together
        String key = UUID.randomUUID().toString();
        String text = "tolerated-duplicate-" + key;
        jdbc.update("INSERT INTO tags (name) VALUES (?)", text);

        HttpResponse<String> answer = post("/notes/tolerating-a-duplicate", key, note(text));
        HttpResponse<String> replay = post("/notes/tolerating-a-duplicate", key, note(text));

        assertThat(answer.statusCode()).as(answer.body()).isEqualTo(201);
        assertThat(answer.body()).contains("\"tagged\":false");
        assertThat(notes(text)).as("the write before the failed statement is kept").isEqualTo(1);
        assertThat(jdbc.queryForObject("SELECT status FROM idempotency_keys WHERE idempotency_key = ?",
                String.class, key)).isEqualTo("SUCCEEDED");
        assertThat(replay.statusCode()).isEqualTo(201);
        assertThat(replay.headers().firstValue("Idempotent-Replayed")).hasValue("true");
        assertThat(replay.body()).isEqualTo(answer.body());
        assertThat(notes(text)).isEqualTo(1);
    }

    private HttpResponse<String> post(String path, String key, String body) throws Exception {
        return HTTP.send(HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                .header("Content-Type", "application/json").header("Idempotency-Key", key)
                .POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofString());
    }

    private static String note(String text) {
        return "{\"text\":\"" + text + "\"}";
    }

    private int notes(String text) {
        return jdbc.queryForObject("SELECT count(*) FROM notes WHERE text = ?", Integer.class, text);
    }

    private int keyRows(String key) {
        return jdbc.queryForObject("SELECT count(*) FROM idempotency_keys WHERE idempotency_key = ?", Integer.class,
                key);
    }

    @SpringBootApplication
    static class NoteApplication {

        /** The records in MariaDB, in a table made from the shipped script, as the application's migrations would. */
        @Bean
        IdempotencyStore idempotencyStore(DataSource dataSource) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute(MariaDbIdempotencyStore.schema("idempotency_keys"));
            jdbc.execute("CREATE TABLE notes (id bigint AUTO_INCREMENT PRIMARY KEY, text varchar(200) NOT NULL)");
            jdbc.execute("CREATE TABLE tags (name varchar(200) PRIMARY KEY)");
            return new MariaDbIdempotencyStore(dataSource, "idempotency_keys");
        }

        @Bean
        NoteService noteService(JdbcTemplate jdbc) {
            return new NoteService(jdbc);
        }

        @Bean
        NoteController noteController(JdbcTemplate jdbc, NoteService service) {
            return new NoteController(jdbc, service);
        }
    }

    /** A service whose method joins its caller's transaction. */
    static class NoteService {

        private final JdbcTemplate jdbc;

        NoteService(JdbcTemplate jdbc) {
            this.jdbc = jdbc;
        }

        /** Writes a row and fails: joined to its caller's transaction, it leaves that one able only to roll back. */
        @Transactional
        public void insertAndFail(String text) {
            jdbc.update("INSERT INTO notes (text) VALUES (?)", text);
            throw new IllegalStateException("refused");
        }
    }

    @RestController
    static class NoteController {

        private final JdbcTemplate jdbc;
        private final NoteService service;

        NoteController(JdbcTemplate jdbc, NoteService service) {
            this.jdbc = jdbc;
            this.service = service;
        }

        @PostMapping("/notes")
        @Idempotent
        ResponseEntity<Map<String, Object>> create(@RequestBody Map<String, String> note) {
            jdbc.update("INSERT INTO notes (text) VALUES (?)", note.get("text"));
            return ResponseEntity.status(201).body(Map.of("text", note.get("text")));
        }

        /** Writes a row, then refuses the request with 422 when a {@code @Transactional} method it called failed. */
        @PostMapping("/notes/caught-inner-refusal")
        @Idempotent
        ResponseEntity<Map<String, String>> caughtInnerRefusal(@RequestBody Map<String, String> note) {
            jdbc.update("INSERT INTO notes (text) VALUES (?)", note.get("text"));
            try {
                service.insertAndFail(note.get("text") + "-inner");
            } catch (IllegalStateException e) {
                return ResponseEntity.status(422).header("X-Refused", "inner").body(Map.of("refused", e.getMessage()));
            }
            return ResponseEntity.status(201).build();
        }

        /** Writes a row, then a tag that may exist already, tolerating its duplicate (as PostgreSQL cannot). */
        @PostMapping("/notes/tolerating-a-duplicate")
        @Idempotent
        ResponseEntity<Map<String, Object>> toleratingADuplicate(@RequestBody Map<String, String> note) {
            jdbc.update("INSERT INTO notes (text) VALUES (?)", note.get("text"));
            boolean tagged;
            try {
                tagged = jdbc.update("INSERT INTO tags (name) VALUES (?)", note.get("text")) == 1;
            } catch (DuplicateKeyException e) {
                tagged = false;
            }
            return ResponseEntity.status(201).body(Map.of("text", note.get("text"), "tagged", tagged));
        }
    }
}
