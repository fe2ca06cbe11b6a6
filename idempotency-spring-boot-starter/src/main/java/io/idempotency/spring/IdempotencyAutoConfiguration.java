package io.idempotency.spring;

import io.idempotency.core.DownstreamKeys;
import io.idempotency.core.ExpiredRecordCleaner;
import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.core.IdempotencyTemplate;
import io.idempotency.core.ReplayCache;
import io.idempotency.core.StaleClaimResolver;
import io.idempotency.core.StaleClaimSweeper;
import io.idempotency.core.StoragePolicy;
import io.idempotency.core.Transactions;
import io.idempotency.jdbc.IdempotencySchema;
import io.idempotency.jdbc.JdbcIdempotencyStore;
import io.idempotency.jdbc.PartitionedPostgresIdempotencyStore;
import io.idempotency.jdbc.PostgresIdempotencyStore;
import io.idempotency.jdbc.PostgresPartitionMaintenance;
import io.idempotency.jdbc.ReadConnections;
import io.idempotency.jdbc.SpringTransactions;
import io.idempotency.jdbc.flyway.IdempotencySchemaMigrator;
import jakarta.servlet.ServletContext;
import org.slf4j.LoggerFactory;
import org.springframework.aop.config.AopConfigUtils;
import org.springframework.aot.AotDetector;
import org.springframework.beans.factory.BeanFactory;
import org.springframework.beans.factory.HierarchicalBeanFactory;
import org.springframework.beans.factory.ListableBeanFactory;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.beans.factory.config.BeanDefinition;
import org.springframework.beans.factory.config.BeanPostProcessor;
import org.springframework.beans.factory.support.BeanDefinitionRegistry;
import org.springframework.boot.LazyInitializationExcludeFilter;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionOutcome;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.autoconfigure.condition.ConditionalOnWebApplication;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.boot.context.properties.bind.Binder;
import org.springframework.boot.sql.init.dependency.DatabaseInitializationDependencyConfigurer;
import org.springframework.boot.sql.init.dependency.DependsOnDatabaseInitialization;
import org.springframework.boot.web.server.context.WebServerApplicationContext;
import org.springframework.boot.web.server.servlet.ServletWebServerFactory;
import org.springframework.boot.web.server.servlet.context.ServletWebServerInitializedEvent;
import org.springframework.boot.web.servlet.FilterRegistrationBean;
import org.springframework.context.ApplicationContext;
import org.springframework.context.ApplicationListener;
import org.springframework.context.EnvironmentAware;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Conditional;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.Import;
import org.springframework.context.annotation.ImportBeanDefinitionRegistrar;
import org.springframework.context.annotation.Role;
import org.springframework.context.event.ContextRefreshedEvent;
import org.springframework.core.Ordered;
import org.springframework.core.env.Environment;
import org.springframework.core.type.AnnotationMetadata;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.util.ClassUtils;
import org.springframework.util.unit.DataSize;
import org.springframework.web.accept.ApiVersionStrategy;
import org.springframework.web.context.WebApplicationContext;
import org.springframework.web.servlet.handler.MappedInterceptor;

import java.math.BigInteger;
import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.HashSet;
import java.util.Locale;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.function.Predicate;
import javax.sql.DataSource;

/**
 * Auto-configuration of the idempotency starter for applications with a DataSource: the store, the engine, the
 * programmatic {@link IdempotencyTemplate}, retention and the sweeper; and, in Spring MVC applications, the filter and
 * the {@code @Idempotent} advice. Every bean backs off when the application defines its own;
 * {@code idempotency.enabled=false} switches everything off.
 */
@AutoConfiguration(afterName = {
        "org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration",
        "org.springframework.boot.hibernate.autoconfigure.HibernateJpaAutoConfiguration",
        "org.springframework.boot.jdbc.autoconfigure.DataSourceTransactionManagerAutoConfiguration",
        "org.springframework.boot.flyway.autoconfigure.FlywayAutoConfiguration"})
@ConditionalOnClass({DataSource.class, PlatformTransactionManager.class})
@ConditionalOnBean({DataSource.class, PlatformTransactionManager.class})
@ConditionalOnProperty(prefix = "idempotency", name = "enabled", havingValue = "true", matchIfMissing = true)
@EnableConfigurationProperties(IdempotencyProperties.class)
@Import(DatabaseInitializationDependencyConfigurer.class) // orders the beans by the database initializers they need
@Role(BeanDefinition.ROLE_INFRASTRUCTURE)
public class IdempotencyAutoConfiguration {

    @Bean
    @ConditionalOnMissingBean
    public IdempotencyStore idempotencyStore(DataSource dataSource, IdempotencyProperties properties) {
        String table = properties.getJdbc().getTableName();
        return partitioned(properties)
                ? new PartitionedPostgresIdempotencyStore(dataSource, table)
                : new PostgresIdempotencyStore(dataSource, table);
    }

    /**
     * Under {@code spring.main.lazy-initialization=true} a bean is made when first asked for, and nothing asks for the
     * schema initializer (it only creates or checks the table) nor, before the first request, for the engine (whose
     * making checks the retention, the settings and the transaction manager against the store). Left lazy, the
     * table would be created by no one on an instance that neither cleans up nor sweeps, and every check the
     * documentation promises at startup would wait for the first request, and fail it. Static: read while bean
     * definitions are still being post-processed.
     */
    @Bean
    static LazyInitializationExcludeFilter idempotencyLazyInitializationExcludeFilter() {
        return LazyInitializationExcludeFilter.forBeanTypes(IdempotencySchemaInitializer.class,
                IdempotencyEngine.class);
    }

    /**
     * The table, created by the library's migration or, when the schema is managed elsewhere, checked (only for the
     * library's PostgreSQL store: any other store — the MariaDB one, or one the application brings — keeps its records
     * where it likes, and on a database other than PostgreSQL gets no table; a JDBC store of the library's checks the
     * table it is given itself). After the application's own database initialisers, which may be what creates it;
     * with the library's store, itself one of them, before what needs the database initialized (JPA, which may
     * validate an entity mapped to the table): {@link IdempotencySchemaInitializerDetector}.
     */
    @Bean
    IdempotencySchemaInitializer idempotencySchemaInitializer(ObjectProvider<DataSource> dataSource,
                                                              IdempotencyProperties properties,
                                                              IdempotencyStore store, Environment environment,
                                                              ListableBeanFactory beanFactory) {
        checkProcessedConditions(environment, beanFactory);
        checkSettingsOfAnAncestorsEngine(properties, beanFactory);
        if (partitioned(properties) && store instanceof PostgresIdempotencyStore
                && !(store instanceof PartitionedPostgresIdempotencyStore)) {
            // its claim is arbitrated by a unique index on the key, which a table partitioned by creation time cannot
            // have: PostgreSQL would refuse every claim, and every request be answered 503
            throw new IdempotencyConfigurationException("idempotency.retention.cleanup.mode=drop-partitions keeps the"
                    + " records in a table partitioned by creation time, but the application's IdempotencyStore is a "
                    + store.getClass().getName() + ", whose claims need a unique index on the key that a partitioned"
                    + " table cannot have: every claim would fail.", "Define the store as a"
                    + " PartitionedPostgresIdempotencyStore (with the same DataSource and table), or remove"
                    + " idempotency.retention.cleanup.mode.");
        }
        boolean librarysStore = store.getClass() == PostgresIdempotencyStore.class
                || store.getClass() == PartitionedPostgresIdempotencyStore.class;
        IdempotencySchemaInitializer.Mode mode = properties.getJdbc().isInitializeSchema()
                ? librarysStore ? IdempotencySchemaInitializer.Mode.MIGRATE
                        : IdempotencySchemaInitializer.Mode.MIGRATE_ON_POSTGRESQL
                : librarysStore ? IdempotencySchemaInitializer.Mode.VERIFY : IdempotencySchemaInitializer.Mode.NONE;
        return new IdempotencySchemaInitializer(new IdempotencySchemaMigrator(storeDataSource(store, dataSource),
                tableName(store, properties), partitioned(properties)), mode,
                store instanceof JdbcIdempotencyStore jdbcStore ? jdbcStore : null,
                properties.getMaxStoredBodySize().toBytes());
    }

