package io.idempotency.mariadb;

import io.idempotency.core.IdempotencyStore;
import io.idempotency.core.Transactions;
import io.idempotency.jdbc.SpringTransactions;
import io.idempotency.testkit.IdempotencyStoreContract;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;

import java.time.Duration;

/**
 * The store contract on a MariaDB database of the test class's own. The class makes it in its {@code @BeforeAll},
 * keeps it in a static field (JUnit makes an instance of the class for every test) and closes its pool after its last
 * test; the store under test and its transactions come from it.
 */
abstract class MariaDbStoreContract extends IdempotencyStoreContract {

    /** The test class's database. */
    protected abstract OwnDatabase database();

    @Override
    protected IdempotencyStore store() {
        return database().store();
    }

    @Override
    protected Transactions transactions() {
        return database().transactions();
    }

    /** The pool of the store under test. */
    protected TestMariaDb.Pool pool() {
        return database().pool();
    }

    @Override
    protected void awaitBlockedClaim() throws InterruptedException {
        pool().awaitBlockedClaim(Duration.ofSeconds(30));
    }

    /** A pool on a database of its own, the store's table made in it, the store on that pool, and its transactions. */
    record OwnDatabase(TestMariaDb.Pool pool, MariaDbIdempotencyStore store, Transactions transactions) {

        static OwnDatabase create(TestMariaDb.Pool pool) {
            new JdbcTemplate(pool).execute(MariaDbIdempotencyStore.schema("idempotency_keys"));
            return new OwnDatabase(pool, new MariaDbIdempotencyStore(pool, "idempotency_keys"),
                    new SpringTransactions(new DataSourceTransactionManager(pool)));
        }

        /** Closes the pool of a database that was made. */
        static void close(OwnDatabase database) {
            if (database != null) {
                database.pool().close();
            }
        }
    }
}
