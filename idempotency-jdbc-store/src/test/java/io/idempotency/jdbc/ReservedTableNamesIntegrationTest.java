package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.jdbc.core.JdbcTemplate;

import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * A table name is spliced into SQL unquoted: a PostgreSQL reserved key word ({@code user}, {@code order},
 * {@code left}) is a plain identifier, yet no statement can name a table with it. Such a name is refused by the check,
 * saying why, not by a syntax error of the first statement that uses it.
 */
class ReservedTableNamesIntegrationTest {

    @Test
    void everyKeyWordPostgresqlReservesForTableNamesIsRefusedAsATableName() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(1)) {
            // reserved, and reserved but allowed as a function or type name: neither names a table unquoted
            List<String> reserved = new JdbcTemplate(dataSource).queryForList(
                    "select word from pg_get_keywords() where catcode in ('R', 'T') order by word", String.class);
            assertThat(reserved).contains("user", "order", "left");
            for (String word : reserved) {
                for (String written : List.of(word, word.toUpperCase(java.util.Locale.ROOT))) {
                    assertThatThrownBy(() -> IdempotencySchema.checkTableName(written)).as(written)
                            .isInstanceOf(IllegalArgumentException.class)
                            .hasMessageContaining("reserved");
                }
            }
        }
    }

    @Test
    void keyWordsThatMayNameATableStayAccepted() {
        try (HikariDataSource dataSource = TestPostgres.newDatabase().dataSource(1)) {
            JdbcTemplate jdbc = new JdbcTemplate(dataSource);
            List<String> unreserved = jdbc.queryForList(
                    "select word from pg_get_keywords() where catcode in ('U', 'C') and word in ('key', 'keys',"
                            + " 'values', 'between', 'name') order by word", String.class);
            assertThat(unreserved).contains("key", "values", "between", "name");
            for (String word : unreserved) {
                assertThat(IdempotencySchema.checkTableName(word)).isEqualTo(word);
                jdbc.execute(IdempotencySchema.postgresql(word));
                assertThat(new PostgresIdempotencyStore(dataSource, word)).isNotNull();
            }
        }
    }
}