    /**
     * Removal of expired records when cleanup is enabled; in partitioned mode also — on every instance, cleanup
     * enabled or not — the partitions made ahead, the first ones while this bean is initialised. Depends on the schema
     * initializer (when there is one) and on the application's own database initialisers (Flyway, Liquibase, SQL
     * scripts), so partitions are made for a table that exists.
     */
    @Bean
    @Conditional(RetentionSchedulerCondition.class)
    @DependsOnDatabaseInitialization
    RetentionScheduler idempotencyRetentionScheduler(IdempotencyStore store, ObjectProvider<DataSource> dataSource,
                                                     IdempotencyProperties properties,
                                                     ObjectProvider<IdempotencySchemaInitializer> schemaInitializer,
                                                     ObjectProvider<IdempotencyMeters> meters) {
        schemaInitializer.ifAvailable(initializer -> { }); // created first, so the table exists
        IdempotencyProperties.Cleanup cleanup = properties.getRetention().getCleanup();
        IdempotencyMeters counters = meters.getIfAvailable(() -> IdempotencyMeters.NONE);
        checkInterval(cleanup.getInterval(), "idempotency.retention.cleanup.interval");
        if (partitioned(properties)) {
            DataSource storeDataSource = storeDataSource(store, dataSource);
            if (!(store instanceof PostgresIdempotencyStore) && !new IdempotencySchemaMigrator(storeDataSource,
                    tableName(store, properties), true).onPostgreSQL()) {
                throw new IdempotencyConfigurationException("idempotency.retention.cleanup.mode=drop-partitions"
                        + " keeps the records in PostgreSQL partitions, but the application's IdempotencyStore"
                        + " keeps them in a database other than PostgreSQL.", "Remove"
                        + " idempotency.retention.cleanup.mode (the default, delete, asks the store to delete"
                        + " expired records), or keep the records in PostgreSQL.");
            }
            // partitions made elsewhere: the count kept ahead is not this application's to say (0 is as good as 7)
            int ahead = cleanup.isCreatePartitions() ? cleanup.getPartitionsAhead()
                    : Math.max(1, cleanup.getPartitionsAhead());
            // a detach waits for the requests in progress on the table (blocking none meanwhile) for up to an interval:
            // given up after the DDL lock timeout, a request longer than that left every detach pending; the run
            // creates the partitions due again after it, so they are still made an interval apart
            Duration ddlLockTimeout = PARTITION_DDL_LOCK_TIMEOUT;
            Duration detachWait = cleanup.getInterval().compareTo(ddlLockTimeout) > 0 ? cleanup.getInterval()
                    : ddlLockTimeout;
            return RetentionScheduler.partitioned(new PostgresPartitionMaintenance(storeDataSource,
                    tableName(store, properties), cleanup.getPartitionInterval(), ahead,
                    ddlLockTimeout, detachWait), cleanup.isCreatePartitions(), cleanup.isEnabled(),
                    properties.getRetention().getTtl(),
                    cleanup.getInterval(), counters);
        }
        return RetentionScheduler.deleting(new ExpiredRecordCleaner(store, cleanup.getBatchSize()),
                cleanup.getInterval(), counters);
    }

    /**
     * Under Spring AOT ({@code spring.aot.enabled}, a native image), whether the retention scheduler and the sweeper
     * exist was decided when the application was processed, while the store, the table and the rest of the settings
     * follow those it starts with. An instance whose settings decide otherwise would run half of each: a partitioned
     * table with no scheduler to make its partitions (every claim failing), or cleanup and sweeping it was told not
     * to do. It is refused instead.
     */
    static void checkProcessedConditions(Environment environment, ListableBeanFactory beanFactory) {
        if (!AotDetector.useGeneratedArtifacts()) {
            return;
        }
        checkProcessedCondition(RetentionSchedulerCondition.outcome(environment), beanFactory, RetentionScheduler.class,
                "idempotency.retention.cleanup.enabled and idempotency.retention.cleanup.mode");
        checkProcessedCondition(StaleClaimSweepSchedulerCondition.outcome(environment), beanFactory,
                StaleClaimSweepScheduler.class, "idempotency.sweeper.enabled");
    }

    /**
     * A context whose parent (or an ancestor of it) made the engine — a web child context of
     * {@code SpringApplicationBuilder}'s {@code parent(...)}, say — makes none of its own: the parent's serves its
     * requests, and keeps their records and replays their answers by the settings the parent made it with. A setting of
     * the engine's that this context says otherwise would be silently ignored: a TTL longer than the parent's, set to
     * cover a longer retry window, would let a retry after the parent's TTL run the request again. So it does not
     * start. The settings of this context's own beans (the header name, the methods, the filter's limits) may differ;
     * the retention must cover its retry window and lease as it would the engine's own.
     */
    static void checkSettingsOfAnAncestorsEngine(IdempotencyProperties properties, ListableBeanFactory beanFactory) {
        if (!(beanFactory instanceof HierarchicalBeanFactory context)
                || beanFactory.getBeanNamesForType(IdempotencyEngine.class, true, false).length > 0) {
            return; // an engine of its own
        }
        for (BeanFactory ancestor = context.getParentBeanFactory(); ancestor instanceof ListableBeanFactory factory;
             ancestor = factory instanceof HierarchicalBeanFactory h ? h.getParentBeanFactory() : null) {
            if (factory.getBeanNamesForType(IdempotencyEngine.class, true, false).length == 0) {
                continue;
            }
            String[] settings = factory.getBeanNamesForType(IdempotencyProperties.class, false, false);
            if (settings.length != 1) {
                return; // the engine was not made from the starter's settings
            }
            IdempotencyProperties engines = factory.getBean(settings[0], IdempotencyProperties.class);
            IdempotencyProperties.ReplayCache cache = properties.getReplayCache();
            IdempotencyProperties.ReplayCache enginesCache = engines.getReplayCache();
            sameAsTheEngines("idempotency.retention.ttl", properties.getRetention().getTtl(),
                    engines.getRetention().getTtl(), true);
            sameAsTheEngines("idempotency.in-flight-wait", properties.getInFlightWait(), engines.getInFlightWait(),
                    true);
            sameAsTheEngines("idempotency.max-waiting-duplicates", properties.getMaxWaitingDuplicates(),
                    engines.getMaxWaitingDuplicates(), true);
            sameAsTheEngines("idempotency.max-stored-body-size", properties.getMaxStoredBodySize(),
                    engines.getMaxStoredBodySize(), true);
            sameAsTheEngines("idempotency.replayed-headers",
                    IdempotencyFilter.storedHeaderNames(properties.getReplayedHeaders()),
                    IdempotencyFilter.storedHeaderNames(engines.getReplayedHeaders()), true);
            sameAsTheEngines("idempotency.downstream-key-secret", properties.getDownstreamKeySecret(),
                    engines.getDownstreamKeySecret(), false);
            sameAsTheEngines("idempotency.replay-cache.max-entries", cache.getMaxEntries(),
                    enginesCache.getMaxEntries(), true);
            sameAsTheEngines("idempotency.replay-cache.max-body-size", cache.getMaxBodySize(),
                    enginesCache.getMaxBodySize(), true);
            sameAsTheEngines("idempotency.replay-cache.max-total-size", cache.getMaxTotalSize(),
                    enginesCache.getMaxTotalSize(), true);
            sameAsTheEngines("idempotency.replay-cache.max-age", cache.getMaxAge(), enginesCache.getMaxAge(), true);
            sameAsTheEngines("idempotency.replay-cache.completed-keys", cache.getCompletedKeys(),
                    enginesCache.getCompletedKeys(), true);
            checkRetention(properties);
            return;
        }
    }

    /** @param shown whether the values may be named in the refusal (a secret's may not) */
    private static void sameAsTheEngines(String property, Object here, Object engines, boolean shown) {
        if (java.util.Objects.equals(here, engines)) {
            return;
        }
        throw new IdempotencyConfigurationException(property + (shown ? " (" + readable(here) + ")" : "")
                + " is set otherwise in this application context than in its parent" + (shown ? " ("
                + readable(engines) + ")" : "") + ", whose IdempotencyEngine this context uses: the engine was made"
                + " with the parent's settings, and would silently ignore this context's.", "Set " + property
                + " in the parent context (whose settings its child contexts inherit), or give it the same value in"
                + " both.");
    }

    private static void checkProcessedCondition(ConditionOutcome now, ListableBeanFactory beanFactory,
                                                Class<?> scheduler, String properties) {
        boolean processed = beanFactory.getBeanNamesForType(scheduler, true, false).length > 0;
        if (processed != now.isMatch()) {
            throw new IdempotencyConfigurationException("The application was processed ahead of time (Spring AOT)"
                    + " with settings under which it " + (processed ? "has a " : "has no ") + scheduler.getSimpleName()
                    + ", and starts with settings under which it would have " + (processed ? "none" : "one") + " ("
                    + now.getMessage() + "): " + properties + " are decided when the application is processed,"
                    + " the other settings when it starts.", "Process the application again with the " + properties
                    + " it runs with, or start it with those it was processed with.");
        }
    }

    /** A run every millisecond, back to back against the database, is no schedule anyone means to set. */
    static void checkInterval(Duration interval, String property) {
        positive(property, interval, "it is the time between two runs of work against the database");
    }

    /** How long partition maintenance's DDL waits for a lock before the run gives up on it. */
    static final Duration PARTITION_DDL_LOCK_TIMEOUT = Duration.ofSeconds(2);

