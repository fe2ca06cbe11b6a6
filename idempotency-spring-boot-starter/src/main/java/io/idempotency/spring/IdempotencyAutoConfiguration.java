package io.idempotency.spring;

import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.core.StoragePolicy;
import io.idempotency.core.Transactions;
import io.idempotency.jdbc.PostgresIdempotencyStore;
import io.idempotency.jdbc.SpringTransactions;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import org.springframework.beans.factory.InitializingBean;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.beans.factory.config.BeanDefinition;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.autoconfigure.condition.ConditionalOnWebApplication;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.boot.web.servlet.FilterRegistrationBean;
import org.springframework.context.ApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Role;
import org.springframework.transaction.PlatformTransactionManager;

import javax.sql.DataSource;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.HashSet;

/**
 * Auto-configuration of the idempotency starter for Spring MVC applications with a DataSource. Every bean backs off
 * when the application defines its own; {@code idempotency.enabled=false} switches everything off.
 */
@AutoConfiguration(afterName = {
        "org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration",
        "org.springframework.boot.jdbc.autoconfigure.DataSourceTransactionManagerAutoConfiguration",
        "org.springframework.boot.flyway.autoconfigure.FlywayAutoConfiguration"})
@ConditionalOnWebApplication(type = ConditionalOnWebApplication.Type.SERVLET)
@ConditionalOnClass({DataSource.class, PlatformTransactionManager.class})
@ConditionalOnBean({DataSource.class, PlatformTransactionManager.class})
@ConditionalOnProperty(prefix = "idempotency", name = "enabled", havingValue = "true", matchIfMissing = true)
@EnableConfigurationProperties(IdempotencyProperties.class)
@Role(BeanDefinition.ROLE_INFRASTRUCTURE)
public class IdempotencyAutoConfiguration {

    @Bean
    @ConditionalOnMissingBean
    public IdempotencyStore idempotencyStore(DataSource dataSource, IdempotencyProperties properties) {
        return new PostgresIdempotencyStore(dataSource, properties.getJdbc().getTableName());
    }

    @Bean
    @ConditionalOnProperty(prefix = "idempotency.jdbc", name = "initialize-schema", havingValue = "true",
            matchIfMissing = true)
    public InitializingBean idempotencySchemaInitializer(DataSource dataSource, IdempotencyProperties properties) {
        return () -> new IdempotencySchemaMigrator(dataSource, properties.getJdbc().getTableName()).migrate();
    }

    @Bean
    @ConditionalOnMissingBean
    public Transactions idempotencyTransactions(PlatformTransactionManager transactionManager, DataSource dataSource) {
        return new SpringTransactions(transactionManager, connectionsDefaultToReadCommitted(dataSource));
    }

    /** Asked once at startup, so that transactions need not set (and first query) the isolation level. */
    private static boolean connectionsDefaultToReadCommitted(DataSource dataSource) {
        try (Connection connection = dataSource.getConnection()) {
            return connection.getTransactionIsolation() == Connection.TRANSACTION_READ_COMMITTED;
        } catch (SQLException e) {
            return false; // set it on every transaction: always correct
        }
    }

    @Bean
    @ConditionalOnMissingBean
    public StoragePolicy idempotencyStoragePolicy() {
        return StoragePolicy.DEFAULT;
    }

    @Bean
    @ConditionalOnMissingBean
    public IdempotencyEngine idempotencyEngine(IdempotencyStore store, Transactions transactions,
                                               StoragePolicy storagePolicy, IdempotencyProperties properties) {
        return new IdempotencyEngine(store, transactions, storagePolicy, properties.getRetention().getTtl(),
                properties.getInFlightWait());
    }

    @Bean
    @ConditionalOnMissingBean
    public CallerResolver idempotencyCallerResolver() {
        return CallerResolver.PRINCIPAL;
    }

    @Bean
    @ConditionalOnMissingBean
    public ProblemResponses idempotencyProblemResponses(IdempotencyProperties properties) {
        return new ProblemResponses(properties.getProblemTypeBase());
    }

    @Bean
    @ConditionalOnMissingBean(name = "idempotencyFilterRegistration")
    public FilterRegistrationBean<IdempotencyFilter> idempotencyFilterRegistration(ProblemResponses problems,
                                                                                  IdempotencyProperties properties) {
        IdempotencyFilter filter = new IdempotencyFilter(problems,
                (int) Math.min(Integer.MAX_VALUE - 8, properties.getMaxRequestBodySize().toBytes()),
                properties.getMaxStoredBodySize().toBytes(), new HashSet<>(properties.getReplayedHeaders()));
        FilterRegistrationBean<IdempotencyFilter> registration = new FilterRegistrationBean<>(filter);
        registration.setName("idempotencyFilter");
        registration.setOrder(IdempotencyFilter.ORDER);
        return registration;
    }

    /**
     * The advisor is created early, while the auto-proxy creator looks for advisors, so it reaches the other beans
     * lazily: they are then created as ordinary, fully post-processed beans.
     */
    @Bean
    @Role(BeanDefinition.ROLE_INFRASTRUCTURE)
    public static IdempotentAdvisor idempotentAdvisor(ObjectProvider<IdempotencyEngine> engine,
                                                      ObjectProvider<CallerResolver> callerResolver,
                                                      ObjectProvider<ProblemResponses> problems,
                                                      ObjectProvider<IdempotencyProperties> properties,
                                                      ObjectProvider<StoragePolicy> storagePolicy) {
        return new IdempotentAdvisor(new LazyInterceptor(engine, callerResolver, problems, properties, storagePolicy));
    }

    @Bean
    static IdempotencyStartupChecks idempotencyStartupChecks(ApplicationContext context, DataSource dataSource,
                                                             PlatformTransactionManager transactionManager,
                                                             ObjectProvider<IdempotencyProperties> properties,
                                                             ObjectProvider<StoragePolicy> storagePolicy) {
        return new IdempotencyStartupChecks(context, dataSource, transactionManager, properties, storagePolicy);
    }

    /** Builds the real interceptor on first use, once the beans it needs exist. */
    private static final class LazyInterceptor implements org.aopalliance.intercept.MethodInterceptor {

        private final ObjectProvider<IdempotencyEngine> engine;
        private final ObjectProvider<CallerResolver> callerResolver;
        private final ObjectProvider<ProblemResponses> problems;
        private final ObjectProvider<IdempotencyProperties> properties;
        private final ObjectProvider<StoragePolicy> storagePolicy;
        private volatile IdempotentMethodInterceptor delegate;

        private LazyInterceptor(ObjectProvider<IdempotencyEngine> engine, ObjectProvider<CallerResolver> callerResolver,
                                ObjectProvider<ProblemResponses> problems,
                                ObjectProvider<IdempotencyProperties> properties,
                                ObjectProvider<StoragePolicy> storagePolicy) {
            this.engine = engine;
            this.callerResolver = callerResolver;
            this.problems = problems;
            this.properties = properties;
            this.storagePolicy = storagePolicy;
        }

        @Override
        public Object invoke(org.aopalliance.intercept.MethodInvocation invocation) throws Throwable {
            IdempotentMethodInterceptor interceptor = delegate;
            if (interceptor == null) {
                interceptor = new IdempotentMethodInterceptor(engine.getObject(), callerResolver.getObject(),
                        problems.getObject(), properties.getObject(), storagePolicy.getObject());
                delegate = interceptor;
            }
            return interceptor.invoke(invocation);
        }
    }
}
