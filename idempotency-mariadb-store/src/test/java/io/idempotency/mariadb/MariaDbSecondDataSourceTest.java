package io.idempotency.mariadb;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StoredResponse;
import io.idempotency.spring.IdempotencyAutoConfiguration;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIf;
import org.springframework.beans.factory.annotation.Qualifier;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.Primary;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.transaction.PlatformTransactionManager;

import javax.sql.DataSource;
import java.util.List;
import java.util.UUID;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The starter with the MariaDB store on a DataSource other than the primary one, as it is with the PostgreSQL store:
 * the checks and the transactions' isolation level concern the store's DataSource, not the primary one.
 */
@EnabledIf("io.idempotency.mariadb.TestMariaDb#available")
class MariaDbSecondDataSourceTest {

    /**
     * The primary DataSource runs at READ COMMITTED; the store's, the only one with a transaction manager, at InnoDB's
     * default, REPEATABLE READ. The starter accepts that transaction manager for the store and its transactions ask
     * for READ COMMITTED, so a request is claimed, run and replayed.
     */
    @Test
    void aStoreOnTheDataSourceOfTheTransactionManagerButNotThePrimaryOneClaimsAtReadCommitted() {
        new ApplicationContextRunner().withConfiguration(AutoConfigurations.of(IdempotencyAutoConfiguration.class))
                .withUserConfiguration(StoreOnSecondDataSource.class)
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    IdempotencyEngine engine = context.getBean(IdempotencyEngine.class);
                    ScopedKey key = new ScopedKey("", "POST /orders", UUID.randomUUID().toString());
                    StoredResponse created = new StoredResponse(201, List.of(), "created".getBytes());
                    IdempotencyEngine.Start first = engine.start(key, "a".repeat(64));
                    assertThat(first).isInstanceOf(IdempotencyEngine.Proceed.class);
                    ((IdempotencyEngine.Proceed) first).execution().finish(created);
                    assertThat(engine.start(key, "a".repeat(64))).isEqualTo(new IdempotencyEngine.Replay(created));
                });
    }

    @Configuration(proxyBeanMethods = false)
    static class StoreOnSecondDataSource {

        @Bean(destroyMethod = "close")
        @Primary
        HikariDataSource reporting() {
            return TestMariaDb.newDatabase().dataSource(2,
                    config -> config.setTransactionIsolation("TRANSACTION_READ_COMMITTED"));
        }

        @Bean(destroyMethod = "close")
        HikariDataSource orders() {
            HikariDataSource dataSource = TestMariaDb.newDatabase().dataSource(4);
            assertThat(new JdbcTemplate(dataSource).queryForObject("SELECT @@tx_isolation", String.class))
                    .isEqualTo("REPEATABLE-READ");
            return dataSource;
        }

        @Bean
        PlatformTransactionManager transactionManager(@Qualifier("orders") DataSource orders) {
            return new DataSourceTransactionManager(orders);
        }

        @Bean
        IdempotencyStore idempotencyStore(@Qualifier("orders") DataSource orders) {
            new JdbcTemplate(orders).execute(MariaDbIdempotencyStore.schema("idempotency_keys"));
            return new MariaDbIdempotencyStore(orders, "idempotency_keys");
        }
    }
}