    /**
     * What the partitions made ahead must outlast beyond two intervals: the schedule counts an interval from the end
     * of a run, so a run whose creation could not get its lock (a long claim, another instance detaching) ends up to
     * a DDL lock timeout later, and the creation of the run after it may wait as long before it succeeds; a second
     * more for the runs' own statements.
     */
    static final Duration PARTITIONS_AHEAD_MARGIN = PARTITION_DDL_LOCK_TIMEOUT.multipliedBy(2).plusSeconds(1);

    /**
     * Claims need a partition for the current time, and partitions are made only by the scheduled runs. So the
     * partitions made ahead must last until the run after the next has made more: a run that could not get its lock
     * is tried again only one interval after it ended ({@link #PARTITIONS_AHEAD_MARGIN}).
     */
    static void checkPartitionsAhead(IdempotencyProperties.Cleanup cleanup) {
        Duration ahead = cleanup.getPartitionInterval().multipliedBy(cleanup.getPartitionsAhead());
        Duration needed = cleanup.getInterval().multipliedBy(2).plus(PARTITIONS_AHEAD_MARGIN);
        if (ahead.compareTo(needed) >= 0) {
            return;
        }
        throw new IdempotencyConfigurationException("idempotency.retention.cleanup.partitions-ahead ("
                + cleanup.getPartitionsAhead() + ") times idempotency.retention.cleanup.partition-interval ("
                + readable(cleanup.getPartitionInterval()) + ") must be at least twice"
                + " idempotency.retention.cleanup.interval (" + readable(cleanup.getInterval()) + ") and "
                + PARTITIONS_AHEAD_MARGIN.toSeconds() + " seconds more: partitions are created by those runs, a run"
                + " that could not get its lock is tried again an interval after it ended, and a claim made when the"
                + " partitions made ahead have run out finds none to go into and fails.", "Keep more partitions"
                + " ahead, make them longer, or run the cleanup more often.");
    }

    /**
     * A claim looks its key up in every partition (the creation time, which partitions the table, cannot narrow the
     * search), and keeps a lock on each partition and each of its indexes until its transaction ends, which in the
     * default mode is the request's. Those locks take entries of the server's shared lock table: the more partitions,
     * the fewer concurrent requests exhaust it ({@link #MAX_PARTITIONS_KEPT}), and their claims (and the other
     * transactions of the whole server) then fail with "out of shared memory".
     */
    static void checkPartitionsKept(IdempotencyProperties.Retention retention) {
        IdempotencyProperties.Cleanup cleanup = retention.getCleanup();
        long intervalSeconds = cleanup.getPartitionInterval().getSeconds();
        long ttlSeconds = retention.getTtl().getSeconds() + (retention.getTtl().getNano() > 0 ? 1 : 0);
        // the partitions back to the TTL, the one of the present, and those ahead
        long kept = ttlSeconds / intervalSeconds + (ttlSeconds % intervalSeconds == 0 ? 0 : 1) + 1
                + cleanup.getPartitionsAhead();
        if (kept <= MAX_PARTITIONS_KEPT) {
            return;
        }
        throw new IdempotencyConfigurationException("idempotency.retention.ttl (" + readable(retention.getTtl())
                + ") in partitions of idempotency.retention.cleanup.partition-interval ("
                + readable(cleanup.getPartitionInterval()) + "), with the partition of the present and "
                + cleanup.getPartitionsAhead() + " ahead (idempotency.retention.cleanup.partitions-ahead), keeps "
                + kept + " partitions, more than " + MAX_PARTITIONS_KEPT + ": a claim looks its key up in every"
                + " partition and holds a lock on each one and its indexes until its transaction ends, so concurrent"
                + " requests would fill PostgreSQL's shared lock table (sized by max_locks_per_transaction and"
                + " max_connections; on a server of default settings, 100 partitions fill it at 90 requests, 720 at"
                + " 12), and claims, with the server's other transactions, would fail with \"out of shared"
                + " memory\".", "Make idempotency.retention.cleanup.partition-interval longer (a day, or a week"
                + " for a TTL of months: a partition is dropped once all of it has expired, so records are kept up to"
                + " one interval longer), or the TTL shorter.");
    }

    /**
     * Counters of the background work, when Micrometer is on the class path and the application has a registry. With
     * several registries they are registered as Spring Boot binds its meters: in the composite registries when there
     * are any (Spring Boot Actuator makes a primary one over the others, which each count through it, once), else in
     * every registry.
     */
    @Configuration(proxyBeanMethods = false)
    @ConditionalOnClass(name = "io.micrometer.core.instrument.MeterRegistry")
    static class Metrics {

        @Bean
        @ConditionalOnMissingBean
        IdempotencyMeters idempotencyMeters(ObjectProvider<io.micrometer.core.instrument.MeterRegistry> registry) {
            List<io.micrometer.core.instrument.MeterRegistry> registries = registry.orderedStream().toList();
            List<io.micrometer.core.instrument.MeterRegistry> composites = registries.stream()
                    .filter(io.micrometer.core.instrument.composite.CompositeMeterRegistry.class::isInstance).toList();
            List<io.micrometer.core.instrument.MeterRegistry> counting = composites.isEmpty() ? registries : composites;
            if (counting.isEmpty()) {
                return IdempotencyMeters.NONE;
            }
            return new MicrometerIdempotencyMeters(counting.size() == 1 ? counting.get(0)
                    : new io.micrometer.core.instrument.composite.CompositeMeterRegistry(
                            io.micrometer.core.instrument.Clock.SYSTEM, counting));
        }
    }

    /**
     * The table the library creates (or checks) and keeps partitions of: the one the store claims in. A PostgreSQL
     * store the application defines names its own, which {@code idempotency.jdbc.table-name} left at its default
     * follows; set to another table, the two contradict each other, and one of them would be a table no claim uses
     * while the other fails every claim, so the application does not start.
     */
    private static String tableName(IdempotencyStore store, IdempotencyProperties properties) {
        String configured = properties.getJdbc().getTableName();
        String storesTable = store instanceof JdbcIdempotencyStore jdbcStore ? jdbcStore.tableName() : null;
        if (storesTable == null || storesTable.equalsIgnoreCase(configured)) {
            return configured;
        }
        boolean createdByTheLibrary = store instanceof PostgresIdempotencyStore;
        if (!IdempotencySchema.DEFAULT_TABLE_NAME.equals(configured)) {
            throw new IdempotencyConfigurationException("idempotency.jdbc.table-name (" + configured + ") names"
                    + " another table than the application's IdempotencyStore, which keeps its records in "
                    + storesTable + (createdByTheLibrary
                    ? ": the library would create (or check) and clean up a table no claim uses."
                    : ": the setting says the application uses a table it does not use."),
                    "Give the store and idempotency.jdbc.table-name the same table, or remove"
                    + " idempotency.jdbc.table-name (the store's table is then the one "
                    + (createdByTheLibrary ? "created and checked)." : "checked)."));
        }
        // another store's table is made by the application's migrations and checked by the store: the property's
        // name is then only what the library's own migration would use, which does not run for it
        return createdByTheLibrary ? storesTable : configured;
    }

    /**
     * The DataSource of the table: the JDBC store's (also one the application defined, on a DataSource that need not be
     * the primary one), else the application's.
     */
    private static DataSource storeDataSource(IdempotencyStore store, ObjectProvider<DataSource> dataSource) {
        return store instanceof JdbcIdempotencyStore jdbcStore ? jdbcStore.dataSource() : dataSource.getObject();
    }

    private static boolean partitioned(IdempotencyProperties properties) {
        return properties.getRetention().getCleanup().getMode() == IdempotencyProperties.CleanupMode.DROP_PARTITIONS;
    }

    /**
     * The isolation level the connections of the store's DataSource default to, asked once at startup for the
     * transactions the starter defines and for the startup checks; {@code level} is null when the database could not
     * be asked.
     */
    record StoreIsolation(DataSource dataSource, Integer level, boolean postgres) {
    }

    /** Defined with the starter's transactions only: an application's own {@code Transactions} sets what it sets. */
    @Bean
    @ConditionalOnMissingBean(Transactions.class)
    StoreIsolation idempotencyStoreIsolation(IdempotencyStore store, ObjectProvider<DataSource> dataSources) {
        DataSource dataSource = storeDataSource(store, dataSources);
        return new StoreIsolation(dataSource, defaultIsolation(dataSource), store instanceof PostgresIdempotencyStore);
    }

