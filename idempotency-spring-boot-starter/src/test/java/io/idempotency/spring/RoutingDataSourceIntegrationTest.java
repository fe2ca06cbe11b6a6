package io.idempotency.spring;

import com.zaxxer.hikari.HikariDataSource;
import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import jakarta.servlet.FilterChain;
import jakarta.servlet.ServletException;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.test.context.runner.WebApplicationContextRunner;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.boot.web.server.context.WebServerApplicationContext;
import org.springframework.boot.web.servlet.FilterRegistrationBean;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.Import;
import org.springframework.core.Ordered;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.jdbc.datasource.LazyConnectionDataSourceProxy;
import org.springframework.jdbc.datasource.lookup.AbstractRoutingDataSource;
import org.springframework.transaction.annotation.Transactional;
import org.springframework.transaction.support.TransactionSynchronizationManager;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.filter.OncePerRequestFilter;

import javax.sql.DataSource;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.Map;
import java.util.UUID;

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
    private static final HttpClient HTTP = HttpClient.newHttpClient();
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

    /**
     * Read-only transactions sent to a replica (the second database) by the read-only flag, which Spring sets once the
     * transaction has begun, so the connection is taken when the first statement needs it: the claim runs in the
     * request's transaction, which is not read-only, and a {@code @Transactional(readOnly = true)} handler joins it
     * as it is, so the claim, the handler's reads and writes and the stored answer all go to the primary, and so does
     * the retry's read of the record.
     */
    @Test
    void aReadOnlyHandlerOfAReadReplicaSplitClaimsReadsAndWritesOnThePrimary() throws Exception {
        try (ConfigurableApplicationContext application = start(ReadReplicaApp.class)) {
            String key = UUID.randomUUID().toString();

            HttpResponse<String> first = post(application, "/read-only-sync", key, null);
            HttpResponse<String> retry = post(application, "/read-only-sync", key, null);

            assertThat(post(application, "/read-only-lookup", null, null).body())
                    .as("a read-only transaction of its own").isEqualTo("read second");
            assertThat(first.statusCode()).as(first.body()).isEqualTo(200);
            assertThat(first.body()).startsWith("read first, order ");
            assertThat(retry.headers().firstValue("Idempotent-Replayed")).hasValue("true");
            assertThat(retry.body()).isEqualTo(first.body());
            assertThat(TestDatabases.keyRows(FIRST, key)).isEqualTo(1);
            assertThat(TestDatabases.rows(FIRST, "read-only")).isEqualTo(1);
            assertThat(TestDatabases.rows(SECOND, "read-only")).isZero();
        }
    }

    /**
     * A database per tenant, with callers named by tenant: the second tenant's request under the key, caller name and
     * payload of the first tenant's runs, and is kept in its own database, and each tenant's retry is answered with its
     * own answer. (With callers named by the principal alone, the second was answered from memory with the first's.)
     */
    @Test
    void callersNamedByTenantKeepTheTenantsRequestsApart() throws Exception {
        SECOND.queryString(io.idempotency.jdbc.IdempotencySchema.postgresql("idempotency_keys"));
        try (ConfigurableApplicationContext application = start(TenantApp.class)) {
            String key = UUID.randomUUID().toString();

            HttpResponse<String> first = post(application, "/tenant-sync", key, "first");
            HttpResponse<String> second = post(application, "/tenant-sync", key, "second");
            HttpResponse<String> secondRetry = post(application, "/tenant-sync", key, "second");
            HttpResponse<String> firstRetry = post(application, "/tenant-sync", key, "first");

            assertThat(first.body()).startsWith("first's order ");
            assertThat(second.headers().firstValue("Idempotent-Replayed")).isEmpty();
            assertThat(second.body()).startsWith("second's order ");
            assertThat(secondRetry.body()).isEqualTo(second.body());
            assertThat(firstRetry.body()).isEqualTo(first.body());
            assertThat(TestDatabases.keyRows(FIRST, key)).isEqualTo(1);
            assertThat(TestDatabases.keyRows(SECOND, key)).isEqualTo(1);
            assertThat(TestDatabases.rows(SECOND, "tenant")).isEqualTo(1);
        }
    }

    private static ConfigurableApplicationContext start(Class<?> application) {
        return new SpringApplicationBuilder(application).web(WebApplicationType.SERVLET)
                .properties("server.port=0", "idempotency.sweeper.enabled=false").run();
    }

    private static HttpResponse<String> post(ConfigurableApplicationContext application, String path, String key,
                                             String tenant) throws Exception {
        int port = ((WebServerApplicationContext) application).getWebServer().getPort();
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                .POST(HttpRequest.BodyPublishers.noBody());
        if (key != null) {
            request.header("Idempotency-Key", key);
        }
        if (tenant != null) {
            request.header("X-Tenant", tenant);
        }
        return HTTP.send(request.build(), HttpResponse.BodyHandlers.ofString());
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

    /** Read-only transactions on the second database, all others on the first. */
    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(ReadOnlyController.class)
    static class ReadReplicaApp {
        @Bean
        DataSource dataSource() {
            AbstractRoutingDataSource routing = new AbstractRoutingDataSource() {
                @Override
                protected Object determineCurrentLookupKey() {
                    return TransactionSynchronizationManager.isCurrentTransactionReadOnly() ? "replica" : "primary";
                }
            };
            routing.setTargetDataSources(Map.of("primary", FIRST_POOL, "replica", SECOND_POOL));
            routing.setDefaultTargetDataSource(FIRST_POOL);
            routing.afterPropertiesSet();
            // the read-only flag is set after the transaction's begin has asked for a connection
            return new LazyConnectionDataSourceProxy(routing);
        }
    }

    @RestController
    static class ReadOnlyController {
        private final JdbcClient jdbc;

        ReadOnlyController(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        @PostMapping("/read-only-sync")
        @Idempotent
        @Transactional(readOnly = true)
        public String sync() {
            String database = jdbc.sql("select current_schema()").query(String.class).single();
            long order = jdbc.sql("insert into orders (note) values ('read-only') returning id").query(Long.class)
                    .single();
            return "read " + (database.equals(FIRST.schema()) ? "first" : "second") + ", order " + order;
        }

        /** Without {@code @Idempotent}: its own read-only transaction, routed to the replica. */
        @PostMapping("/read-only-lookup")
        @Transactional(readOnly = true)
        public String lookUp() {
            String database = jdbc.sql("select current_schema()").query(String.class).single();
            return "read " + (database.equals(FIRST.schema()) ? "first" : "second");
        }
    }

    /** A database per tenant, the tenant named by a header, and callers named by tenant. */
    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import({TenantRouting.class, TenantCallers.class, TenantController.class})
    static class TenantApp {
        @Bean
        FilterRegistrationBean<OncePerRequestFilter> tenantFilter() {
            FilterRegistrationBean<OncePerRequestFilter> registration = new FilterRegistrationBean<>(
                    new OncePerRequestFilter() {
                        @Override
                        protected void doFilterInternal(HttpServletRequest request, HttpServletResponse response,
                                                        FilterChain chain) throws ServletException, IOException {
                            TENANT.set(request.getHeader("X-Tenant"));
                            try {
                                chain.doFilter(request, response);
                            } finally {
                                TENANT.remove();
                            }
                        }
                    });
            registration.setOrder(Ordered.HIGHEST_PRECEDENCE);
            return registration;
        }
    }

    @RestController
    static class TenantController {
        private final JdbcClient jdbc;

        TenantController(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        @PostMapping("/tenant-sync")
        @Idempotent
        public String sync() {
            long order = jdbc.sql("insert into orders (note) values ('tenant') returning id").query(Long.class)
                    .single();
            return TENANT.get() + "'s order " + order;
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
