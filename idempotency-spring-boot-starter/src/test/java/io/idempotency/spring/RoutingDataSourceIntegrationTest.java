package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.test.context.runner.WebApplicationContextRunner;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.jdbc.datasource.LazyConnectionDataSourceProxy;
import org.springframework.jdbc.datasource.lookup.AbstractRoutingDataSource;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;

import javax.sql.DataSource;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * An application whose DataSource routes each connection to one of several databases (Spring's
 * {@code AbstractRoutingDataSource}): by tenant, a database or schema each, or read-only transactions to a replica.
 */
@ExtendWith(OutputCaptureExtension.class)
class RoutingDataSourceIntegrationTest {

    private static final TestPostgres.Database FIRST = TestDatabases.withOrders();
    private static final TestPostgres.Database SECOND = TestDatabases.withOrders();
    /** Shared by every context the tests start, as a pool outlives none of them. */
    private static final HikariDataSource FIRST_POOL = FIRST.dataSource(3);
    private static final HikariDataSource SECOND_POOL = SECOND.dataSource(3);
    private static final ThreadLocal<String> TENANT = new ThreadLocal<>();
    private static final String WARNING = "routes each connection to one of several DataSources";

    @AfterAll
    static void closePools() {
        FIRST_POOL.close();
        SECOND_POOL.close();
    }

    private final WebApplicationContextRunner runner = TestDatabases.contextRunner()
            .withUserConfiguration(SyncController.class);

    /**
     * The records are kept apart by the routing, but what the instance keeps in memory (the answers, the requests
     * running) is looked up by caller, scope and key alone: where the routing is by tenant and the callers are named by
     * the principal alone, a request of one tenant could be answered with another's answer, its own work never done.
     * The start says so, and what to do; not once the callers are the application's own.
     */
    @Test
    void aStoreOnARoutingDataSourceIsWarnedAboutWhileCallersAreNamedByThePrincipalAlone(CapturedOutput output) {
        runner.withUserConfiguration(TenantRouting.class).run(context -> assertThat(context).hasNotFailed());
        assertThat(output).contains(WARNING, "CallerResolver that names the tenant");
        int warned = output.toString().length();

        runner.withUserConfiguration(TenantRouting.class, TenantCallers.class)
                .run(context -> assertThat(context).hasNotFailed());
        runner.withUserConfiguration(LazyPool.class).run(context -> assertThat(context).hasNotFailed());
        assertThat(output.toString().substring(warned)).doesNotContain(WARNING);
    }

    /** A database per tenant, the tenant taken from a thread-local; the first database outside any request. */
    @Configuration(proxyBeanMethods = false)
    static class TenantRouting {
        @Bean
        DataSource dataSource() {
            AbstractRoutingDataSource routing = new AbstractRoutingDataSource() {
                @Override
                protected Object determineCurrentLookupKey() {
                    return TENANT.get();
                }
            };
            routing.setTargetDataSources(Map.of("first", FIRST_POOL, "second", SECOND_POOL));
            routing.setDefaultTargetDataSource(FIRST_POOL);
            routing.afterPropertiesSet();
            // as an application delays the connection to the moment a statement needs it
            return new LazyConnectionDataSourceProxy(routing);
        }
    }

    /** Callers named by tenant and principal. */
    @Configuration(proxyBeanMethods = false)
    static class TenantCallers {
        @Bean
        CallerResolver tenantCallers() {
            return request -> TENANT.get() + ":" + CallerResolver.PRINCIPAL.resolve(request);
        }
    }

    /** A pool behind a proxy, routing nowhere. */
    @Configuration(proxyBeanMethods = false)
    static class LazyPool {
        @Bean
        DataSource dataSource() {
            return new LazyConnectionDataSourceProxy(FIRST_POOL);
        }
    }

    @RestController
    static class SyncController {
        @PostMapping("/sync")
        @Idempotent
        public String sync() {
            return "synced";
        }
    }
}