    @Bean
    @ConditionalOnMissingBean
    public Transactions idempotencyTransactions(PlatformTransactionManager transactionManager,
                                                StoreIsolation isolation) {
        IdempotencyStartupChecks.checkTransactionManager(transactionManager, isolation.dataSource());
        Boolean readCommitted = isolation.level() == null ? null
                : isolation.level() == Connection.TRANSACTION_READ_COMMITTED;
        // PostgreSQL: READ COMMITTED asked for inside each transaction, never as a session setting (SpringTransactions)
        SpringTransactions transactions = new SpringTransactions(transactionManager,
                Boolean.TRUE.equals(readCommitted), entityManagerConnectionCheck(),
                isolation.postgres() ? PostgresIdempotencyStore.READ_COMMITTED : null);
        if (Boolean.FALSE.equals(readCommitted)) {
            // each transaction asks for READ COMMITTED: the transaction manager must be able to set it (not asked when
            // the database could not be reached just now: the probe would only wait for it as long again)
            IdempotencyStartupChecks.checkReadCommittedCanBeSet(transactions, transactionManager,
                    isolation.dataSource());
        }
        return transactions;
    }

    /**
     * Whether a resource bound to the thread outside a transaction holds no connection: Hibernate's open-in-view
     * EntityManager can tell; anything else is taken to hold one (a replay is then claimed rather than read).
     */
    private static Predicate<Object> entityManagerConnectionCheck() {
        ClassLoader classLoader = IdempotencyAutoConfiguration.class.getClassLoader();
        if (ClassUtils.isPresent("org.hibernate.engine.spi.SharedSessionContractImplementor", classLoader)
                && ClassUtils.isPresent("org.springframework.orm.jpa.EntityManagerHolder", classLoader)) {
            return HibernateSessions::holdsNoConnection;
        }
        return resource -> false;
    }

    /** The longest in-flight wait: PostgreSQL's {@code lock_timeout} takes at most 2^31 - 1 milliseconds. */
    static final Duration MAX_IN_FLIGHT_WAIT = IdempotencyEngine.MAX_WAIT;

    /** The most partitions kept ahead: each one is created at startup and probed by every claim. */
    static final int MAX_PARTITIONS_AHEAD = 1000;

    /**
     * The most partitions the TTL and the partitions ahead may keep (the defaults keep 38): a claim's look-up locks
     * each of them and its three indexes for the rest of its transaction, in PostgreSQL's shared lock table. On a
     * server of default settings (max_locks_per_transaction 64, max_connections 100), 100 partitions held 70
     * concurrent claims and failed at 90; 250 held 25 and failed at 35; 720 (hourly for 30 days) held 8 and failed
     * at 12.
     */
    static final int MAX_PARTITIONS_KEPT = 100;

    /**
     * The longest TTL, far below what PostgreSQL can add to now(): its intervals end at about 292,000 years, and
     * every claim past that fails with "interval out of range".
     */
    static final Duration MAX_TTL = Duration.ofDays(36_500_000);

    /**
     * Request headers that HTTP, cookies, browsers, proxies or tracing define, in lower case: none can carry a client's
     * key for one request. Their value is shared by many requests (a preference, a client's address), new on every
     * attempt (a trace, a signature), or one a browser sets and lets no page set (the Fetch standard's forbidden
     * names).
     */
    private static final Set<String> HEADERS_OF_OTHER_MEANING = Set.of("accept", "accept-charset", "accept-encoding",
            "accept-language", "accept-signature", "access-control-request-headers", "access-control-request-method",
            "authorization", "b3", "baggage", "cache-control", "cdn-loop", "cf-connecting-ip", "cf-ray", "connection",
            "content-digest", "content-encoding", "content-language", "content-length", "content-location",
            "content-md5", "content-range", "content-type", "cookie", "cookie2", "date", "digest", "dnt", "early-data",
            "expect", "forwarded", "from", "host", "if-match", "if-modified-since", "if-none-match", "if-range",
            "if-unmodified-since", "keep-alive", "max-forwards", "origin", "pragma", "prefer", "priority", "range",
            "referer", "repr-digest", "sentry-trace", "signature", "signature-input", "te", "traceparent",
            "tracestate", "trailer", "transfer-encoding", "true-client-ip", "uber-trace-id", "upgrade",
            "upgrade-insecure-requests", "user-agent", "via", "want-content-digest", "want-digest",
            "want-repr-digest", "x-amzn-trace-id", "x-cloud-trace-context", "x-forwarded-client-cert",
            "x-forwarded-for", "x-forwarded-host", "x-forwarded-port", "x-forwarded-prefix", "x-forwarded-proto",
            "x-forwarded-server", "x-forwarded-ssl", "x-http-method", "x-http-method-override", "x-method-override",
            "x-real-ip");

    /**
     * Beginnings of request header names of the same kind: those a browser reserves to itself ({@code sec-},
     * {@code proxy-}), and the families of Zipkin's, Datadog's and Envoy's tracing and proxy headers.
     */
    private static final List<String> HEADER_PREFIXES_OF_OTHER_MEANING = List.of("sec-", "proxy-", "x-b3-",
            "x-datadog-", "x-envoy-");

    /**
     * Request identifiers that proxies and gateways commonly set, or replace, on the way in (Envoy and Istio, nginx,
     * Kong, Heroku's router: a new value for each request they forward, or one for a request that came without): a
     * client's own key under such a name works only where nothing in front touches it. Warned of, not refused: some
     * APIs use a request identifier as their key on purpose.
     */
    private static final Set<String> HEADERS_PROXIES_MAY_SET = Set.of("x-request-id", "x-correlation-id",
            "request-id", "correlation-id");

    /** The largest request body cap: the body is held in one array, and a JVM may refuse a few bytes more. */
    static final int MAX_REQUEST_BODY_SIZE = Integer.MAX_VALUE - 8;

    /** The most completed requests an instance may be set to remember: 250 MB of memory. */
    static final int MAX_COMPLETED_KEYS = 100_000_000;

