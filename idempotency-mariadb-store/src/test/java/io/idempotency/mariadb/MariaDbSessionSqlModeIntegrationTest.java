package io.idempotency.mariadb;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.IdempotencyRecord;
import io.idempotency.core.RecordStatus;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StoredResponse;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIf;
import org.springframework.jdbc.core.JdbcTemplate;

import java.time.Duration;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Sessions whose SQL mode changes how statement text is read: without backslash escapes (a quote is escaped only by
 * doubling it, a backslash is an ordinary character) and with double quotes around identifiers. Keys holding quotes,
 * backslashes, accents and characters beyond the Basic Multilingual Plane stay apart, and an answer holding every
 * byte value is replayed as it was stored.
 */
@EnabledIf("io.idempotency.mariadb.TestMariaDb#available")
class MariaDbSessionSqlModeIntegrationTest {

    private static final String HASH = "a".repeat(64);
    private static final String MODES = "NO_BACKSLASH_ESCAPES,ANSI_QUOTES,STRICT_TRANS_TABLES";

    @Test
    void keysAndAnswersAreStoredAsTheyAreWithoutBackslashEscapes() {
        TestMariaDb.Database database = TestMariaDb.newDatabase();
        try (HikariDataSource dataSource = database.dataSource(2,
                config -> config.setConnectionInitSql("SET SESSION sql_mode = '" + MODES + "'"))) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            jdbc.execute(MariaDbIdempotencyStore.schema("idempotency_keys"));
            assertThat(jdbc.queryForObject("SELECT @@SESSION.sql_mode", String.class)).contains("NO_BACKSLASH_ESCAPES");
            MariaDbIdempotencyStore store = new MariaDbIdempotencyStore(dataSource, "idempotency_keys");
            store.checkTable();

            byte[] body = new byte[512];
            for (int i = 0; i < body.length; i++) {
                body[i] = (byte) i;
            }
            // keys a case- or accent-insensitive collation, or one that weighs every supplementary character alike,
            // would make one; and keys whose quotes and backslashes a wrong escape would change or run together
            List<String> keys = List.of("e", "\u00e9", "e\u0301", "\u00c9", "\ud83d\ude00", "\ud83d\ude01",
                    "\ud801\udc00", "\ud801\udc28", "a'b", "a''b", "a\\'b", "a\\\\b", "a\\b", "a\\", "\\", "'",
                    "a\"b", "a\\0b", "a\\0b'");
            for (String part : keys) {
                ScopedKey key = new ScopedKey("caller'\\" + part, "POST /x\\'" + part, part);
                ClaimResult claim = store.claim(new ClaimRequest(key, HASH, Duration.ofDays(1),
                        Duration.ofSeconds(1)));
                assertThat(claim).as("claim of %s", key).isInstanceOf(ClaimResult.Claimed.class);
                StoredResponse answer = new StoredResponse(201, List.of(new StoredResponse.Header("Location",
                        "/x/" + part)), (part + new String(body, java.nio.charset.StandardCharsets.ISO_8859_1))
                        .getBytes(java.nio.charset.StandardCharsets.UTF_8));
                assertThat(store.complete(key, ((ClaimResult.Claimed) claim).fencingToken(), answer))
                        .as("answer of %s", key).isTrue();
            }
            for (String part : keys) {
                ScopedKey key = new ScopedKey("caller'\\" + part, "POST /x\\'" + part, part);
                IdempotencyRecord record = store.find(key).orElseThrow();
                assertThat(record.status()).isEqualTo(RecordStatus.SUCCEEDED);
                assertThat(record.response().headers()).containsExactly(new StoredResponse.Header("Location",
                        "/x/" + part));
                assertThat(record.response().body()).as("answer of %s", key).isEqualTo((part
                        + new String(body, java.nio.charset.StandardCharsets.ISO_8859_1))
                        .getBytes(java.nio.charset.StandardCharsets.UTF_8));
                assertThat(store.claim(new ClaimRequest(key, HASH, Duration.ofDays(1), Duration.ofSeconds(1))))
                        .as("claim again of %s", key).isInstanceOf(ClaimResult.Existing.class);
            }
            assertThat(jdbc.queryForObject("SELECT count(*) FROM idempotency_keys", Integer.class))
                    .isEqualTo(keys.size());
        }
    }
}
