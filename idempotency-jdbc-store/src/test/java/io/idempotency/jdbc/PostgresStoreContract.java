package io.idempotency.jdbc;

import io.idempotency.core.ClaimRequest;
import io.idempotency.core.ClaimResult;
import io.idempotency.core.ScopedKey;
import io.idempotency.testkit.IdempotencyStoreContract;
import org.junit.jupiter.api.Test;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.transaction.support.TransactionTemplate;

import javax.sql.DataSource;
import java.time.Duration;

import static org.assertj.core.api.Assertions.assertThat;

/** The store contract, and what every PostgreSQL store promises beyond it. */
abstract class PostgresStoreContract extends IdempotencyStoreContract {

    /** The pool of the store under test. */
    protected abstract DataSource dataSource();

    /**
     * The bounded wait of the claim must not leak into the handler's statements: neither when the claim inserts, nor
     * when it finds a record (a FAILED one is taken over, and the handler then runs in that transaction).
     */
    @Test
    void theClaimRestoresTheLockTimeoutTheHandlerRunsWith() {
        ScopedKey key = newKey();
        ClaimResult first = lockTimeoutAfterClaiming(key);
        assertThat(first).isInstanceOf(ClaimResult.Claimed.class);
        new TransactionTemplate(new DataSourceTransactionManager(dataSource())).executeWithoutResult(status ->
                assertThat(store().fail(key, ((ClaimResult.Claimed) first).fencingToken())).isTrue());
        assertThat(lockTimeoutAfterClaiming(key)).as("a FAILED record taken over")
                .isInstanceOf(ClaimResult.Claimed.class);
    }

    /** Claims {@code key} in a transaction whose lock_timeout is 7s, and checks it is 7s again after the claim. */
    private ClaimResult lockTimeoutAfterClaiming(ScopedKey key) {
        JdbcTemplate jdbc = new JdbcTemplate(dataSource());
        return new TransactionTemplate(new DataSourceTransactionManager(dataSource())).execute(status -> {
            jdbc.execute("SET LOCAL lock_timeout = '7s'");
            ClaimResult result = store().claim(new ClaimRequest(key, "d".repeat(64), Duration.ofDays(1),
                    Duration.ofMillis(100)));
            assertThat(jdbc.queryForObject("SHOW lock_timeout", String.class)).isEqualTo("7s");
            return result;
        });
    }
}