    /**
     * Settings that would otherwise stop the application with a bare exception from deep inside a bean, or start it
     * in a state that cannot work (every body refused, a sweep that never resolves anything): refused here, by name.
     */
    static void checkSettings(IdempotencyProperties properties) {
        String header = properties.getHeaderName();
        if (header == null || header.isEmpty() || !header.chars().allMatch(IdempotencyAutoConfiguration::isTokenChar)) {
            refuse("idempotency.header-name", "\"" + header + "\"", "an HTTP header name (letters, digits and"
                    + " !#$%&'*+-.^_`|~)");
        }
        String lowerCase = header.toLowerCase(Locale.ROOT);
        if (HEADERS_OF_OTHER_MEANING.contains(lowerCase)
                || HEADER_PREFIXES_OF_OTHER_MEANING.stream().anyMatch(lowerCase::startsWith)) {
            // its value is the same for every request of a client (Content-Type, Authorization) or set by whatever
            // the request passes through: all of them would share one key, and each be refused or replayed another's;
            // or it is new on every attempt (a trace, a signature), and a retry would run the request again
            refuse("idempotency.header-name", "\"" + header + "\"", "a header of the client's own for the key, such"
                    + " as Idempotency-Key: " + header + " already means something else in HTTP, and its value would"
                    + " be one key for many requests, or a new key on every retry");
        }
        if (HEADERS_PROXIES_MAY_SET.contains(lowerCase)) {
            LoggerFactory.getLogger(IdempotencyAutoConfiguration.class).warn("idempotency.header-name is {}, a request"
                    + " identifier that proxies and gateways (Envoy and Istio, nginx, Kong, Heroku's router) often set"
                    + " or replace: behind one, a retry may arrive with a new value and run again, and a request sent"
                    + " without a key may get one and not be refused. Keep it only if everything in front of the"
                    + " application passes the client's value on untouched; Idempotency-Key is the usual name.",
                    header);
        }
        for (String replayed : properties.getReplayedHeaders()) {
            if (replayed == null || replayed.isEmpty()) {
                continue; // a trailing comma: names nothing, and matches no header
            }
            if (!replayed.chars().allMatch(IdempotencyAutoConfiguration::isTokenChar)) {
                // a name no header has (a list written with ';', say) is silently never replayed, Content-Type too
                refuse("idempotency.replayed-headers", properties.getReplayedHeaders(), "HTTP header names (letters,"
                        + " digits and !#$%&'*+-.^_`|~, separated by commas); \"" + replayed + "\" is not an HTTP"
                        + " header name");
            }
        }
        String unknownMethods = IdempotentEndpoint.unknownMethods(properties.getMethods());
        if (unknownMethods != null) {
            // a misspelt method would leave the requests meant for it unprotected, which nothing else notices
            refuse("idempotency.methods", properties.getMethods(), "registered HTTP methods (e.g. POST, PATCH, PUT,"
                    + " DELETE); " + unknownMethods + " is none");
        }
        String typeBase = properties.getProblemTypeBase();
        java.net.URI type = null;
        try {
            // the type of every problem answer is the base and a problem's name: it must be a URI (RFC 9457)
            type = java.net.URI.create(typeBase + "idempotency-key-missing");
        } catch (IllegalArgumentException e) {
            refuse("idempotency.problem-type-base", typeBase, "the start of a URI, such as"
                    + " https://docs.example.com/problems/ (each problem's name is appended to it)");
        }
        if (!type.isAbsolute() && !type.getRawSchemeSpecificPart().startsWith("/")) {
            // a relative path is resolved against the request's URI: one error would have a type per endpoint
            refuse("idempotency.problem-type-base", "\"" + typeBase + "\"", "an absolute URI, such as"
                    + " https://docs.example.com/problems/, or a path from the root, such as /problems/: a client"
                    + " resolves a relative type against the request's URI, and each endpoint's would differ");
        }
        positive("idempotency.in-flight-wait", properties.getInFlightWait(), null);
        if (properties.getInFlightWait().compareTo(MAX_IN_FLIGHT_WAIT) > 0) {
            // a claim waits through PostgreSQL's lock_timeout, which refuses more: every claim would fail
            refuse("idempotency.in-flight-wait", properties.getInFlightWait(), "at most 24d: a claim waits with"
                    + " PostgreSQL's lock_timeout, which takes no more than about 24.8 days");
        }
        if (properties.getMaxWaitingDuplicates() <= 0) {
            refuse("idempotency.max-waiting-duplicates", properties.getMaxWaitingDuplicates(), "at least 1: the"
                    + " number of duplicates that may wait in one instance for the request holding their key");
        }
        // else 409 answers would tell clients to retry in a second whatever the setting says
        positive("idempotency.retry-after", properties.getRetryAfter(), "it is the time 409 answers tell a client"
                + " to wait before it retries");
        checkTableName(properties.getJdbc().getTableName(), properties.getJdbc().isInitializeSchema());
        if (properties.getMaxRequestBodySize().toBytes() <= 0) {
            refuse("idempotency.max-request-body-size", properties.getMaxRequestBodySize(), "positive");
        }
        if (properties.getMaxRequestBodySize().toBytes() > MAX_REQUEST_BODY_SIZE) {
            refuse("idempotency.max-request-body-size", properties.getMaxRequestBodySize(), "at most "
                    + MAX_REQUEST_BODY_SIZE + "B: the body is held in one array while it is fingerprinted");
        }
        if (properties.getMaxStoredBodySize().toBytes() <= 0) {
            refuse("idempotency.max-stored-body-size", properties.getMaxStoredBodySize(), "positive");
        }
        if (properties.getDownstreamKeySecret() == null || properties.getDownstreamKeySecret().isEmpty()) {
            refuse("idempotency.downstream-key-secret", "\"\"", "a secret of at least one character");
        }
        if (properties.getRetention().getTtl().compareTo(MAX_TTL) > 0) {
            // a record expires at now() plus the TTL on the database clock: beyond it, every claim would fail
            refuse("idempotency.retention.ttl", properties.getRetention().getTtl(), "at most 36500000d (about 100,000"
                    + " years): a record's expiry must be a time PostgreSQL can hold");
        }
        IdempotencyProperties.ReplayCache cache = properties.getReplayCache();
        if (cache.getMaxEntries() < 0) {
            refuse("idempotency.replay-cache.max-entries", cache.getMaxEntries(), "0 (no cache) or more");
        }
        if (cache.getCompletedKeys() < 0 || cache.getCompletedKeys() > MAX_COMPLETED_KEYS) {
            // each remembered request takes 2.5 bytes, allocated at startup: a mistyped size fails here, not as an
            // OutOfMemoryError
            refuse("idempotency.replay-cache.completed-keys", cache.getCompletedKeys(), "0 (none remembered) to "
                    + MAX_COMPLETED_KEYS + " (250 MB)");
        }
        if (cache.getMaxBodySize().toBytes() < 0) {
            refuse("idempotency.replay-cache.max-body-size", cache.getMaxBodySize(), "0 or more");
        }
        if (cache.getMaxTotalSize().toBytes() < 0) {
            refuse("idempotency.replay-cache.max-total-size", cache.getMaxTotalSize(), "0 (no cache) or more");
        }
        if (cache.getMaxAge().isNegative()) {
            refuse("idempotency.replay-cache.max-age", cache.getMaxAge(), "0 or more");
        }
        IdempotencyProperties.Cleanup cleanup = properties.getRetention().getCleanup();
        if (cleanup.getBatchSize() < 1) {
            refuse("idempotency.retention.cleanup.batch-size", cleanup.getBatchSize(), "1 or more");
        }
        if (cleanup.getPartitionsAhead() < 0 || cleanup.getPartitionsAhead() > MAX_PARTITIONS_AHEAD) {
            // a slip of the keyboard (20000) would have the start create partitions for many minutes, and every
            // claim look its key up in each of them
            refuse("idempotency.retention.cleanup.partitions-ahead", cleanup.getPartitionsAhead(), "between 0 and "
                    + MAX_PARTITIONS_AHEAD + " (make partition-interval longer to keep more time ahead)");
        }
        if (cleanup.getPartitionInterval().getSeconds() < 1 || cleanup.getPartitionInterval().getNano() != 0) {
            // partition bounds are whole seconds: a fraction would make ranges overlap
            refuse("idempotency.retention.cleanup.partition-interval", cleanup.getPartitionInterval(),
                    "a whole number of seconds, at least one");
        }
        if (properties.getSweeper().getBatchSize() < 1) {
            refuse("idempotency.sweeper.batch-size", properties.getSweeper().getBatchSize(), "1 or more");
        }
        if (partitioned(properties) && cleanup.isCreatePartitions()) {
            // the settings alone decide it: refused before the partitioned table is made, which a start in the
            // default mode would then refuse in its turn
            checkInterval(cleanup.getInterval(), "idempotency.retention.cleanup.interval");
            checkPartitionsAhead(cleanup);
            checkPartitionsKept(properties.getRetention());
        }
    }

    /**
     * The name is spliced into SQL and, when the library migrates the table, names its own migration history: the
     * store and migrator check it. A table the application's own migrations make has no history of the library's.
     */
    private static void checkTableName(String table, boolean migrated) {
        try {
            IdempotencySchema.checkTableName(table);
        } catch (IllegalArgumentException e) {
            if (table != null && IdempotencySchema.isReservedWord(table)) {
                refuse("idempotency.jdbc.table-name", "\"" + table + "\"", "a name PostgreSQL does not reserve as a key"
                        + " word: it is written unquoted in SQL, where a reserved word such as user or order names no"
                        + " table");
            }
            if (table != null && table.contains(".")) {
                refuse("idempotency.jdbc.table-name", "\"" + table + "\"", "a table name without a schema: the table"
                        + " is in the connection's default schema (the first on its search path); to keep it in"
                        + " another, make that one the default (PostgreSQL: currentSchema in the JDBC URL, or the"
                        + " role's search_path; MariaDB: the database the JDBC URL names), or give the store a"
                        + " DataSource of its own whose default it is");
            }
            if (table != null && (table.contains("\"") || table.contains("`"))) {
                refuse("idempotency.jdbc.table-name", "\"" + table + "\"", "a name without quotes: it is written"
                        + " unquoted in SQL (where PostgreSQL folds it to lower case: ApiRequests names apirequests)");
            }
            refuse("idempotency.jdbc.table-name", "\"" + table + "\"", "a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*)"
                    + " of at most " + IdempotencySchema.MAX_TABLE_NAME_LENGTH + " characters, so that the index and"
                    + " partition names made from it fit PostgreSQL's 63");
        }
        if (!migrated) {
            return;
        }
        try {
            IdempotencySchemaMigrator.historyTable(table);
        } catch (IllegalArgumentException e) {
            refuse("idempotency.jdbc.table-name", "\"" + table + "\"", "another name: its migration history would be "
                    + IdempotencySchemaMigrator.HISTORY_TABLE + ", the default table's");
        }
    }

    private static boolean isTokenChar(int c) {
        return c < 0x7F && (Character.isLetterOrDigit(c) || "!#$%&'*+-.^_`|~".indexOf(c) >= 0);
    }

    /** @param why what the setting is for, said in the refusal; or null */
    private static void positive(String property, Duration value, String why) {
        if (value.isNegative() || value.isZero()) {
            refuse(property, value, why == null ? "positive" : "positive: " + why);
        }
    }

    /** Duration units as the settings are written, longest first, in nanoseconds. */
    private static final List<Map.Entry<String, BigInteger>> DURATION_UNITS = List.of(
            Map.entry("d", BigInteger.valueOf(86_400_000_000_000L)),
            Map.entry("h", BigInteger.valueOf(3_600_000_000_000L)), Map.entry("m", BigInteger.valueOf(60_000_000_000L)),
            Map.entry("s", BigInteger.valueOf(1_000_000_000L)), Map.entry("ms", BigInteger.valueOf(1_000_000L)),
            Map.entry("us", BigInteger.valueOf(1_000L)));

