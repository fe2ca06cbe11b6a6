package io.idempotency.spring;

import io.idempotency.jdbc.PostgresIdempotencyStore;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.support.DefaultListableBeanFactory;
import org.springframework.jdbc.datasource.AbstractDataSource;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;

import javax.sql.DataSource;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The isolation the connections default to is asked once at startup. When the database cannot be reached then, the
 * transactions set READ COMMITTED every time (always correct), and the start does not ask again by beginning a
 * transaction to see whether the level can be set: that would only wait for the database as long once more (a pool's
 * connection timeout, 30 seconds by default).
 */
class TransactionsWithTheDatabaseDownTest {

    @Test
    void aDatabaseThatCannotBeReachedAtStartupIsAskedOnce() {
        AtomicInteger attempts = new AtomicInteger();
        DataSource down = new AbstractDataSource() {
            @Override
            public Connection getConnection() throws SQLException {
                attempts.incrementAndGet();
                throw new SQLException("Connection refused", "08001");
            }

            @Override
            public Connection getConnection(String username, String password) throws SQLException {
                return getConnection();
            }
        };
        DefaultListableBeanFactory beans = new DefaultListableBeanFactory();
        beans.registerSingleton("dataSource", down);

        IdempotencyAutoConfiguration configuration = new IdempotencyAutoConfiguration();
        configuration.idempotencyTransactions(new DataSourceTransactionManager(down), configuration
                .idempotencyStoreIsolation(new PostgresIdempotencyStore(down, "idempotency_keys"),
                        beans.getBeanProvider(DataSource.class)));

        assertThat(attempts).as("connections asked for while the transactions were set up").hasValue(1);
    }

    /**
     * The table is created or checked at startup, as Spring Boot's own Flyway would: with the database unreachable the
     * application does not start, and says why, rather than starting with a table nobody checked and answering every
     * idempotent request 503 until the database is back.
     */
    @Test
    void anApplicationWhoseDatabaseCannotBeReachedAtStartupDoesNotStartAndSaysSo() {
        for (String initialize : new String[] {"true", "false"}) {
            assertThat(StartupFailures.startupFailure(TestDatabases.contextRunner().withUserConfiguration(
                    IdempotencyAutoConfigurationTest.PostOnlyLongRouteController.class).withPropertyValues(
                    "spring.datasource.url=jdbc:postgresql://127.0.0.1:1/test",
                    "spring.datasource.hikari.connection-timeout=250",
                    "idempotency.jdbc.initialize-schema=" + initialize)))
                    .as("initialize-schema=" + initialize)
                    .hasMessageContaining("idempotencySchemaInitializer")
                    .hasStackTraceContaining("could not connect to the database of the idempotency table")
                    .hasRootCauseInstanceOf(java.net.ConnectException.class);
        }
    }
}
