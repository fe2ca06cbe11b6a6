package io.idempotency.jdbc;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.core.Transactions;
import io.idempotency.testkit.TestPostgres;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;

import javax.sql.DataSource;
import java.time.Duration;
import java.util.function.Consumer;
import java.util.function.Function;

/**
 * The store contract on a database of the test class's own. The class makes it once, in a static field (JUnit makes
 * an instance of the class for every test), and closes its pool after its last test; the store under test, its
 * transactions and its pool all come from it.
 */
abstract class PostgresStoreContractOnItsOwnDatabase extends PostgresStoreContract {

    /** The test class's database. */
    protected abstract OwnDatabase database();

    @Override
    protected IdempotencyStore store() {
        return database().store();
    }

    @Override
    protected DataSource dataSource() {
        return database().pool();
    }

    @Override
    protected IdempotencyStore storeOn(DataSource dataSource) {
        return database().storeOn().apply(dataSource);
    }

    @Override
    protected Transactions transactions() {
        return database().transactions();
    }

    @Override
    protected void awaitBlockedClaim() throws InterruptedException {
        database().postgres().awaitLockWaiter(Duration.ofSeconds(30));
    }

    /**
     * A new database with a pool large enough for the contract, transactions on the pool, and the store under test,
     * which {@code storeOn} makes on the pool.
     */
    record OwnDatabase(TestPostgres.Database postgres, HikariDataSource pool, Transactions transactions,
                       Function<DataSource, IdempotencyStore> storeOn, IdempotencyStore store) {

        /** A new database, whose schema {@code migration} makes before the store is made. */
        static OwnDatabase create(Consumer<DataSource> migration, Function<DataSource, IdempotencyStore> storeOn) {
            TestPostgres.Database postgres = TestPostgres.newDatabase();
            HikariDataSource pool = postgres.dataSource(MIN_POOL_SIZE + 4);
            Transactions transactions = new SpringTransactions(new DataSourceTransactionManager(pool));
            migration.accept(pool);
            return new OwnDatabase(postgres, pool, transactions, storeOn, storeOn.apply(pool));
        }
    }
}