    /** Size units as the settings are written, longest first, in bytes. */
    private static final List<Map.Entry<String, Long>> SIZE_UNITS = List.of(
            Map.entry("TB", DataSize.ofTerabytes(1).toBytes()), Map.entry("GB", DataSize.ofGigabytes(1).toBytes()),
            Map.entry("MB", DataSize.ofMegabytes(1).toBytes()), Map.entry("KB", DataSize.ofKilobytes(1).toBytes()));

    /**
     * A setting's value as a refusal names it: a duration or size in the longest unit that holds it exactly, as the
     * settings are written ({@code 30d}, {@code -1MB}), rather than ISO-8601's {@code PT720H} or a count of bytes.
     */
    static String readable(Object value) {
        if (value instanceof Duration duration) {
            BigInteger nanos = BigInteger.valueOf(duration.getSeconds()).multiply(BigInteger.valueOf(1_000_000_000L))
                    .add(BigInteger.valueOf(duration.getNano()));
            if (nanos.signum() == 0) {
                return "0s";
            }
            for (Map.Entry<String, BigInteger> unit : DURATION_UNITS) {
                if (nanos.remainder(unit.getValue()).signum() == 0) {
                    return nanos.divide(unit.getValue()) + unit.getKey();
                }
            }
            return nanos + "ns";
        }
        if (value instanceof DataSize size) {
            for (Map.Entry<String, Long> unit : SIZE_UNITS) {
                if (size.toBytes() != 0 && size.toBytes() % unit.getValue() == 0) {
                    return size.toBytes() / unit.getValue() + unit.getKey();
                }
            }
            return size.toBytes() + "B";
        }
        return String.valueOf(value);
    }

    private static void refuse(String property, Object value, String expected) {
        throw new IdempotencyConfigurationException(property + " (" + readable(value) + ") must be " + expected
                + ".",
                "Set " + property + " to a valid value, or remove it to use the default.");
    }

    /**
     * The seed lesson: records cleaned up before a client's last retry let that retry run the business again. So the
     * application does not start when the retention does not cover the declared retry window plus the lease.
     */
    static void checkRetention(IdempotencyProperties properties) {
        // else every endpoint without a lease of its own would be blamed for it, and intent-first calls would fail
        positive("idempotency.lease", properties.getLease(), "it is how long an intent-first claim is held before"
                + " another request may take it over");
        if (properties.getLease().compareTo(IdempotencyEngine.MIN_LEASE) < 0) {
            refuse("idempotency.lease", properties.getLease(), "at least 1ms, the precision claims are held to");
        }
        if (properties.getRetention().getMaxRetryWindow().isNegative()) {
            // a negative window would let any TTL pass the check below
            refuse("idempotency.retention.max-retry-window", properties.getRetention().getMaxRetryWindow(),
                    "0 or more: it is the longest time after a first attempt that a client may still retry it");
        }
        retentionProblem(properties, properties.getLease(), "idempotency.lease").ifPresent(problem -> {
            throw new IdempotencyConfigurationException(problem, "Raise idempotency.retention.ttl, or declare a"
                    + " shorter idempotency.retention.max-retry-window or idempotency.lease.");
        });
    }

    /**
     * What is wrong when the retention does not cover the retry window plus {@code lease}; the startup checks also
     * ask this for every endpoint with a lease of its own.
     *
     * @param leaseSource where the lease was set, as the message names it
     */
    static Optional<String> retentionProblem(IdempotencyProperties properties, Duration lease, String leaseSource) {
        Duration ttl = properties.getRetention().getTtl();
        Duration window = properties.getRetention().getMaxRetryWindow();
        boolean covered;
        try {
            covered = ttl.compareTo(window.plus(lease)) >= 0;
        } catch (ArithmeticException e) {
            covered = false; // more than a duration counts: no TTL covers it
        }
        if (covered) {
            return Optional.empty();
        }
        return Optional.of("idempotency.retention.ttl (" + readable(ttl) + ") must be at least"
                + " idempotency.retention.max-retry-window (" + readable(window) + ") plus " + leaseSource + " ("
                + readable(lease)
                + "): a record removed before a client's last retry lets that retry run the request again."
                + " Raise the TTL or declare a shorter retry window.");
    }

    /**
     * Asked once at startup, so that transactions need not set (and first query) the isolation level; null when the
     * database could not be asked (every transaction then sets it: always correct).
     */
    private static Integer defaultIsolation(DataSource dataSource) {
        try (Connection connection = ReadConnections.borrow(dataSource)) {
            return connection.getTransactionIsolation();
        } catch (SQLException e) {
            return null;
        }
    }

    @Bean
    @ConditionalOnMissingBean
    public StoragePolicy idempotencyStoragePolicy() {
        return StoragePolicy.DEFAULT;
    }

    @Bean
    @ConditionalOnMissingBean
    public StaleClaimResolver idempotencyStaleClaimResolver() {
        return StaleClaimResolver.RERUN;
    }

    @Bean
    @ConditionalOnMissingBean
    public DownstreamKeys idempotencyDownstreamKeys(IdempotencyProperties properties) {
        return new DownstreamKeys(properties.getDownstreamKeySecret());
    }

    /**
     * The largest header section the embedded server sends, once it has started: a resolver's answer is held to it,
     * as the filter holds a handler's. A web child context whose parent made the engine (and this) keeps the parent's,
     * which is the one the engine holds its resolver's answers to: its server's limit is then the engine's too.
     */
    @Bean
    @ConditionalOnMissingBean
    HeaderSectionLimit idempotencyServerHeaderSectionLimit() {
        return new HeaderSectionLimit();
    }

    @Bean(destroyMethod = "shutdown")
    @ConditionalOnMissingBean
    public IdempotencyEngine idempotencyEngine(IdempotencyStore store, Transactions transactions,
                                               StoragePolicy storagePolicy, StaleClaimResolver resolver,
                                               DownstreamKeys downstreamKeys, IdempotencyProperties properties,
                                               ObjectProvider<PlatformTransactionManager> transactionManager,
                                               ObjectProvider<IdempotencySchemaInitializer> schemaInitializer,
                                               ObjectProvider<HeaderSectionLimit> headerSectionLimit) {
        // created first, so the table exists: an application's bean may run work through the engine while it is made
        schemaInitializer.ifAvailable(initializer -> { });
        checkRetention(properties);
        // the transaction manager the executions run with: that of transactions the application defined, if known
        PlatformTransactionManager used = transactions instanceof SpringTransactions spring
                ? spring.transactionManager() : transactionManager.getIfUnique();
        if (store instanceof JdbcIdempotencyStore jdbcStore && used != null) {
            // also a store the application defined itself: it must claim in the handler's transaction
            IdempotencyStartupChecks.checkTransactionManager(used, jdbcStore.dataSource());
        }
        IdempotencyProperties.ReplayCache cache = properties.getReplayCache();
        // claims in a transaction with a timeout end their wait in time to answer "in progress"
        return new IdempotencyEngine(new TransactionTimeBoundStore(store), transactions, storagePolicy,
                properties.getRetention().getTtl(),
                properties.getInFlightWait(), ReplayableResolver.of(resolver, properties.getReplayedHeaders(),
                        headerSectionLimit.getIfAvailable(HeaderSectionLimit::new)),
                downstreamKeys, new ReplayCache(cache.getMaxEntries(),
                        (int) Math.min(Integer.MAX_VALUE, cache.getMaxBodySize().toBytes()),
                        cache.getMaxTotalSize().toBytes(), cache.getMaxAge(), cache.getCompletedKeys()),
                properties.getMaxStoredBodySize().toBytes(), properties.getMaxWaitingDuplicates());
    }

    /** The idempotency rules for code that is not an HTTP endpoint, such as message listeners. */
    @Bean
    @ConditionalOnMissingBean
    public IdempotencyTemplate idempotencyTemplate(IdempotencyEngine engine) {
        return new IdempotencyTemplate(engine);
    }

    @Bean
    @Conditional(StaleClaimSweepSchedulerCondition.class)
    StaleClaimSweepScheduler idempotencyStaleClaimSweepScheduler(IdempotencyStore store, StaleClaimResolver resolver,
                                                                 StoragePolicy storagePolicy,
                                                                 DownstreamKeys downstreamKeys,
                                                                 IdempotencyProperties properties,
                                                                 ObjectProvider<IdempotencySchemaInitializer> schema,
                                                                 ObjectProvider<IdempotencyMeters> meters,
                                                                 ObjectProvider<HeaderSectionLimit> headerSection) {
        schema.ifAvailable(initializer -> { }); // created first, so the table exists
        IdempotencyProperties.Sweeper sweeper = properties.getSweeper();
        checkInterval(sweeper.getInterval(), "idempotency.sweeper.interval");
        return new StaleClaimSweepScheduler(new StaleClaimSweeper(store,
                ReplayableResolver.of(resolver, properties.getReplayedHeaders(),
                        headerSection.getIfAvailable(HeaderSectionLimit::new)), downstreamKeys,
                properties.getLease(), sweeper.getBatchSize(), properties.getMaxStoredBodySize().toBytes(),
                storagePolicy),
                sweeper.getInterval(),
                meters.getIfAvailable(() -> IdempotencyMeters.NONE));
    }

    /** The HTTP side: filter, advice, problem answers and the checks of the annotated handler methods. */
    @Configuration(proxyBeanMethods = false)
    @ConditionalOnWebApplication(type = ConditionalOnWebApplication.Type.SERVLET)
    @Role(BeanDefinition.ROLE_INFRASTRUCTURE)
    @Import(AutoProxyCreatorRegistrar.class)
    static class Web {

        @Bean
        @ConditionalOnMissingBean
        public CallerResolver idempotencyCallerResolver() {
            return CallerResolver.PRINCIPAL;
        }

        @Bean
        @ConditionalOnMissingBean
        public ProblemResponses idempotencyProblemResponses(IdempotencyProperties properties) {
            if (!ProblemResponses.isValidMismatchStatus(properties.getMismatchStatus())) {
                throw new IdempotencyConfigurationException("idempotency.mismatch-status must be a 4xx other than"
                        + " 408, 409, 425 and 429 (those tell a client to retry) and 401, 405, 407 and 426 (HTTP requires"
                        + " a header of those that the refusal does not carry), not " + properties.getMismatchStatus()
                        + ".", "Leave idempotency.mismatch-status at 422, or set another 4xx that does not invite a"
                        + " retry, such as 400.");
            }
            return new ProblemResponses(properties.getProblemTypeBase(), properties.getMismatchStatus());
        }

        @Bean
        IdempotentMethods idempotentMethods() {
            return new IdempotentMethods();
        }

        /**
         * JPA's open-in-view (Boot's default, or an interceptor the application registers itself): the EntityManager
         * of a request that claimed its key must outlive the transaction the filter ends
         * ({@link OpenInViewEntityManagerKeeper}).
         */
        @Configuration(proxyBeanMethods = false)
        @ConditionalOnClass(name = {"org.springframework.orm.jpa.support.OpenEntityManagerInViewInterceptor",
                "jakarta.persistence.EntityManagerFactory"})
        static class OpenInView {

            @Bean
            TransactionResources idempotencyOpenInViewEntityManager() {
                return new OpenInViewEntityManagerKeeper();
            }
        }

        /**
         * Actuator's recording of HTTP exchanges ({@code HttpExchangesFilter}, which Spring Boot registers for an
         * {@code HttpExchangeRepository} after every other filter): inside the idempotency filter it would record what
         * the handler's chain left before this filter decided the answer (200 for a replay, or for a 422 or a 409 of
         * the library, and the handler's 201 for a request whose commit failed), not what the client got. At its
         * default order it is moved just before the idempotency filter, still after Spring Security's chain, so the
         * principal it records is known; an order the application set is left as it is.
         */
        @Configuration(proxyBeanMethods = false)
        @ConditionalOnClass(name = {"org.springframework.boot.servlet.actuate.web.exchanges.HttpExchangesFilter",
                "org.springframework.boot.actuate.web.exchanges.HttpExchangeRepository"})
        static class HttpExchanges {

            @Bean
            static BeanPostProcessor idempotencyHttpExchangesOrder() {
                return new BeanPostProcessor() {
                    @Override
                    public Object postProcessBeforeInitialization(Object bean, String beanName) {
                        if (bean instanceof org.springframework.boot.servlet.actuate.web.exchanges.HttpExchangesFilter
                                filter && filter.getOrder() == Ordered.LOWEST_PRECEDENCE - 10) {
                            filter.setOrder(IdempotencyFilter.ORDER - 1);
                        }
                        return bean;
                    }
                };
            }
        }

        @Bean
        @ConditionalOnMissingBean(name = "idempotencyFilterRegistration")
        public FilterRegistrationBean<IdempotencyFilter> idempotencyFilterRegistration(ProblemResponses problems,
                                                                                      IdempotencyProperties properties,
                                                                                      IdempotentMethods methods) {
            IdempotencyFilter filter = new IdempotencyFilter(problems,
                    (int) properties.getMaxRequestBodySize().toBytes(), // checked: at most MAX_REQUEST_BODY_SIZE
                    properties.getMaxStoredBodySize().toBytes(), new HashSet<>(properties.getReplayedHeaders()), methods);
            FilterRegistrationBean<IdempotencyFilter> registration = new FilterRegistrationBean<>(filter);
            registration.setName("idempotencyFilter");
            registration.setOrder(IdempotencyFilter.ORDER);
            return registration;
        }

        /**
         * Gives the filter and the resolver's answers the limit of the embedded server's header section once the
         * server has started. Only this context's server: a child context's event reaches its parent's listeners
         * too, and neither the management port's server nor that of a web child context sends this context's
         * filter's answers. A child that uses its parent's engine holds the engine to its own server's limit itself.
         */
        @Bean
        ApplicationListener<ServletWebServerInitializedEvent> idempotencyHeaderSectionLimit(
                ObjectProvider<FilterRegistrationBean<?>> registrations, Environment environment,
                ObjectProvider<HeaderSectionLimit> resolverAnswers, ApplicationContext context) {
            return event -> {
                if (event.getApplicationContext() != context) {
                    return; // a server of another context's, such as the management port's
                }
                limitHeaderSection(headerSectionLimit(event.getWebServer().getClass(), environment), registrations,
                        resolverAnswers);
            };
        }

        /**
         * Gives the filter and the resolver's answers the limit of the server the application is configured to run
         * on when no server starts: a test's mock web environment (MockMvc, {@code @SpringBootTest} by default), where
         * the context still holds the embedded server's factory. An answer the server would not send is then refused
         * under MockMvc as it is there, instead of passing the application's tests. A context that has a server of
         * its own, and a war deployed to a servlet container (which may hold a factory it does not use), are left to
         * the listeners above and below.
         */
        @Bean
        ApplicationListener<ContextRefreshedEvent> idempotencyMockEnvironmentHeaderSectionLimit(
                ObjectProvider<FilterRegistrationBean<?>> registrations, Environment environment,
                ObjectProvider<HeaderSectionLimit> resolverAnswers, ApplicationContext context) {
            return event -> {
                if (event.getApplicationContext() != context || context instanceof WebServerApplicationContext
                        || !(context instanceof WebApplicationContext web)
                        || !mockServletContext(web.getServletContext())) {
                    return; // a server's, a war's (whose container is not the factory's server) or no web context
                }
                for (String name : context.getBeanNamesForType(ServletWebServerFactory.class, false, false)) {
                    Class<?> factory = context.getType(name, false);
                    long limit = factory == null ? Long.MAX_VALUE : headerSectionLimit(factory, environment);
                    if (limit == Long.MAX_VALUE) {
                        continue;
                    }
                    limitHeaderSection(limit, registrations, resolverAnswers);
                }
            };
        }

        /**
         * Gives the filter and the resolver's answers the limit of the header section of the servlet container a war
         * is deployed to (a context with no embedded server, started by the container), once the context is
         * refreshed: the container's default, as neither the application's {@code server.*} properties (which Spring
         * Boot applies only to a server it makes) nor the Servlet API say what the container was configured with
         * ({@link #containerHeaderSectionLimit(String)}).
         */
        @Bean
        ApplicationListener<ContextRefreshedEvent> idempotencyContainerHeaderSectionLimit(
                ObjectProvider<FilterRegistrationBean<?>> registrations,
                ObjectProvider<HeaderSectionLimit> resolverAnswers, ApplicationContext context) {
            return event -> {
                if (event.getApplicationContext() != context
                        || context instanceof WebServerApplicationContext
                        server && server.getWebServer() != null
                        || !(context instanceof WebApplicationContext web)
                        || web.getServletContext() == null) {
                    return; // another context's, one with an embedded server (see above), or no servlet container
                }
                long limit = containerHeaderSectionLimit(web.getServletContext().getServerInfo());
                if (limit != Long.MAX_VALUE) {
                    limitHeaderSection(limit, registrations, resolverAnswers);
                }
            };
        }

        /**
         * Whether {@code servletContext} is a test's mock ({@code MockServletContext} of spring-test, or a subclass
         * such as Spring Boot's), not a container's: a war runs in a context that is no
         * {@link WebServerApplicationContext} either, and may hold an embedded server's factory its container does not
         * use.
         */
        private static boolean mockServletContext(ServletContext servletContext) {
            for (Class<?> type = servletContext == null ? null : servletContext.getClass(); type != null;
                 type = type.getSuperclass()) {
                if (type.getName().equals("org.springframework.mock.web.MockServletContext")) {
                    return true;
                }
            }
            return false;
        }

        private static void limitHeaderSection(long limit, ObjectProvider<FilterRegistrationBean<?>> registrations,
                                               ObjectProvider<HeaderSectionLimit> resolverAnswers) {
            resolverAnswers.ifAvailable(answers -> answers.limit(limit));
            registrations.orderedStream().map(FilterRegistrationBean::getFilter)
                    .filter(IdempotencyFilter.class::isInstance)
                    .forEach(filter -> ((IdempotencyFilter) filter).limitHeaderSection(limit));
        }

        /**
         * Waits for the filter's requests when the context closes without an embedded server to drain them (a war
         * undeployed by its container), at most {@code spring.lifecycle.timeout-per-shutdown-phase}.
         */
        @Bean
        RequestDrain idempotencyRequestDrain(ApplicationContext context,
                                             ObjectProvider<FilterRegistrationBean<?>> registrations,
                                             Environment environment) {
            Duration timeout = Binder.get(environment).bind("spring.lifecycle.timeout-per-shutdown-phase",
                    Duration.class).orElse(Duration.ofSeconds(30));
            return new RequestDrain(context, () -> registrations.orderedStream().map(FilterRegistrationBean::getFilter)
                    .filter(IdempotencyFilter.class::isInstance).map(IdempotencyFilter.class::cast).toList(), timeout);
        }

        /** Detected by every handler mapping: a request the advice answered itself renders no view. */
        @Bean
        MappedInterceptor idempotencyAnsweredRequestInterceptor() {
            return new MappedInterceptor(null, new AnsweredRequestInterceptor());
        }

        /** Ends a handler function whose @Idempotent call was answered without running, without an error. */
        @Bean
        RequestAnsweredExceptionResolver idempotencyRequestAnsweredExceptionResolver() {
            return new RequestAnsweredExceptionResolver();
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
                                                          ObjectProvider<StoragePolicy> storagePolicy,
                                                          ObjectProvider<TransactionResources> transactionResources,
                                                          ObjectProvider<ApiVersionStrategy> apiVersions,
                                                          Environment environment) {
            return new IdempotentAdvisor(new LazyInterceptor(engine, callerResolver, problems, properties, storagePolicy,
                    transactionResources, apiVersions, environment));
        }

        /**
         * Adds an advice last to the chain of every bean the {@code @Idempotent} advice reaches: a retry advice ordered
         * inside the {@code @Idempotent} advice cannot run the method twice in one attempt ({@link SingleRunGuard}).
         */
        @Bean
        @Role(BeanDefinition.ROLE_INFRASTRUCTURE)
        static SingleRunGuard idempotencySingleRunGuard() {
            return new SingleRunGuard();
        }

        @Bean
        static IdempotencyStartupChecks idempotencyStartupChecks(ApplicationContext context,
                                                                 ObjectProvider<IdempotencyProperties> properties,
                                                                 ObjectProvider<StoragePolicy> storagePolicy,
                                                                 ObjectProvider<IdempotentMethods> methods) {
            return new IdempotencyStartupChecks(context, properties, storagePolicy, methods.getObject());
        }

        /** Builds the real interceptor on first use, once the beans it needs exist. */
        private static final class LazyInterceptor implements org.aopalliance.intercept.MethodInterceptor {

            private final ObjectProvider<IdempotencyEngine> engine;
            private final ObjectProvider<CallerResolver> callerResolver;
            private final ObjectProvider<ProblemResponses> problems;
            private final ObjectProvider<IdempotencyProperties> properties;
            private final ObjectProvider<StoragePolicy> storagePolicy;
            private final ObjectProvider<TransactionResources> transactionResources;
            private final ObjectProvider<ApiVersionStrategy> apiVersions;
            private final Environment environment;
            private volatile IdempotentMethodInterceptor delegate;

            private LazyInterceptor(ObjectProvider<IdempotencyEngine> engine, ObjectProvider<CallerResolver> callerResolver,
                                    ObjectProvider<ProblemResponses> problems,
                                    ObjectProvider<IdempotencyProperties> properties,
                                    ObjectProvider<StoragePolicy> storagePolicy,
                                    ObjectProvider<TransactionResources> transactionResources,
                                    ObjectProvider<ApiVersionStrategy> apiVersions, Environment environment) {
                this.environment = environment;
                this.apiVersions = apiVersions;
                this.transactionResources = transactionResources;
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
                            problems.getObject(), properties.getObject(), storagePolicy.getObject(), environment,
                            transactionResources.getIfAvailable(() -> TransactionResources.NONE),
                            apiVersions.getIfUnique());
                    delegate = interceptor;
                }
                return interceptor.invoke(invocation);
            }
        }
    }

    /**
     * The {@code @Idempotent} advice reaches the handlers through Spring's auto-proxy creator, which Spring Boot's
     * transaction and AOP auto-configurations register. An application with neither (transactions woven by AspectJ
     * and {@code spring.aop.auto=false}, or those auto-configurations excluded) would have none, and every
     * {@code @Idempotent} method would run unadvised, retries included: one is registered then, proxying classes unless
     * {@code spring.aop.proxy-target-class=false}, as Spring Boot's own would. One registered already is left as it is.
     */
    static class AutoProxyCreatorRegistrar implements ImportBeanDefinitionRegistrar, EnvironmentAware {

        private Environment environment;

        @Override
        public void setEnvironment(Environment environment) {
            this.environment = environment;
        }

        @Override
        public void registerBeanDefinitions(AnnotationMetadata metadata, BeanDefinitionRegistry registry) {
            if (registry.containsBeanDefinition(AopConfigUtils.AUTO_PROXY_CREATOR_BEAN_NAME)) {
                return;
            }
            AopConfigUtils.registerAutoProxyCreatorIfNecessary(registry);
            if (environment.getProperty("spring.aop.proxy-target-class", Boolean.class, true)) {
                AopConfigUtils.forceAutoProxyCreatorToUseClassProxying(registry);
            }
        }
    }

    /**
     * The largest header section the embedded server {@code webServer} sends: that of the first of its classes, its
     * own or one it extends, that {@link #headerSectionLimit(String, Environment)} knows (Spring Boot serves Jetty
     * through a subclass of its {@code JettyWebServer}).
     */
    static long headerSectionLimit(Class<?> webServer, Environment environment) {
        for (Class<?> type = webServer; type != null; type = type.getSuperclass()) {
            long limit = headerSectionLimit(type.getName(), environment);
            if (limit != Long.MAX_VALUE) {
                return limit;
            }
        }
        return Long.MAX_VALUE;
    }

    /**
     * The largest header section the servlet container that names itself {@code serverInfo}
     * ({@code ServletContext.getServerInfo()}) sends by default: 8 KB for Tomcat ({@code maxHttpResponseHeaderSize})
     * and Jetty ({@code responseHeaderSize}); unlimited for a container the library does not know.
     */
    static long containerHeaderSectionLimit(String serverInfo) {
        String name = serverInfo == null ? "" : serverInfo.toLowerCase(Locale.ROOT);
        return name.startsWith("apache tomcat/") || name.startsWith("jetty/") ? DataSize.ofKilobytes(8).toBytes()
                : Long.MAX_VALUE;
    }

    /**
     * The largest header section the embedded server of class {@code webServer} (or the factory of such servers)
     * sends, as Spring Boot configures it
     * (a value that is not positive leaves the server's default); unlimited for a server the library does not know.
     * Jetty's is 8 KB at most: Spring Boot's setting is the size its header buffer may grow to (16 KB by default), but
     * an answer whose headers outgrow the buffer's first 8 KB is not sent (the connection hangs), so the library counts
     * on those 8 KB only.
     */
    static long headerSectionLimit(String webServer, Environment environment) {
        String property;
        DataSize byDefault;
        long atMost = Long.MAX_VALUE;
        if (webServer.equals("org.springframework.boot.tomcat.TomcatWebServer")
                || webServer.equals("org.springframework.boot.tomcat.TomcatWebServerFactory")) {
            property = "server.tomcat.max-http-response-header-size";
            byDefault = DataSize.ofKilobytes(8);
        } else if (webServer.equals("org.springframework.boot.jetty.JettyWebServer")
                || webServer.equals("org.springframework.boot.jetty.JettyWebServerFactory")) {
            property = "server.jetty.max-http-response-header-size";
            byDefault = DataSize.ofKilobytes(16);
            atMost = DataSize.ofKilobytes(8).toBytes();
        } else {
            return Long.MAX_VALUE;
        }
        long bytes = Binder.get(environment).bind(property, DataSize.class).orElse(byDefault).toBytes();
        return Math.min(atMost, bytes > 0 ? bytes : byDefault.toBytes());
    }
}
