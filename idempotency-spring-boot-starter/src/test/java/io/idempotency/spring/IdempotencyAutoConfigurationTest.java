package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.core.StoragePolicy;
import io.idempotency.core.Transactions;
import io.idempotency.jdbc.PostgresIdempotencyStore;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.runner.WebApplicationContextRunner;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.jdbc.datasource.DriverManagerDataSource;
import org.springframework.mock.env.MockEnvironment;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestMapping;
import org.springframework.web.bind.annotation.RequestMethod;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.context.request.async.DeferredResult;
import org.springframework.web.servlet.mvc.method.annotation.SseEmitter;
import org.springframework.web.servlet.mvc.method.annotation.StreamingResponseBody;
import org.springframework.http.ResponseEntity;

import javax.sql.DataSource;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.ResultSet;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;

import static io.idempotency.spring.StartupFailures.assertStartFails;
import static io.idempotency.spring.StartupFailures.assertStartFailsWithDescription;
import static io.idempotency.spring.StartupFailures.rootMessage;
import static io.idempotency.spring.StartupFailures.startupFailure;
import static org.assertj.core.api.Assertions.assertThat;

/** Wiring of the auto-configuration: conditions, back-off, and the startup checks that refuse unsafe setups. */
@org.junit.jupiter.api.extension.ExtendWith(org.springframework.boot.test.system.OutputCaptureExtension.class)
class IdempotencyAutoConfigurationTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    private final WebApplicationContextRunner runner = TestDatabases.contextRunner(DATABASE);

    @Test
    void providesEveryBeanAndCreatesTheTable() {
        runner.run(context -> {
            assertThat(context).hasNotFailed();
            assertThat(context).hasSingleBean(IdempotencyEngine.class);
            assertThat(context).hasSingleBean(IdempotentAdvisor.class);
            assertThat(context.getBean(IdempotencyStore.class)).isInstanceOf(PostgresIdempotencyStore.class);
            assertThat(context.getBean(CallerResolver.class)).isSameAs(CallerResolver.PRINCIPAL);
            assertThat(DATABASE.queryLong("select count(*) from idempotency_schema_history where version = '1' and success")).isEqualTo(1);
        });
    }

    @Test
    void aSchemaManagedElsewhereIsCheckedAfterTheApplicationsOwnInitialisation() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        WebApplicationContextRunner unmanaged = TestDatabases.contextRunner(database)
                .withPropertyValues("idempotency.jdbc.initialize-schema=false");

        assertStartFails(unmanaged).contains("table idempotency_keys does not exist",
                "io/idempotency/jdbc/postgresql/schema.sql", "idempotency.jdbc.initialize-schema=false");
        // the application's own SQL initialisation creates it from the shipped script: it runs first
        unmanaged.withConfiguration(AutoConfigurations.of(
                        org.springframework.boot.jdbc.autoconfigure.DataSourceInitializationAutoConfiguration.class))
                .withPropertyValues("spring.sql.init.mode=always",
                        "spring.sql.init.schema-locations=classpath:io/idempotency/jdbc/postgresql/schema.sql")
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    assertThat(database.queryLong("select count(*) from idempotency_keys")).isZero();
                    assertThat(database.queryLong("select count(*) from pg_tables where tablename ="
                            + " 'idempotency_schema_history' and schemaname = current_schema()")).isZero();
                });
    }

    /**
     * The report of a table missing while the schema is managed elsewhere names the setting that switched the
     * migration off as the reason, never as the way to let the library create the table.
     */
    @Test
    void aMissingTableManagedElsewhereNamesTheSettingAsWhyItIsNotCreated() {
        WebApplicationContextRunner unmanaged = TestDatabases.contextRunner(TestPostgres.newDatabase())
                .withPropertyValues("idempotency.jdbc.initialize-schema=false");

        assertStartFailsWithDescription(unmanaged).contains("table idempotency_keys does not exist",
                        "idempotency.jdbc.initialize-schema=false")
                .doesNotContain("let the library create it (idempotency.jdbc.initialize-schema=false)");
    }

    /**
     * A bean that runs work through {@code IdempotencyTemplate} while it is made (a listener draining, at startup, what
     * arrived while the application was down) is made before the starter's beans: the engine it asks for must wait
     * for the table, made by the library or, when the schema is managed elsewhere, by the application's own database
     * initialisation, or that work fails on a new database.
     */
    @Test
    void workRunWhileTheApplicationStartsFindsTheTable() {
        TestPostgres.Database created = TestPostgres.newDatabase();
        TestDatabases.nonWebRunner(created).withBean(WorkAtStartup.class).run(context -> {
            assertThat(context).hasNotFailed();
            assertThat(created.queryString("select status from idempotency_keys")).isEqualTo("SUCCEEDED");
        });
        TestPostgres.Database managedElsewhere = TestPostgres.newDatabase();
        TestDatabases.nonWebRunner(managedElsewhere).withBean(WorkAtStartup.class)
                .withConfiguration(AutoConfigurations.of(
                        org.springframework.boot.jdbc.autoconfigure.DataSourceInitializationAutoConfiguration.class))
                .withPropertyValues("idempotency.jdbc.initialize-schema=false", "spring.sql.init.mode=always",
                        "spring.sql.init.schema-locations=classpath:io/idempotency/jdbc/postgresql/schema.sql")
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    assertThat(managedElsewhere.queryString("select status from idempotency_keys"))
                            .isEqualTo("SUCCEEDED");
                });
    }

    /** Runs work through the template while it is made. */
    static class WorkAtStartup implements org.springframework.beans.factory.InitializingBean {
        private final io.idempotency.core.IdempotencyTemplate template;

        WorkAtStartup(io.idempotency.core.IdempotencyTemplate template) {
            this.template = template;
        }

        @Override
        public void afterPropertiesSet() throws Exception {
            template.execute(new io.idempotency.core.ScopedKey("", "backlog", "message-1"), new byte[0],
                    () -> "done".getBytes(StandardCharsets.UTF_8));
        }
    }

    /**
     * The application's role may not create in the schema (PostgreSQL 15 and later grant no one CREATE on public): the
     * table a DBA made is used with the migration left on, and without it the report says what to run or grant.
     */
    @Test
    void aRoleThatMayNotCreateInTheSchemaStartsOnTheDbasTableAndIsToldWhatToDoWithoutIt() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        String role = "idempotency_" + database.schema() + "_app";
        database.queryString("create role " + role);
        try {
            database.queryString("grant usage on schema " + database.schema() + " to " + role);
            WebApplicationContextRunner application = TestDatabases.contextRunner(database)
                    .withPropertyValues("spring.datasource.hikari.connection-init-sql=set role " + role);

            application.run(context -> assertThat(new IdempotencyFailureAnalyzer().analyze(context.getStartupFailure()))
                    .satisfies(analysis -> {
                        assertThat(analysis.getDescription()).contains("table idempotency_keys does not exist",
                                role + " may not create", "io/idempotency/jdbc/postgresql/schema.sql");
                        assertThat(analysis.getAction()).contains("grant the application's database role CREATE")
                                .doesNotContain("initialize-schema");
                    }));

            database.queryString(io.idempotency.jdbc.IdempotencySchema.postgresql("idempotency_keys"));
            database.queryString("grant select, insert, update, delete on idempotency_keys to " + role);
            application.run(context -> assertThat(context).hasNotFailed());
        } finally {
            database.queryString("drop owned by " + role);
            database.queryString("drop role " + role);
        }
    }

    @Test
    void eachTableProblemComesWithItsOwnAction() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        WebApplicationContextRunner runner = TestDatabases.contextRunner(database);
        runner.run(context -> assertThat(context).hasNotFailed());
        database.queryString("drop table idempotency_keys"); // by hand, its history left behind

        runner.run(context -> assertThat(new IdempotencyFailureAnalyzer().analyze(context.getStartupFailure()))
                .satisfies(analysis -> {
                    assertThat(analysis.getDescription()).contains("says table idempotency_keys was created");
                    assertThat(analysis.getAction()).contains("Drop the migration history table")
                            .doesNotContain("cleanup.mode");
                }));
        runner.withPropertyValues("idempotency.jdbc.initialize-schema=false").run(context ->
                assertThat(new IdempotencyFailureAnalyzer().analyze(context.getStartupFailure()).getAction())
                        .contains("Create the table from the script"));
        database.queryString("drop table idempotency_schema_history");
        database.queryString(io.idempotency.jdbc.IdempotencySchema.postgresql("idempotency_keys"));
        runner.withPropertyValues("idempotency.retention.cleanup.mode=drop-partitions").run(context ->
                assertThat(new IdempotencyFailureAnalyzer().analyze(context.getStartupFailure()).getAction())
                        .contains("Set idempotency.retention.cleanup.mode to the mode the table was made for"));
    }

    @Test
    void aStoreTheApplicationBringsKeepsItsRecordsWhereItLikesWhenTheMigrationIsOff() {
        TestDatabases.contextRunner(TestPostgres.newDatabase()).withUserConfiguration(OwnStore.class)
                .withPropertyValues("idempotency.jdbc.initialize-schema=false",
                        "idempotency.retention.cleanup.enabled=false", "idempotency.sweeper.enabled=false")
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    assertThat(context.getBean(IdempotencyStore.class)).hasToString("own store");
                });
    }

    @Test
    void aStoreTheApplicationBringsForAnotherDatabaseGetsNoPostgresTable() {
        onAnotherDatabase("store").withUserConfiguration(OwnStore.class)
                .withPropertyValues("idempotency.retention.cleanup.enabled=false", "idempotency.sweeper.enabled=false")
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    assertThat(context.getBean(IdempotencyStore.class)).hasToString("own store");
                    try (Connection connection = context.getBean(DataSource.class).getConnection();
                         ResultSet tables = connection.getMetaData().getTables(null, null, "%", null)) {
                        List<String> names = new ArrayList<>();
                        while (tables.next()) {
                            if (!"INFORMATION_SCHEMA".equals(tables.getString("TABLE_SCHEM"))) {
                                names.add(tables.getString("TABLE_NAME"));
                            }
                        }
                        assertThat(names).isEmpty();
                    }
                });
    }

    @Test
    void theLibrarysStoreOnAnotherDatabaseIsRefusedSayingSo() {
        for (String initializeSchema : List.of("true", "false")) {
            Throwable failure = startupFailure(onAnotherDatabase("refused-" + initializeSchema)
                    .withPropertyValues("idempotency.jdbc.initialize-schema=" + initializeSchema));
            assertThat(rootMessage(failure)).contains("table idempotency_keys and its migration are made for"
                    + " PostgreSQL", "the DataSource is H2");
            assertThat(new IdempotencyFailureAnalyzer().analyze(failure).getAction())
                    .contains("Keep the idempotency records in PostgreSQL");
        }
    }

    @Test
    void partitionsForAStoreOnAnotherDatabaseAreRefusedSayingSo() {
        assertStartFails(onAnotherDatabase("partitions").withUserConfiguration(OwnStore.class)
                .withPropertyValues("idempotency.retention.cleanup.mode=drop-partitions",
                        "idempotency.sweeper.enabled=false"))
                .contains("drop-partitions keeps the records in PostgreSQL partitions",
                        "a database other than PostgreSQL");
    }

    /** The starter on an in-memory H2 database of its own. */
    private static WebApplicationContextRunner onAnotherDatabase(String name) {
        return TestDatabases.contextRunner().withPropertyValues("spring.datasource.url=jdbc:h2:mem:" + name
                + ";DB_CLOSE_DELAY=-1", "spring.datasource.username=sa", "spring.datasource.password=");
    }

    @Test
    void canBeSwitchedOff() {
        runner.withPropertyValues("idempotency.enabled=false").run(context -> {
            assertThat(context).hasNotFailed();
            assertThat(context).doesNotHaveBean(IdempotencyEngine.class);
            assertThat(context).doesNotHaveBean(IdempotentAdvisor.class);
        });
    }

    @Test
    void aRefusalNamesDurationsAndSizesAsTheSettingsAreWritten() {
        // what the reader wrote (30d, 1d, -1MB), not ISO-8601's PT720H or a count of bytes
        java.util.Map<String, String> refusals = new java.util.LinkedHashMap<>();
        refusals.put("idempotency.in-flight-wait=30d", "idempotency.in-flight-wait (30d) must be at most 24d");
        refusals.put("idempotency.lease=0s", "idempotency.lease (0s) must be positive");
        refusals.put("idempotency.retry-after=-1500ms", "idempotency.retry-after (-1500ms) must be positive");
        refusals.put("idempotency.retention.ttl=1d", "idempotency.retention.ttl (1d) must be at least"
                + " idempotency.retention.max-retry-window (7d) plus idempotency.lease (5m)");
        refusals.put("idempotency.max-request-body-size=-1MB", "idempotency.max-request-body-size (-1MB) must be");
        refusals.put("idempotency.replay-cache.max-body-size=-512B", "idempotency.replay-cache.max-body-size (-512B)");
        refusals.forEach((setting, message) -> runner.withPropertyValues(setting).run(context -> {
            assertThat(context).as(setting).hasFailed();
            assertThat(new IdempotencyFailureAnalyzer().analyze(context.getStartupFailure()).getDescription())
                    .contains(message);
        }));
        assertThat(IdempotencyAutoConfiguration.readable(Duration.ofMillis(500).negated())).isEqualTo("-500ms");
        assertThat(IdempotencyAutoConfiguration.readable(Duration.ofNanos(1500))).isEqualTo("1500ns");
        assertThat(IdempotencyAutoConfiguration.readable(Duration.ofHours(36))).isEqualTo("36h");
        assertThat(IdempotencyAutoConfiguration.readable(Duration.ofSeconds(Long.MAX_VALUE, 999_999_999)))
                .isEqualTo("9223372036854775807999999999ns");
    }

    @Test
    void aRequestBodyCapBeyondWhatOneArrayHoldsStopsTheStart() {
        // the body is held in one array while it is fingerprinted: a larger cap would be quietly lowered to that
        assertStartFailsWithDescription(runner.withPropertyValues("idempotency.max-request-body-size=3GB"))
                .contains("idempotency.max-request-body-size (3GB) must be at most 2147483639B");
        runner.withPropertyValues("idempotency.max-request-body-size=2047MB")
                .run(context -> assertThat(context).hasNotFailed());
    }

    @Test
    void aProblemTypeBaseThatMakesNoUriStopsTheStart() {
        // else every problem answer would carry a type that is no URI, which RFC 9457 clients cannot resolve
        assertStartFailsWithDescription(
                runner.withPropertyValues("idempotency.problem-type-base=https://docs.example.com/api errors/"))
                .contains("idempotency.problem-type-base (https://docs.example.com/api errors/) must be");
        for (String base : List.of("https://docs.example.com/errors/", "/problems/", "urn:problem:")) {
            runner.withPropertyValues("idempotency.problem-type-base=" + base).run(context -> {
                assertThat(context).as(base).hasNotFailed();
                assertThat(new String(context.getBean(ProblemResponses.class)
                        .render(ProblemResponses.Problem.KEY_MISSING, "d", null).body(), StandardCharsets.UTF_8))
                        .contains("\"type\":\"" + base + "idempotency-key-missing\"");
            });
        }
    }

    @Test
    void aProblemTypeBaseThatEachRequestsPathWouldResolveDifferentlyStopsTheStart() {
        // an empty base (an environment variable set to nothing) or a relative path makes every type a relative
        // reference, which RFC 9457 clients resolve against the request's URI: one error, a type per endpoint
        for (String base : List.of("", "problems/", "errors#")) {
            assertStartFailsWithDescription(runner.withPropertyValues("idempotency.problem-type-base=" + base))
                    .as("\"" + base + "\"")
                    .startsWith("idempotency.problem-type-base (\"" + base + "\") must be")
                    .contains("absolute");
        }
    }

    @Test
    void theSweeperIsOnOrOffAsTheSettingIsBound() {
        // the setting binds as a boolean, so every spelling of true the binder takes must keep the sweeper on
        for (String on : List.of("true", "TRUE", "yes", "on", "1")) {
            runner.withPropertyValues("idempotency.sweeper.enabled=" + on).run(context -> {
                assertThat(context).hasNotFailed();
                assertThat(context.getBean(IdempotencyProperties.class).getSweeper().isEnabled()).isTrue();
                assertThat(context).as(on).hasSingleBean(StaleClaimSweepScheduler.class);
            });
        }
        for (String off : List.of("false", "no", "off", "0")) {
            runner.withPropertyValues("idempotency.sweeper.enabled=" + off)
                    .run(context -> assertThat(context).as(off).doesNotHaveBean(StaleClaimSweepScheduler.class));
        }
        runner.run(context -> assertThat(context).hasSingleBean(StaleClaimSweepScheduler.class));
    }

    @Test
    void applicationBeansReplaceTheDefaults() {
        runner.withUserConfiguration(TenantCallers.class).run(context -> {
            assertThat(context).hasNotFailed();
            assertThat(context.getBean(CallerResolver.class)).isSameAs(TenantCallers.RESOLVER);
        });
    }

    @Test
    void refusesAsyncReturnTypesOnIdempotentEndpoints() {
        assertStartFails(runner.withUserConfiguration(AsyncController.class))
                .contains("deferred", "callable", "future", "streaming", "sse", "primitive", "rxSingle", "mutinyUni",
                        "suspended", "flowPublisher", "Flow$Publisher", "export()", "exportEntity()")
                .doesNotContain("fine");
    }

    @Test
    void refusesAnAsyncReturnTypeAGenericControllerGivesItsTypeVariable() {
        assertStartFails(runner.withUserConfiguration(FutureCommands.class, FutureEntityCommands.class))
                .contains("FutureCommands", "FutureEntityCommands", "CompletableFuture", "async answers");
        runner.withUserConfiguration(PlainCommands.class)
                .run(context -> assertThat(context).as("a type variable bound to a plain type").hasNotFailed());
    }

    @Test
    void refusesAResponseStatusWithAReasonOnIdempotentEndpoints() {
        assertStartFails(runner.withUserConfiguration(ReasonController.class, ReasonOnClassController.class))
                .contains("ReasonController.created()", "ReasonOnClassController.accepted()",
                        "@ResponseStatus with a reason")
                .doesNotContain("withoutReason", "notIdempotent");
    }

    @Test
    void findsTheReasonWhereSpringMvcFindsItAndOnlyOnEndpointsTheAnnotationAppliesTo() {
        assertStartFails(runner.withUserConfiguration(ReasonInheritedController.class,
                ReasonOnSuperclassController.class, ReasonOnNeverIdempotentController.class))
                .contains("ReasonInheritedController.composed() has @ResponseStatus with a reason",
                        "ReasonInheritedController.declared() has @ResponseStatus with a reason",
                        "ReasonOnSuperclassController.accepted() has @ResponseStatus with a reason",
                        "ReasonOnNeverIdempotentController.replaced() is mapped to [PUT] only")
                // its @Idempotent never applies: no request is answered through the advice, so none is rolled back
                .doesNotContain("replaced() has @ResponseStatus");
    }

    @Test
    void refusesATransactionManagerOfAnotherDataSource() {
        assertStartFails(runner.withUserConfiguration(ForeignTransactionManager.class))
                .contains("must commit in one transaction");
    }

    /**
     * A transaction manager that names no DataSource (JTA's, say): the check cannot see that the claim would join the
     * handler's transaction, so the application does not start rather than risk committing them apart.
     */
    @Test
    void refusesATransactionManagerThatNamesNoDataSource() {
        assertStartFails(runner.withUserConfiguration(OpaqueTransactionManager.class))
                .contains("must commit in one transaction");
    }

    /**
     * An application with a second database: a handler whose {@code @Transactional} names the other database's
     * transaction manager would commit its writes on their own, before the answer is stored.
     */
    @Test
    void refusesATransactionalHandlerThatNamesTheTransactionManagerOfAnotherDataSource() {
        assertStartFails(runner.withUserConfiguration(TwoTransactionManagers.class,
                NamedTransactionManagerController.class)).contains(
                "NamedTransactionManagerController.otherDatabase() is @Transactional with transaction manager"
                        + " 'otherTransactionManager', which does not manage the idempotency store's DataSource",
                "NamedTransactionManagerController.misspelt() is @Transactional with transaction manager"
                        + " 'otherTransactionManger', which names no single transaction manager bean")
                .doesNotContain("sameDatabase()");
        runner.withUserConfiguration(TwoTransactionManagers.class, SameDatabaseController.class)
                .run(context -> assertThat(context).hasNotFailed());
    }

    /**
     * Idempotency on the application's second database: a store and transactions of the application's own, both on
     * it. The library's checks and its table go with the store, not with the primary DataSource and transaction
     * manager.
     */
    @Test
    void aStoreAndTransactionsOfTheApplicationOnItsSecondDatabaseAreUsedThere() {
        TestPostgres.Database primary = TestPostgres.newDatabase();
        TestPostgres.Database second = TestPostgres.newDatabase();
        WebApplicationContextRunner onTheSecondDatabase = idempotencyOnTheSecondDatabase(primary, second);
        onTheSecondDatabase.run(context -> {
            assertThat(context).hasNotFailed();
            assertThat(second.queryLong("select count(*) from pg_tables where tablename = 'idempotency_keys'"
                    + " and schemaname = current_schema()")).isEqualTo(1);
            assertThat(primary.queryLong("select count(*) from pg_tables where tablename = 'idempotency_keys'"
                    + " and schemaname = current_schema()")).isZero();
        });
        // a @Transactional handler must then name the second database's transaction manager: the default, primary
        // one would commit its writes on their own
        assertStartFails(onTheSecondDatabase.withUserConfiguration(SecondDatabaseController.class))
                .contains("SecondDatabaseController.defaultTransactionManager() is @Transactional with the"
                        + " application's default transaction manager, which does not manage the idempotency store's"
                        + " DataSource")
                .doesNotContain("secondTransactionManager()");
    }

    /**
     * A {@code @Qualifier} on the handler's class names the transaction manager of its plain {@code @Transactional}
     * methods, as it does for Spring's transaction interceptor: it is the one checked, not the default one.
     */
    @Test
    void aQualifierOnTheHandlersClassNamesItsTransactionManager() {
        assertStartFails(runner.withUserConfiguration(TwoTransactionManagers.class,
                TypeQualifiedOtherController.class))
                .contains("TypeQualifiedOtherController.create() is @Transactional with transaction manager"
                        + " 'otherTransactionManager'", "which does not manage the idempotency store's DataSource");
        idempotencyOnTheSecondDatabase(TestPostgres.newDatabase(), TestPostgres.newDatabase())
                .withUserConfiguration(TypeQualifiedSecondController.class)
                .run(context -> assertThat(context).hasNotFailed());
    }

    /**
     * A second database declared as Spring Boot suggests, its DataSource and transaction manager no default candidates:
     * the starter passes them over, as Boot's auto-configuration does, and a handler naming that transaction manager is
     * refused.
     */
    @Test
    void aSecondDatabaseOfNoDefaultCandidatesIsPassedOver() {
        runner.withUserConfiguration(SecondDatabaseOfNoDefaultCandidates.class, DefaultTransactionalController.class)
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    assertThat(((PostgresIdempotencyStore) context.getBean(IdempotencyStore.class)).dataSource())
                            .isSameAs(context.getBean(DataSource.class));
                });
        assertStartFails(runner.withUserConfiguration(SecondDatabaseOfNoDefaultCandidates.class,
                SecondDatabaseController.class))
                .contains("SecondDatabaseController.secondTransactionManager() is @Transactional with transaction"
                        + " manager 'secondTransactionManager', which does not manage the idempotency store's"
                        + " DataSource");
    }

    /**
     * A {@code LazyConnectionDataSourceProxy} as the application's DataSource is the store's and the transaction
     * manager's alike; the pool it wraps is another DataSource, whose connections the proxy's transactions do not hold.
     */
    @Test
    void aDataSourceWrappedInALazyConnectionProxyIsADataSourceOfItsOwn() {
        runner.withUserConfiguration(LazyConnectionDataSource.class, DefaultTransactionalController.class)
                .run(context -> assertThat(context).hasNotFailed());
        assertStartFails(runner.withUserConfiguration(LazyConnectionDataSource.class, StoreOnTheWrappedPool.class))
                .contains("LazyConnectionDataSourceProxy", "must commit in one transaction");
    }

    /**
     * A transaction manager defined for a second database only: Spring Boot then defines none for the application's own
     * DataSource, and the one transaction manager there is manages the other database. The report says what to define;
     * making that one "the primary one" changes nothing.
     */
    @Test
    void aTransactionManagerOnlyForASecondDatabaseIsReportedWithWhatToDefine() {
        runner.withUserConfiguration(OnlyASecondDatabasesTransactionManager.class).run(context -> assertThat(
                new IdempotencyFailureAnalyzer().analyze(context.getStartupFailure())).satisfies(analysis -> {
                    assertThat(analysis.getDescription()).contains("must commit in one transaction");
                    assertThat(analysis.getAction()).contains("Define a transaction manager on the store's DataSource",
                            "Spring Boot defines none");
                }));
    }

    @Test
    void refusesTransactionsOfTheApplicationOnAnotherDataSourceThanTheStores() {
        assertStartFails(runner.withUserConfiguration(ForeignTransactions.class))
                .contains("must commit in one transaction");
    }

    /**
     * A TransactionManagementConfigurer gives @Transactional a default transaction manager other than the primary
     * one, which the store is checked with: a handler using it would commit its writes on their own.
     */
    @Test
    void refusesATransactionalHandlerWhoseDefaultTransactionManagerIsAnotherDataSources() {
        assertStartFails(runner.withUserConfiguration(OtherDefaultForTransactional.class,
                DefaultTransactionalController.class))
                .contains("DefaultTransactionalController.create() is @Transactional with the application's default"
                        + " transaction manager, which does not manage the idempotency store's DataSource");
    }

    /**
     * Two transaction managers, neither primary: the starter's transactions take the one named like its parameter
     * ({@code transactionManager}), but Spring's transaction interceptor finds no default for a plain
     * {@code @Transactional}, so every request to such a handler would fail.
     */
    @Test
    void refusesAPlainTransactionalHandlerWhenNoTransactionManagerIsTheDefault() {
        assertStartFails(runner.withUserConfiguration(TwoTransactionManagersWithoutAPrimaryOne.class,
                DefaultTransactionalController.class))
                .contains("DefaultTransactionalController.create() is @Transactional without naming a transaction"
                        + " manager", "'otherTransactionManager'", "'transactionManager'");
        runner.withUserConfiguration(TwoTransactionManagersWithoutAPrimaryOne.class,
                        SameDatabaseNamedController.class)
                .run(context -> assertThat(context).hasNotFailed());
    }

    /**
     * A PostgreSQL store the application defines names the table it claims in. That table is the one the library must
     * create (or check, when the schema is managed elsewhere) and keep partitions of: creating the table of
     * {@code idempotency.jdbc.table-name} instead left the store's own missing, the application started, and every
     * idempotent request was answered 503. A table name set to yet another table is a contradiction, refused.
     */
    @Test
    void theTableOfAStoreOfTheApplicationIsTheOneCreatedAndChecked() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        WebApplicationContextRunner own = TestDatabases.contextRunner(database)
                .withUserConfiguration(StoreOnATableOfItsOwn.class)
                .withPropertyValues("idempotency.sweeper.enabled=false");

        own.run(context -> {
            assertThat(context).hasNotFailed();
            IdempotencyEngine.Start start = context.getBean(IdempotencyEngine.class).start(
                    new io.idempotency.core.ScopedKey("", "POST /x", "k-1"), "c".repeat(64));
            assertThat(start).as("a claim in the store's table").isInstanceOf(IdempotencyEngine.Proceed.class);
            ((IdempotencyEngine.Proceed) start).execution().abandon();
        });
        assertThat(database.queryLong("select count(*) from api_requests")).isZero();
        own.withPropertyValues("idempotency.jdbc.initialize-schema=false").run(context ->
                assertThat(context).hasNotFailed());
        assertStartFailsWithDescription(own.withPropertyValues("idempotency.jdbc.table-name=other_requests"))
                .contains("idempotency.jdbc.table-name", "other_requests", "api_requests");
    }

    /**
     * In drop-partitions mode the table is partitioned by creation time, and no unique index can hold the key alone:
     * a plain PostgreSQL store of the application's claims through such an index, and PostgreSQL refused every claim
     * (no unique constraint matching its ON CONFLICT) while the application had started. The partitioned store claims.
     */
    @Test
    void aPlainPostgresStoreOfTheApplicationIsRefusedInPartitionedMode() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        WebApplicationContextRunner partitioned = TestDatabases.contextRunner(database)
                .withPropertyValues("idempotency.retention.cleanup.mode=drop-partitions",
                        "idempotency.sweeper.enabled=false");

        assertStartFailsWithDescription(partitioned.withUserConfiguration(StoreOnTheDefaultTable.class))
                .contains("drop-partitions", "PostgresIdempotencyStore", "every claim would fail");
        partitioned.withUserConfiguration(PartitionedStoreOnTheDefaultTable.class).run(context -> {
            assertThat(context).hasNotFailed();
            IdempotencyEngine.Start start = context.getBean(IdempotencyEngine.class).start(
                    new io.idempotency.core.ScopedKey("", "POST /x", "k-1"), "c".repeat(64));
            assertThat(start).isInstanceOf(IdempotencyEngine.Proceed.class);
            ((IdempotencyEngine.Proceed) start).execution().abandon();
        });
    }

    @Test
    void refusesAStoreOfTheApplicationOnAnotherDataSource() {
        assertStartFails(runner.withUserConfiguration(ForeignStore.class))
                .contains("must commit in one transaction");
    }

    /**
     * A method name written with spaces around it is accepted as the method it names: then it must also be the method
     * the endpoint is idempotent for, or those requests would run without idempotency although the check passed.
     */
    @Test
    void aMethodNameWithSpacesAroundItIsTheMethodItNames() throws Exception {
        Method cancel = SpacedMethodService.class.getMethod("cancel");
        IdempotentEndpoint endpoint = IdempotentEndpoint.of(cancel, cancel.getAnnotation(Idempotent.class),
                List.of("POST"), StoragePolicy.DEFAULT, Duration.ofMinutes(5), new MockEnvironment());
        assertThat(endpoint.appliesTo("DELETE")).isTrue();
        assertThat(endpoint.appliesTo("POST")).isTrue();
        assertThat(IdempotentEndpoint.of(cancel, cancel.getAnnotation(Idempotent.class), List.of(" PATCH"),
                StoragePolicy.DEFAULT, Duration.ofMinutes(5), new MockEnvironment()).appliesTo("POST")).isTrue();
        Method defaults = SpacedMethodService.class.getMethod("defaults");
        assertThat(IdempotentEndpoint.of(defaults, defaults.getAnnotation(Idempotent.class), List.of(" PATCH "),
                StoragePolicy.DEFAULT, Duration.ofMinutes(5), new MockEnvironment()).appliesTo("PATCH")).isTrue();
    }

    static class SpacedMethodService {
        @Idempotent(methods = {" delete ", "POST "})
        public String cancel() {
            return "cancelled";
        }

        @Idempotent
        public String defaults() {
            return "done";
        }
    }

    @Test
    void anEndpointLeaseResolvesPlaceholdersAndMustFitTheRetention() throws Exception {
        runner.withUserConfiguration(LeasedController.class).withPropertyValues("orders.lease=2h")
                .run(context -> assertThat(context).hasNotFailed());
        MockEnvironment environment = new MockEnvironment().withProperty("orders.lease", "2h");
        Method create = LeasedController.class.getMethod("create");
        IdempotentEndpoint endpoint = IdempotentEndpoint.of(create, create.getAnnotation(Idempotent.class),
                List.of("POST"), StoragePolicy.DEFAULT, Duration.ofMinutes(5), environment);
        assertThat(endpoint.lease).isEqualTo(Duration.ofHours(2));
        assertThat(IdempotentEndpoint.of(create, create.getAnnotation(Idempotent.class), List.of("POST"),
                StoragePolicy.DEFAULT, Duration.ofMinutes(5), new MockEnvironment()).lease)
                .as("the placeholder's default").isEqualTo(Duration.ofSeconds(45));

        // the default retention: ttl 30d, retry window 7d, so an endpoint's lease may be 23 days at most
        assertStartFails(runner.withUserConfiguration(LeasedController.class).withPropertyValues("orders.lease=24d"))
                .contains("idempotency.retention.ttl (30d)", "plus the lease of", "LeasedController.create()", "(24d)");
        assertStartFails(runner.withUserConfiguration(UnresolvedLeaseController.class))
                .contains("UnresolvedLeaseController.create()", "Could not resolve placeholder 'charges.lease'");
    }

    @Test
    void anInvalidExpressionOnAMethodBehindAFunctionalRouteStopsTheStart() {
        // found at startup like a controller method's, not on the first request
        assertStartFails(runner.withUserConfiguration(MiskeyedFunctionalService.class))
                .contains("MiskeyedFunctionalService.refund()", "invalid @Idempotent");
    }

    @Test
    void anAsyncReturnTypeOnAMethodBehindAFunctionalRouteStopsTheStart() {
        // its value would be refused on every request, as a controller method's: found at startup like that one's
        assertStartFails(runner.withUserConfiguration(AsyncFunctionalService.class))
                .contains("AsyncFunctionalService.refund()", "CompletableFuture", "async answers")
                .doesNotContain("AsyncFunctionalService.count()");
    }

    @Test
    void aMethodBehindAFunctionalRouteThatLeavesTheRequestsTransactionStopsTheStart() {
        // its advice opens the request's transaction as a controller method's does: REQUIRES_NEW would commit its
        // writes apart from the claim and the stored answer, and a stricter isolation or a timeout would be silently
        // ignored
        assertStartFails(runner.withUserConfiguration(EscapingFunctionalService.class)).contains(
                "EscapingFunctionalService.refund()", "propagation REQUIRES_NEW",
                "EscapingFunctionalService.payout()", "isolation SERIALIZABLE",
                "EscapingFunctionalService.settle()", "timeout 5s", "SET LOCAL statement_timeout",
                "SET STATEMENT max_statement_time").doesNotContain("joins()");
    }

    @Test
    void theLeaseOfAMethodBehindAFunctionalRouteMustFitTheRetentionToo() {
        // no controller method: the @Idempotent service method a functional route calls is the endpoint, and its claim
        // is held as long as its own lease says
        runner.withUserConfiguration(LeasedFunctionalService.class).withPropertyValues("payouts.lease=2h")
                .run(context -> assertThat(context).hasNotFailed());
        assertStartFails(runner.withUserConfiguration(LeasedFunctionalService.class)
                .withPropertyValues("payouts.lease=24d"))
                .contains("idempotency.retention.ttl (30d)", "plus the lease of", "LeasedFunctionalService.payout()",
                        "(24d)");
        assertStartFails(runner.withUserConfiguration(LeasedFunctionalService.class))
                .contains("LeasedFunctionalService.payout()", "Could not resolve placeholder 'payouts.lease'");
    }

    @Test
    void anAnnotationThatCouldNeverApplyToItsEndpointIsRefused() {
        assertStartFails(runner.withUserConfiguration(PutController.class)).contains("PutController.replace()",
                "is mapped to [PUT] only", "applies to [PATCH, POST]", "idempotency.methods");
        runner.withUserConfiguration(PutController.class).withPropertyValues("idempotency.methods=POST,PUT")
                .run(context -> assertThat(context).hasNotFailed());
    }

    /**
     * A method a functional route calls, with an empty {@code idempotency.methods} and no methods of its own: the
     * filter wrapped no request for it, and every call ran as if it had no annotation, without a word.
     */
    @Test
    void aMethodAFunctionalRouteCallsIdempotentForNoHttpMethodIsRefused() {
        assertStartFails(runner.withUserConfiguration(LeasedService.class).withPropertyValues("idempotency.methods="))
                .contains("LeasedService.charge()", "is @Idempotent for no HTTP method", "idempotency.methods");
    }

    @Test
    void anExpressionThatDoesNotParseOrALeaseThatIsNotPositiveIsRefusedAtStartup() {
        assertStartFails(runner.withUserConfiguration(BrokenAnnotationsController.class)).contains(
                "BrokenAnnotationsController.badKey()", "BrokenAnnotationsController.badFingerprint()",
                "BrokenAnnotationsController.zeroLease()", "BrokenAnnotationsController.negativeLease()",
                "BrokenAnnotationsController.misspeltMethod()", "BrokenAnnotationsController.subMillisecondLease()",
                "at least 1ms", "PSOT");
    }

    /**
     * SpEL reads a variable that no evaluation has as null, without a word: a misspelt name in a fingerprint would make
     * every request one fingerprint (another request under a key answered with the first one's answer), in a key every
     * request lack its key. The variables every evaluation has start.
     */
    @Test
    void anExpressionThatReadsAVariableNoRequestHasIsRefusedAtStartup() {
        assertStartFails(runner.withUserConfiguration(MisnamedVariablesController.class)).contains(
                "MisnamedVariablesController.charge(", "reads #amout", "#amount, #currency",
                "MisnamedVariablesController.refund(", "reads #bdy");
        runner.withUserConfiguration(NamedVariablesController.class).run(context -> assertThat(context).hasNotFailed());
    }

    /**
     * A parameter alone is compared as its toString(), which for a class that keeps Object's names the instance: every
     * retry of a request had another fingerprint and was refused as a mismatch (422) instead of answered, and with it
     * as the key every retry ran again. A record writes what it holds, and starts.
     */
    @Test
    void anExpressionThatIsAParameterWhoseTextNamesTheInstanceIsRefusedAtStartup() {
        assertStartFails(runner.withUserConfiguration(InstanceNamingController.class)).contains(
                "InstanceNamingController.charge(", "#charge alone", "toString()",
                "InstanceNamingController.refund(", "#p0 alone");
        runner.withUserConfiguration(RecordParameterController.class)
                .run(context -> assertThat(context).hasNotFailed());
    }

    /** So is a property of a parameter whose class keeps Object's toString(): a nested object of the body. */
    @Test
    void anExpressionThatIsAPropertyWhoseTextNamesTheInstanceIsRefusedAtStartup() {
        assertStartFails(runner.withUserConfiguration(NestedInstanceNamingController.class)).contains(
                "NestedInstanceNamingController.pay(", "#payment.payer alone", "toString()");
        runner.withUserConfiguration(NestedPropertiesController.class)
                .run(context -> assertThat(context).hasNotFailed());
    }

    /**
     * So is a parameter whose text holds such an instance: a record writes each component by its toString() (an array
     * component's names the array), and a collection or array is compared by its elements. Every retry of a request
     * had another fingerprint and was refused as a mismatch (422). Records of records, and collections of them, start.
     */
    @Test
    void anExpressionThatIsAParameterWhoseTextHoldsAnInstanceIsRefusedAtStartup() {
        assertStartFails(runner.withUserConfiguration(HeldInstanceController.class)).contains(
                "HeldInstanceController.transfer(", "#transfer alone", "ChargeTransfer", "Charge, whose toString()");
        assertStartFails(runner.withUserConfiguration(HeldArrayController.class)).contains(
                "HeldArrayController.sign(", "#signed alone", "SignedCharge", "an array, whose toString()");
        assertStartFails(runner.withUserConfiguration(InstanceListController.class)).contains(
                "InstanceListController.charges(", "#charges alone", "Charge, whose toString()");
        runner.withUserConfiguration(HeldRecordsController.class).run(context -> assertThat(context).hasNotFailed());
    }

    /**
     * NESTED, inside the request's transaction, is a savepoint: JDBC's transaction manager makes one, JPA's cannot, so
     * there every request with a key would fail with 500, while the start and the requests without a key went well.
     */
    @Test
    void aNestedHandlerStopsTheStartWhereTheTransactionManagerCannotMakeASavepoint() {
        assertStartFails(runner.withUserConfiguration(JpaTransactions.class, NestedController.class)).contains(
                "NestedController.create()", "propagation NESTED", "JPA's, whose dialect makes no savepoints");
        runner.withUserConfiguration(NestedController.class).run(context -> assertThat(context).hasNotFailed());
    }

    /**
     * The evaluation has no root object, only variables: a name without its '#' reads a property of null, which fails
     * on every request. In a key, every request would lack its key (on an optional-key endpoint, every request would
     * run without idempotency); in a fingerprint, every request would be refused ({@code #root} alone: every request
     * would have one fingerprint, and be answered with the first one's answer). So does a function: none is
     * registered, and every request would lack its key. Names in selections, projections,
     * indexers and inline maps are read of an element or stand for themselves, and start.
     */
    @Test
    void anExpressionThatReadsAPropertyOfTheMissingRootIsRefusedAtStartup() {
        assertStartFails(runner.withUserConfiguration(RootReadingKeyController.class)).contains(
                "RootReadingKeyController.callback(", "reads transactionId of the evaluation's root object");
        assertStartFails(runner.withUserConfiguration(RootReadingFingerprintController.class)).contains(
                "RootReadingFingerprintController.charge(", "reads amount of the evaluation's root object");
        assertStartFails(runner.withUserConfiguration(RootReadingArgumentController.class)).contains(
                "RootReadingArgumentController.event(", "reads eventId of the evaluation's root object");
        assertStartFails(runner.withUserConfiguration(RootVariableController.class)).contains(
                "RootVariableController.charge(", "reads #root, the evaluation's root object");
        assertStartFails(runner.withUserConfiguration(BeanReadingController.class)).contains(
                "BeanReadingController.charge(", "reads the bean @keys, which the evaluation cannot resolve");
        assertStartFails(runner.withUserConfiguration(FunctionCallingController.class)).contains(
                "FunctionCallingController.charge(", "reads the function #sha256(#body.transactionId)",
                "registers no function");
        runner.withUserConfiguration(ElementReadingController.class).run(context -> assertThat(context).hasNotFailed());
    }

    /**
     * An expression that reads nothing ({@code '#body.id'} quoted whole, a literal) is one value for every request: as
     * the key, every request after the first was answered with the first one's answer, or refused as another request
     * under its key; as the whole fingerprint, another request under a key was answered with the first one's answer.
     * A constant beside expressions that read the request (a version tag) and a static call start.
     */
    @Test
    void anExpressionThatReadsNothingOfTheRequestIsRefusedAtStartup() {
        assertStartFails(runner.withUserConfiguration(ConstantKeyController.class)).contains(
                "ConstantKeyController.charge(", "the key expression '#body.id' reads nothing of the request");
        assertStartFails(runner.withUserConfiguration(ConstantFingerprintController.class)).contains(
                "ConstantFingerprintController.charge(", "the fingerprint ['v2', 1 + 1] reads nothing");
        runner.withUserConfiguration(PartlyConstantController.class)
                .run(context -> assertThat(context).hasNotFailed());
    }

    /**
     * A lease is held only by an intent-first claim: on an endpoint left in the default mode (the mode forgotten) it
     * would be ignored, and the handler's call to a third party would run in one transaction with its claim, with no
     * intent committed before it, which nothing else would tell.
     */
    @Test
    void aLeaseOnAnEndpointThatIsNotIntentFirstIsRefusedAtStartup() {
        assertStartFails(runner.withUserConfiguration(LeaseWithoutIntentFirstController.class))
                .contains("LeaseWithoutIntentFirstController.charge()", "mode = IdempotencyMode.INTENT_FIRST");
    }

    @ParameterizedTest(name = "{0}={1}")
    @CsvSource(delimiterString = " = ", value = {
            "idempotency.header-name = ''",
            "idempotency.header-name = Idempotency Key",
            "idempotency.header-name = Content-Type",
            "idempotency.header-name = authorization",
            "idempotency.header-name = X-Forwarded-For",
            "idempotency.in-flight-wait = 0s",
            "idempotency.in-flight-wait = 25d",
            "idempotency.max-waiting-duplicates = 0",
            "idempotency.methods = 'POST,PSOT'",
            "idempotency.retry-after = 0s",
            "idempotency.lease = 500us",
            "idempotency.retry-after = -1s",
            "idempotency.retention.ttl = 110000000d",
            "idempotency.max-request-body-size = 0",
            "idempotency.max-stored-body-size = 0B",
            "idempotency.max-stored-body-size = -1B",
            "idempotency.max-stored-body-size = 2GB",
            "idempotency.downstream-key-secret = ''",
            "idempotency.replay-cache.max-entries = -1",
            "idempotency.replay-cache.completed-keys = -1",
            "idempotency.replay-cache.completed-keys = 100000001",
            "idempotency.replay-cache.max-age = -1s",
            "idempotency.replay-cache.max-body-size = -1B",
            "idempotency.replay-cache.max-total-size = -1B",
            "idempotency.retention.cleanup.batch-size = 0",
            "idempotency.retention.cleanup.partitions-ahead = -1",
            "idempotency.retention.cleanup.partitions-ahead = 1001",
            "idempotency.retention.cleanup.partition-interval = 1500ms",
            "idempotency.sweeper.batch-size = 0",
            "idempotency.jdbc.table-name = idempotency-keys",
            "idempotency.jdbc.table-name = idempotency"})
    void aSettingThatCannotWorkIsRefusedByName(String property, String value) {
        org.springframework.boot.diagnostics.FailureAnalysis analysis = new IdempotencyFailureAnalyzer().analyze(
                startupFailure(runner.withPropertyValues(property + "=" + value)));
        assertThat(analysis).as("a report naming the setting, not a bare exception").isNotNull();
        assertThat(analysis.getDescription()).startsWith(property + " (");
        assertThat(analysis.getAction()).contains(property);
    }

    @ParameterizedTest(name = "{0}={1}")
    @CsvSource(delimiterString = " = ", value = {
            "idempotency.replay-cache.max-age = 400000d",
            "idempotency.retry-after = 200000000000d",
            "idempotency.retention.cleanup.interval = 200000000000d",
            "idempotency.retention.cleanup.partition-interval = 200000000000d",
            "idempotency.sweeper.interval = 200000000000d"})
    void aDurationBeyondWhatALongCountsStarts(String property, String value) {
        // absurd (1,100 years of nanoseconds, 550 million years of milliseconds), but workable: no arithmetic
        // overflow may stop the start
        runner.withPropertyValues(property + "=" + value).run(context -> {
            assertThat(context).hasNotFailed();
            // the advice is made at the first idempotent request
            assertThat(new IdempotentMethodInterceptor(context.getBean(io.idempotency.core.IdempotencyEngine.class),
                    context.getBean(CallerResolver.class), context.getBean(ProblemResponses.class),
                    context.getBean(IdempotencyProperties.class),
                    context.getBean(io.idempotency.core.StoragePolicy.class), context.getEnvironment())).isNotNull();
        });
    }

    /**
     * PostgreSQL builds no value above 1 GB, and sends a body read as text in hex, twice its size: a cap on stored
     * bodies above half of that (refused, by name) let an answer between the two be stored, and then every replay
     * of it fail. Just under it the application starts.
     */
    @Test
    void aCapOnStoredBodiesPostgresqlCanHoldStarts() {
        runner.withPropertyValues("idempotency.max-stored-body-size=511MB")
                .run(context -> assertThat(context).hasNotFailed());
        assertThat(new IdempotencyFailureAnalyzer().analyze(startupFailure(runner.withPropertyValues(
                "idempotency.max-stored-body-size=512MB"))).getDescription())
                .startsWith("idempotency.max-stored-body-size (512MB)").contains("PostgreSQL builds no value");
    }

    @Test
    void twoCallerResolversWithoutAPrimaryOneStopTheStartInsteadOfEveryRequest() {
        assertThat(startupFailure(runner.withUserConfiguration(PostOnlyLongRouteController.class,
                TwoCallerResolvers.class)))
                .isInstanceOf(org.springframework.beans.factory.NoUniqueBeanDefinitionException.class)
                .hasMessageContaining("tenantCaller").hasMessageContaining("apiKeyCaller");
        // without endpoints the advice never asks for one
        runner.withUserConfiguration(TwoCallerResolvers.class).run(context -> assertThat(context).hasNotFailed());
    }

    @org.springframework.context.annotation.Configuration(proxyBeanMethods = false)
    static class TwoCallerResolvers {

        @org.springframework.context.annotation.Bean
        CallerResolver tenantCaller() {
            return request -> "tenant";
        }

        @org.springframework.context.annotation.Bean
        CallerResolver apiKeyCaller() {
            return request -> "api-key";
        }
    }

    @Test
    void registeredMethodsBeyondSpringMvcsOwnAreAccepted() {
        // a WebDAV method is served by a mapping without methods, or a functional route: not a misspelling
        runner.withPropertyValues("idempotency.methods=POST,PATCH,LOCK")
                .run(context -> assertThat(context).hasNotFailed());
    }

    @Test
    void aReplayedHeaderThatIsNoHeaderNameStopsTheStartNamingTheSetting() {
        // a list written with the wrong separator is one name that no header has: Content-Type would never be replayed
        for (String list : List.of("Content-Type;Location", "Content-Type,Content Encoding")) {
            runner.withPropertyValues("idempotency.replayed-headers=" + list).run(context -> {
                assertThat(context).as(list).hasFailed();
                org.springframework.boot.diagnostics.FailureAnalysis analysis =
                        new IdempotencyFailureAnalyzer().analyze(context.getStartupFailure());
                assertThat(analysis).as(list).isNotNull();
                assertThat(analysis.getDescription()).contains("idempotency.replayed-headers", "an HTTP header name");
                assertThat(analysis.getAction()).contains("idempotency.replayed-headers");
            });
        }
        runner.withPropertyValues("idempotency.replayed-headers=Content-Type,Location,X-Request-Id")
                .run(context -> assertThat(context).hasNotFailed());
        // an empty entry (a trailing comma) names nothing and keeps nothing out
        runner.withPropertyValues("idempotency.replayed-headers=Content-Type,Location,")
                .run(context -> assertThat(context).hasNotFailed());
    }

    @Test
    void aTableTheApplicationsOwnMigrationsMakeMayBeNamedIdempotency() {
        // its history would be the default table's only if the library migrated it
        TestPostgres.Database database = TestPostgres.newDatabase();
        database.queryString(io.idempotency.jdbc.IdempotencySchema.postgresql("idempotency"));
        TestDatabases.contextRunner(database).withPropertyValues("idempotency.jdbc.table-name=idempotency",
                "idempotency.jdbc.initialize-schema=false").run(context -> assertThat(context).hasNotFailed());
    }

    @Test
    void aDefaultLeaseThatIsNotPositiveIsRefusedAsTheSettingItIs() {
        // the endpoints have no lease of their own: the setting is at fault, not their annotations
        org.springframework.boot.diagnostics.FailureAnalysis analysis = new IdempotencyFailureAnalyzer().analyze(
                startupFailure(runner.withUserConfiguration(PostOnlyLongRouteController.class)
                        .withPropertyValues("idempotency.lease=0s")));
        assertThat(analysis.getDescription()).contains("idempotency.lease (0s) must be positive")
                .doesNotContain("@Idempotent cannot be used");
        assertThat(analysis.getAction()).contains("idempotency.lease");
        // nor does an application without endpoints (IdempotencyTemplate) start, to fail its intent-first calls later
        assertStartFails(runner.withPropertyValues("idempotency.lease=-1s"))
                .contains("idempotency.lease (-1s) must be positive");
    }

    /** A request identifier that proxies often set or replace is warned of as the key's header; the usual one is not. */
    @Test
    void aKeyHeaderThatProxiesOftenSetIsWarnedAbout(org.springframework.boot.test.system.CapturedOutput output) {
        String warning = "a request identifier that proxies and gateways";
        runner.run(context -> assertThat(context).hasNotFailed());
        runner.withPropertyValues("idempotency.header-name=PayPal-Request-Id")
                .run(context -> assertThat(context).hasNotFailed());
        assertThat(output).doesNotContain(warning);
        runner.withPropertyValues("idempotency.header-name=X-Request-ID")
                .run(context -> assertThat(context).hasNotFailed());
        assertThat(output).contains("idempotency.header-name is X-Request-ID, " + warning);
    }

    @Test
    void intentFirstEndpointsWithTheDefaultDownstreamSecretAreWarnedAbout(
            org.springframework.boot.test.system.CapturedOutput output) {
        String warning = "idempotency.downstream-key-secret is not set, and 1 endpoint(s) call third parties";
        runner.withUserConfiguration(LeasedController.class)
                .withPropertyValues("idempotency.downstream-key-secret=orders-service-secret")
                .run(context -> assertThat(context).hasNotFailed());
        assertThat(output).doesNotContain(warning);
        runner.withUserConfiguration(LeasedController.class).run(context -> assertThat(context).hasNotFailed());
        assertThat(output).contains(warning, "LeasedController.create()");
    }

    /**
     * A pool whose connections default to a stricter isolation than READ COMMITTED, chosen for every transaction of
     * the application: the request's transaction asks for READ COMMITTED, which the claim needs, so an
     * {@code @Idempotent} handler runs at READ COMMITTED — the loss that stops the start when the handler asks for the
     * stricter level itself, but here without a word. The start says so; not on a pool at READ COMMITTED.
     */
    @Test
    void aPoolAtAStricterIsolationIsWarnedAboutAsIdempotentHandlersRunAtReadCommitted(
            org.springframework.boot.test.system.CapturedOutput output) {
        String warning = "run at READ COMMITTED, not at";
        WebApplicationContextRunner handler = runner.withUserConfiguration(DefaultTransactionalController.class);
        handler.run(context -> assertThat(context).hasNotFailed());
        assertThat(output).doesNotContain(warning);

        handler.withPropertyValues("spring.datasource.hikari.transaction-isolation=TRANSACTION_SERIALIZABLE")
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    Transactions.Transaction request = context.getBean(Transactions.class).begin();
                    try {
                        assertThat(new JdbcTemplate(context.getBean(DataSource.class))
                                .queryForObject("show transaction_isolation", String.class))
                                .as("the request's transaction").isEqualTo("read committed");
                    } finally {
                        request.rollback();
                    }
                });
        assertThat(output).contains(warning + " SERIALIZABLE", "SELECT ... FOR UPDATE", "@Version");
        int warned = output.toString().length();

        handler.withPropertyValues("spring.datasource.hikari.transaction-isolation=TRANSACTION_REPEATABLE_READ")
                .run(context -> assertThat(context).hasNotFailed());
        assertThat(output.toString().substring(warned)).contains(warning + " REPEATABLE READ");
        warned = output.toString().length();

        // an application without @Idempotent methods has no handler to warn of
        runner.withPropertyValues("spring.datasource.hikari.transaction-isolation=TRANSACTION_SERIALIZABLE")
                .run(context -> assertThat(context).hasNotFailed());
        assertThat(output.toString().substring(warned)).doesNotContain(warning);
    }

    /**
     * The same warning on Spring Boot's other pools names the setting of the pool in use: Hikari's property, which it
     * used to name whatever the pool, binds to nothing on DBCP2 or Tomcat JDBC, and setting it would change nothing.
     */
    @ParameterizedTest
    @CsvSource({
            "org.apache.commons.dbcp2.BasicDataSource, spring.datasource.dbcp2.default-transaction-isolation",
            "org.apache.tomcat.jdbc.pool.DataSource, spring.datasource.tomcat.default-transaction-isolation"})
    void theStricterIsolationWarningNamesTheSettingOfThePoolInUse(String type, String setting,
            org.springframework.boot.test.system.CapturedOutput output) {
        int before = output.toString().length();
        runner.withUserConfiguration(DefaultTransactionalController.class)
                .withPropertyValues("spring.datasource.type=" + type, setting + "=8") // SERIALIZABLE
                .run(context -> assertThat(context).hasNotFailed());
        assertThat(output.toString().substring(before))
                .contains("run at READ COMMITTED, not at SERIALIZABLE", setting + "=2")
                .doesNotContain("spring.datasource.hikari");
    }

    /** A list written to add one header replaces the default whole: the two a client reads a body with are missed. */
    @Test
    void replayedHeadersWithoutTheOnesABodyIsReadWithAreWarnedAbout(
            org.springframework.boot.test.system.CapturedOutput output) {
        String warning = "idempotency.replayed-headers does not list";
        runner.withPropertyValues("idempotency.replayed-headers=content-type,Content-Encoding,X-Request-Cost")
                .run(context -> assertThat(context).hasNotFailed());
        assertThat(output).doesNotContain(warning);
        runner.withPropertyValues("idempotency.replayed-headers=Content-Type,X-Request-Cost")
                .run(context -> assertThat(context).hasNotFailed());
        assertThat(output).contains(warning + " Content-Encoding: replayed answers are sent without it");
        runner.withPropertyValues("idempotency.replayed-headers=X-Request-Cost")
                .run(context -> assertThat(context).hasNotFailed());
        assertThat(output).contains(warning + " Content-Type and Content-Encoding: replayed answers are sent without"
                + " them");
    }

    @Test
    void intentFirstMethodsBehindFunctionalRoutesAreWarnedAboutToo(
            org.springframework.boot.test.system.CapturedOutput output) {
        // a functional route's handler is no controller method: the @Idempotent service method it calls is the
        // endpoint, and its downstream keys are derived with the same secret
        String warning = "idempotency.downstream-key-secret is not set, and 1 endpoint(s) call third parties";
        runner.withUserConfiguration(LeasedService.class).run(context -> assertThat(context).hasNotFailed());
        assertThat(output).contains(warning, "LeasedService.charge()");
    }

    @Test
    void aScopeLongerThanItsColumnIsRefusedAtStartup() {
        assertStartFails(runner.withUserConfiguration(LongRouteController.class)).contains(
                "LongRouteController.create()", "has the scope '", " /merchants/{merchantId}/very-long-",
                "more than 255", "@Idempotent(scope = …)");
    }

    @Test
    void aScopeLongerThanItsColumnOnAMethodBehindAFunctionalRouteIsRefusedAtStartup() {
        // its own scope needs no route to be measured: every request to it would fail
        assertStartFails(runner.withUserConfiguration(LongScopedFunctionalService.class)).contains(
                "LongScopedFunctionalService.refund()", "has the scope 'merchant-refunds-", "of 256 characters",
                "more than 255", "@Idempotent(scope = …)");
    }

    @Test
    void aScopeThatFitsForTheVerbsTheEndpointServesIsAccepted() {
        runner.withUserConfiguration(PostOnlyLongRouteController.class)
                .run(context -> assertThat(context).hasNotFailed());
    }

    @Test
    void aDefaultScopeThatFitsForGetButNotForTheHeadItServesIsRefusedAtStartup() {
        // Spring MVC serves HEAD with the GET's handler, and the HEAD request is idempotent too, under "HEAD " + route
        assertStartFails(runner.withUserConfiguration(GetOnlyLongRouteController.class)).contains(
                "GetOnlyLongRouteController.confirm()", "has the scope 'HEAD /aaa", "of 256 characters",
                "more than 255");
    }

    @Test
    void aScopeOfItsOwnThatNoTextColumnHoldsIsRefusedAtStartup() {
        // the record could never be written: every request to it would fail with 500, and nothing be kept
        assertStartFails(runner.withUserConfiguration(UnstorableScopeController.class)).contains(
                "UnstorableScopeController.capture()", "has the scope 'captures\\u0000v2'",
                "UnstorableScopeController.refund()", "a NUL character or half of a surrogate pair",
                "@Idempotent(scope = …)").doesNotContain("UnstorableScopeController.charge()");
    }

    @Test
    void aScopeOfItsOwnThatNoTextColumnHoldsOnAMethodBehindAFunctionalRouteIsRefusedAtStartup() {
        assertStartFails(runner.withUserConfiguration(UnstorableScopedFunctionalService.class)).contains(
                "UnstorableScopedFunctionalService.refund()", "has the scope 'refunds\\u0000'",
                "a NUL character or half of a surrogate pair", "@Idempotent(scope = …)");
    }

    @Test
    void aRouteThatNoTextColumnHoldsAsADefaultScopeIsRefusedAtStartup() {
        assertStartFails(runner.withUserConfiguration(UnstorableRouteController.class)).contains(
                "UnstorableRouteController.create()", "has the scope 'POST /payments/\\u0000'",
                "a NUL character or half of a surrogate pair");
    }

    @Test
    void twoEndpointsThatWouldShareOneDefaultScopeAreRefusedAtStartup() {
        // Spring MVC tells them apart by a header; the records could not: a refund sent with a capture's key and body
        // would be answered with the capture's stored answer, and never run
        assertStartFails(runner.withUserConfiguration(HeaderDispatchedController.class)).contains(
                "HeaderDispatchedController#capture()", "HeaderDispatchedController#refund()", "'POST /transfers'",
                "@Idempotent(scope = …)");
    }

    @Test
    void handlersOfOneRouteToldApartByAParameterAloneShareItsDefaultScope() {
        // the parameter that chose the handler is in the fingerprint (the query string, or a form's body): a key sent
        // to the other one is refused as a mismatch, never answered with the first one's answer
        runner.withUserConfiguration(ParameterDispatchedController.class)
                .run(context -> assertThat(context).hasNotFailed());
    }

    @Test
    void handlersToldApartByAParameterTheirExpressionsDoNotReadAreRefusedAtStartup() {
        assertStartFails(runner.withUserConfiguration(KeyedParameterDispatchedController.class)).contains(
                "KeyedParameterDispatchedController#capture(String)", "KeyedParameterDispatchedController#refund(String)",
                "'POST /keyed-operations'", "@Idempotent(scope = …)");
    }

    @Test
    void handlersOfOneRouteToldApartByTheirApiVersionAloneShareItsDefaultScope() {
        runner.withPropertyValues("spring.mvc.apiversion.use.header=API-Version")
                .withUserConfiguration(VersionedController.class)
                .run(context -> assertThat(context).hasNotFailed());
    }

    @Test
    void handlersOfOneRouteToldApartByAHeaderBesideTheirVersionAreRefusedAtStartup() {
        // a request of version 2.0 without the header goes to the baseline handler, one with it to the other: the
        // version the request names does not tell which one answered, so a key sent without the header would be
        // replayed the beta handler's answer
        assertStartFails(runner.withPropertyValues("spring.mvc.apiversion.use.header=API-Version")
                .withUserConfiguration(BetaVersionController.class)).contains("BetaVersionController#pay()",
                "BetaVersionController#payBeta()", "'POST /beta-payments'", "@Idempotent(scope = …)");
    }

    @Test
    void aVersionedAndAnUnversionedHandlerOfOneRouteAreRefusedAtStartup() {
        assertStartFails(runner.withPropertyValues("spring.mvc.apiversion.use.header=API-Version")
                .withUserConfiguration(PartlyVersionedController.class)).contains(
                "PartlyVersionedController#payAnyVersion()", "PartlyVersionedController#payV2()",
                "'POST /partly-versioned'");
    }

    @Test
    void oneInheritedMethodServingTwoControllersUnderOneDefaultScopeIsRefusedToo() {
        assertStartFails(runner.withUserConfiguration(CaptureController.class, RefundController.class))
                .contains("CaptureController#create()", "RefundController#create()", "'POST /payouts'");
    }

    @Test
    void endpointsWithScopesOfTheirOwnMayShareARouteAndOneHandlerMayServeSeveral() {
        runner.withUserConfiguration(ScopedHeaderDispatchedController.class, SeveralRoutesController.class)
                .run(context -> assertThat(context).hasNotFailed());
    }

    @Test
    void anEndpointForEveryMethodBesideOneForPostSharesNoScopeWithIt() {
        // Spring MVC sends every POST to the @PostMapping, whose methods condition is the more specific: the
        // @RequestMapping without methods never serves a POST, so under "POST /tickets" there is only one handler
        runner.withUserConfiguration(CatchAllController.class).run(context -> assertThat(context).hasNotFailed());
        // one told apart by a header wins the POSTs that carry it: the two do share "POST /tickets"
        assertStartFails(runner.withUserConfiguration(HeaderCatchAllController.class)).contains(
                "HeaderCatchAllController#create()", "HeaderCatchAllController#update()", "'POST /tickets'");
    }

    @Test
    void aCallerNameLongerThanItsColumnIsStoredAsADigest() {
        String longName = "subject-".repeat(40);
        assertThat(CallerResolver.namespace("alice")).isEqualTo("alice");
        assertThat(CallerResolver.namespace(longName)).startsWith("sha256:").hasSize(71)
                .isEqualTo(CallerResolver.namespace(longName))
                .isNotEqualTo(CallerResolver.namespace(longName + "x"));
        String digest = CallerResolver.namespace(longName);
        assertThat(CallerResolver.namespace(digest)).as("a caller named like another's digest")
                .isNotEqualTo(digest).startsWith("sha256:");
        String longest = "n".repeat(255);
        assertThat(CallerResolver.namespace(longest)).isEqualTo(longest);
    }

    @Test
    void aCallerNameATextColumnCannotHoldIsStoredAsADigestThatKeepsCallersApart() {
        // PostgreSQL refuses a NUL in text; the driver sends half of a surrogate pair as '?'
        List<String> names = List.of("a\0b", "a\0c", "x\uD800", "x\uDC00", "x?", "\uD800\uD800");
        List<String> stored = names.stream().map(CallerResolver::namespace).toList();
        assertThat(stored.subList(0, 4)).allSatisfy(namespace -> assertThat(namespace).startsWith("sha256:")
                .hasSize(71).doesNotContain("\0").isEqualTo(new String(namespace.getBytes(StandardCharsets.UTF_8),
                        StandardCharsets.UTF_8)));
        assertThat(stored).doesNotHaveDuplicates();
        assertThat(CallerResolver.namespace("x\uD83D\uDE00")).as("a whole surrogate pair is text")
                .isEqualTo("x\uD83D\uDE00");
    }

    @Test
    void theMismatchStatusIsConfigurableWithinTheStatusesThatDoNotInviteARetry() {
        runner.withPropertyValues("idempotency.mismatch-status=400").run(context -> {
            assertThat(context).hasNotFailed();
            ProblemResponses problems = context.getBean(ProblemResponses.class);
            assertThat(problems.render(ProblemResponses.Problem.KEY_MISMATCH, "d", "/x").status()).isEqualTo(400);
            assertThat(new String(problems.render(ProblemResponses.Problem.KEY_MISMATCH, "d", "/x").body(),
                    StandardCharsets.UTF_8)).contains("\"status\":400", "idempotency-key-mismatch");
            assertThat(problems.render(ProblemResponses.Problem.KEY_MISSING, "d", "/x").status()).isEqualTo(400);
            assertThat(problems.render(ProblemResponses.Problem.REQUEST_IN_PROGRESS, "d", "/x").status())
                    .isEqualTo(409);
        });
        runner.run(context -> assertThat(context.getBean(ProblemResponses.class)
                .render(ProblemResponses.Problem.KEY_MISMATCH, "d", null).status()).isEqualTo(422));
        for (String refused : List.of("408", "409", "425", "429", "500", "200")) {
            assertStartFails(runner.withPropertyValues("idempotency.mismatch-status=" + refused))
                    .contains("idempotency.mismatch-status must be a 4xx", "not " + refused);
        }
        // HTTP requires a header of these (WWW-Authenticate, Allow, Proxy-Authenticate, Upgrade) that the refusal
        // does not carry: a client's HTTP stack takes such an answer for a broken one, or asks for credentials
        for (String refused : List.of("401", "405", "407", "426")) {
            assertStartFails(runner.withPropertyValues("idempotency.mismatch-status=" + refused))
                    .contains("idempotency.mismatch-status must be a 4xx", "not " + refused);
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class TenantCallers {
        static final CallerResolver RESOLVER = request -> "tenant-" + request.getHeader("X-Tenant");

        @Bean
        CallerResolver tenantCallerResolver() {
            return RESOLVER;
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class ForeignTransactionManager {
        @Bean
        PlatformTransactionManager transactionManager() {
            return new DataSourceTransactionManager(dataSource(DATABASE));
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class OpaqueTransactionManager {
        @Bean
        PlatformTransactionManager transactionManager() {
            return new org.springframework.transaction.support.AbstractPlatformTransactionManager() {
                @Override
                protected Object doGetTransaction() {
                    return new Object();
                }

                @Override
                protected void doBegin(Object transaction, org.springframework.transaction.TransactionDefinition definition) {
                }

                @Override
                protected void doCommit(org.springframework.transaction.support.DefaultTransactionStatus status) {
                }

                @Override
                protected void doRollback(org.springframework.transaction.support.DefaultTransactionStatus status) {
                }
            };
        }
    }

    private static javax.sql.DataSource dataSource(TestPostgres.Database database) {
        return new DriverManagerDataSource(database.url(), database.user(),
                database.password() == null ? "" : database.password());
    }

    /** The application on {@code primary}, with a second DataSource on {@code second} that idempotency uses. */
    private static WebApplicationContextRunner idempotencyOnTheSecondDatabase(TestPostgres.Database primary,
            TestPostgres.Database second) {
        return TestDatabases.contextRunner(primary)
                .withBean("second", javax.sql.DataSource.class, () -> dataSource(second))
                .withUserConfiguration(SecondDatabaseIdempotency.class);
    }

    /**
     * Beside the primary DataSource and its transaction manager: a second database's transaction manager, and the
     * idempotency store and transactions on that database.
     */
    @Configuration(proxyBeanMethods = false)
    static class SecondDatabaseIdempotency {
        @Bean
        @org.springframework.context.annotation.Primary
        javax.sql.DataSource dataSource(org.springframework.core.env.Environment environment) {
            return new DriverManagerDataSource(environment.getProperty("spring.datasource.url"),
                    environment.getProperty("spring.datasource.username"),
                    environment.getProperty("spring.datasource.password", ""));
        }

        @Bean
        @org.springframework.context.annotation.Primary
        PlatformTransactionManager transactionManager(javax.sql.DataSource dataSource) {
            return new DataSourceTransactionManager(dataSource);
        }

        @Bean
        PlatformTransactionManager secondTransactionManager(
                @org.springframework.beans.factory.annotation.Qualifier("second") javax.sql.DataSource second) {
            return new DataSourceTransactionManager(second);
        }

        @Bean
        IdempotencyStore idempotencyStore(
                @org.springframework.beans.factory.annotation.Qualifier("second") javax.sql.DataSource second) {
            return new PostgresIdempotencyStore(second, "idempotency_keys");
        }

        @Bean
        io.idempotency.core.Transactions idempotencyTransactions(
                @org.springframework.beans.factory.annotation.Qualifier("secondTransactionManager")
                PlatformTransactionManager second) {
            return new io.idempotency.jdbc.SpringTransactions(second);
        }
    }

    @RestController
    static class SecondDatabaseController {
        @PostMapping("/second/default")
        @Idempotent
        @org.springframework.transaction.annotation.Transactional
        public String defaultTransactionManager() {
            return "written on the primary database, committed before the answer is stored";
        }

        @PostMapping("/second/named")
        @Idempotent
        @org.springframework.transaction.annotation.Transactional(transactionManager = "secondTransactionManager")
        public String secondTransactionManager() {
            return "joins the request's transaction";
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class OtherDefaultForTransactional implements
            org.springframework.transaction.annotation.TransactionManagementConfigurer {
        private final PlatformTransactionManager other = new DataSourceTransactionManager(dataSource(DATABASE));

        @Bean
        @org.springframework.context.annotation.Primary
        PlatformTransactionManager transactionManager(javax.sql.DataSource dataSource) {
            return new DataSourceTransactionManager(dataSource);
        }

        @Override
        public org.springframework.transaction.TransactionManager annotationDrivenTransactionManager() {
            return other;
        }
    }

    @RestController
    static class DefaultTransactionalController {
        @PostMapping("/default-transactional")
        @Idempotent
        @org.springframework.transaction.annotation.Transactional
        public String create() {
            return "written with the configurer's transaction manager";
        }
    }

    /** The application's database and a second one, a transaction manager for each, neither primary. */
    @Configuration(proxyBeanMethods = false)
    static class TwoTransactionManagersWithoutAPrimaryOne {
        @Bean
        PlatformTransactionManager transactionManager(javax.sql.DataSource dataSource) {
            return new DataSourceTransactionManager(dataSource);
        }

        @Bean
        PlatformTransactionManager otherTransactionManager() {
            return new DataSourceTransactionManager(dataSource(DATABASE));
        }
    }

    @RestController
    static class SameDatabaseNamedController {
        @PostMapping("/same-database-named")
        @Idempotent
        @org.springframework.transaction.annotation.Transactional("transactionManager")
        public String create() {
            return "written with the store's transaction manager";
        }
    }

    /** The application's database (primary), a second one, and a transaction manager for each. */
    @Configuration(proxyBeanMethods = false)
    static class TwoTransactionManagers {
        @Bean
        @org.springframework.context.annotation.Primary
        PlatformTransactionManager transactionManager(javax.sql.DataSource dataSource) {
            return new DataSourceTransactionManager(dataSource);
        }

        @Bean
        PlatformTransactionManager sameDatabaseTransactionManager(javax.sql.DataSource dataSource) {
            return new DataSourceTransactionManager(dataSource);
        }

        @Bean
        PlatformTransactionManager otherTransactionManager() {
            return new DataSourceTransactionManager(dataSource(DATABASE));
        }
    }

    @RestController
    static class NamedTransactionManagerController {
        @PostMapping("/named/other")
        @Idempotent
        @org.springframework.transaction.annotation.Transactional(transactionManager = "otherTransactionManager")
        public String otherDatabase() {
            return "written on the other database, committed before the answer is stored";
        }

        @PostMapping("/named/misspelt")
        @Idempotent
        @org.springframework.transaction.annotation.Transactional(transactionManager = "otherTransactionManger")
        public String misspelt() {
            return "never runs";
        }

        @PostMapping("/named/same")
        @Idempotent
        @org.springframework.transaction.annotation.Transactional(transactionManager = "sameDatabaseTransactionManager")
        public String sameDatabase() {
            return "joins the request's transaction";
        }
    }

    @RestController
    @org.springframework.beans.factory.annotation.Qualifier("otherTransactionManager")
    static class TypeQualifiedOtherController {
        @PostMapping("/qualified/other")
        @Idempotent
        @org.springframework.transaction.annotation.Transactional
        public String create() {
            return "written on the other database, committed before the answer is stored";
        }
    }

    @RestController
    @org.springframework.beans.factory.annotation.Qualifier("secondTransactionManager")
    static class TypeQualifiedSecondController {
        @PostMapping("/qualified/second")
        @Idempotent
        @org.springframework.transaction.annotation.Transactional
        public String create() {
            return "joins the request's transaction";
        }
    }

    @RestController
    static class SameDatabaseController {
        @PostMapping("/named/same")
        @Idempotent
        @org.springframework.transaction.annotation.Transactional(transactionManager = "sameDatabaseTransactionManager")
        public String sameDatabase() {
            return "joins the request's transaction";
        }
    }

    /** The application's DataSource and a second database's, with a transaction manager for the second only. */
    @Configuration(proxyBeanMethods = false)
    static class OnlyASecondDatabasesTransactionManager {
        @Bean
        @org.springframework.context.annotation.Primary
        DataSource dataSource() {
            return IdempotencyAutoConfigurationTest.dataSource(DATABASE);
        }

        @Bean
        DataSource second() {
            return IdempotencyAutoConfigurationTest.dataSource(TestPostgres.newDatabase());
        }

        @Bean
        PlatformTransactionManager secondTransactionManager(
                @org.springframework.beans.factory.annotation.Qualifier("second") DataSource second) {
            return new DataSourceTransactionManager(second);
        }
    }

    /** A second database as Spring Boot suggests declaring it: its DataSource and transaction manager no defaults. */
    @Configuration(proxyBeanMethods = false)
    static class SecondDatabaseOfNoDefaultCandidates {
        @Bean(defaultCandidate = false)
        @org.springframework.beans.factory.annotation.Qualifier("second")
        DataSource secondDataSource() {
            return dataSource(TestPostgres.newDatabase());
        }

        @Bean(defaultCandidate = false)
        PlatformTransactionManager secondTransactionManager(
                @org.springframework.beans.factory.annotation.Qualifier("second") DataSource second) {
            return new DataSourceTransactionManager(second);
        }
    }

    /** The application's DataSource: a pool behind a {@code LazyConnectionDataSourceProxy}. */
    @Configuration(proxyBeanMethods = false)
    static class LazyConnectionDataSource {
        @Bean(defaultCandidate = false)
        DataSource pool() {
            return IdempotencyAutoConfigurationTest.dataSource(DATABASE);
        }

        @Bean
        DataSource dataSource(@org.springframework.beans.factory.annotation.Qualifier("pool") DataSource pool) {
            return new org.springframework.jdbc.datasource.LazyConnectionDataSourceProxy(pool);
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class StoreOnTheWrappedPool {
        @Bean
        IdempotencyStore idempotencyStore(@org.springframework.beans.factory.annotation.Qualifier("pool") DataSource pool) {
            return new PostgresIdempotencyStore(pool, "idempotency_keys");
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class ForeignTransactions {
        @Bean
        io.idempotency.core.Transactions idempotencyTransactions() {
            return new io.idempotency.jdbc.SpringTransactions(new DataSourceTransactionManager(dataSource(DATABASE)));
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class ForeignStore {
        @Bean
        IdempotencyStore idempotencyStore() {
            return new PostgresIdempotencyStore(dataSource(DATABASE), "idempotency_keys");
        }
    }

    @RestController
    static class ReasonController {
        @PostMapping("/reason/created")
        @Idempotent
        @org.springframework.web.bind.annotation.ResponseStatus(code = org.springframework.http.HttpStatus.GONE,
                reason = "Order gone")
        public String created() {
            return "sent as an error page instead";
        }

        @PostMapping("/reason/without")
        @Idempotent
        @org.springframework.web.bind.annotation.ResponseStatus(org.springframework.http.HttpStatus.CREATED)
        public String withoutReason() {
            return "created";
        }

        @PostMapping("/reason/not-idempotent")
        @org.springframework.web.bind.annotation.ResponseStatus(code = org.springframework.http.HttpStatus.CREATED,
                reason = "Order created")
        public String notIdempotent() {
            return "not the library's concern";
        }
    }

    @RestController
    @org.springframework.web.bind.annotation.ResponseStatus(code = org.springframework.http.HttpStatus.CONFLICT,
            reason = "Conflict")
    static class ReasonOnClassController {
        @PostMapping("/reason/accepted")
        @Idempotent
        public String accepted() {
            return "sent as an error page instead";
        }
    }

    @java.lang.annotation.Retention(java.lang.annotation.RetentionPolicy.RUNTIME)
    @org.springframework.web.bind.annotation.ResponseStatus(code = org.springframework.http.HttpStatus.GONE,
            reason = "Order gone")
    @interface CreatedWithReason {
    }

    interface ReasonDeclaringApi {
        @org.springframework.web.bind.annotation.ResponseStatus(code = org.springframework.http.HttpStatus.GONE,
                reason = "Order gone")
        String declared();
    }

    @RestController
    static class ReasonInheritedController implements ReasonDeclaringApi {
        @PostMapping("/reason/composed")
        @Idempotent
        @CreatedWithReason
        public String composed() {
            return "sent as an error page instead";
        }

        @Override
        @PostMapping("/reason/declared")
        @Idempotent
        public String declared() {
            return "sent as an error page instead";
        }
    }

    @org.springframework.web.bind.annotation.ResponseStatus(code = org.springframework.http.HttpStatus.CONFLICT,
            reason = "Conflict")
    abstract static class ReasonDeclaringController {
    }

    @RestController
    static class ReasonOnSuperclassController extends ReasonDeclaringController {
        @PostMapping("/reason/inherited")
        @Idempotent
        public String accepted() {
            return "sent as an error page instead";
        }
    }

    @RestController
    static class ReasonOnNeverIdempotentController {
        @org.springframework.web.bind.annotation.PutMapping("/reason/replaced")
        @Idempotent
        @org.springframework.web.bind.annotation.ResponseStatus(code = org.springframework.http.HttpStatus.OK,
                reason = "Replaced")
        public String replaced() {
            return "sent as an error page";
        }
    }

    @RestController
    static class LeasedController {
        @PostMapping("/leased")
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "${orders.lease:45s}")
        public String create() {
            return "created";
        }
    }

    static class LeasedService {
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST)
        public String charge() {
            return "charged";
        }

        @Bean
        org.springframework.web.servlet.function.RouterFunction<org.springframework.web.servlet.function.ServerResponse>
                charges(LeasedService service) {
            return org.springframework.web.servlet.function.RouterFunctions.route()
                    .POST("/functional-charges", request -> org.springframework.web.servlet.function.ServerResponse
                            .ok().body(service.charge()))
                    .build();
        }
    }

    @RestController
    static class VersionedController {
        @PostMapping(path = "/versioned", version = "1.0+")
        @Idempotent
        public String payV1() {
            return "v1";
        }

        @PostMapping(path = "/versioned", version = "2.0")
        @Idempotent
        public String payV2() {
            return "v2";
        }
    }

    @RestController
    static class BetaVersionController {
        @PostMapping(path = "/beta-payments", version = "1.0+")
        @Idempotent
        public String pay() {
            return "paid";
        }

        @PostMapping(path = "/beta-payments", version = "2.0", headers = "X-Beta=true")
        @Idempotent
        public String payBeta() {
            return "paid in beta";
        }
    }

    @RestController
    static class PartlyVersionedController {
        @PostMapping(path = "/partly-versioned")
        @Idempotent
        public String payAnyVersion() {
            return "any";
        }

        @PostMapping(path = "/partly-versioned", version = "2.0")
        @Idempotent
        public String payV2() {
            return "v2";
        }
    }

    @RestController
    static class ParameterDispatchedController {
        @PostMapping(path = "/operations", params = "op=capture")
        @Idempotent
        public String capture() {
            return "captured";
        }

        @PostMapping(path = "/operations", params = "op=refund")
        @Idempotent
        public String refund() {
            return "refunded";
        }
    }

    @RestController
    static class KeyedParameterDispatchedController {
        @PostMapping(path = "/keyed-operations", params = "op=capture")
        @Idempotent(key = "#body.reference")
        public String capture(@org.springframework.web.bind.annotation.RequestBody String body) {
            return "captured";
        }

        @PostMapping(path = "/keyed-operations", params = "op=refund")
        @Idempotent(key = "#body.reference")
        public String refund(@org.springframework.web.bind.annotation.RequestBody String body) {
            return "refunded";
        }
    }

    @RestController
    static class HeaderDispatchedController {
        @PostMapping(path = "/transfers", headers = "X-Operation=capture")
        @Idempotent
        public String capture() {
            return "captured";
        }

        @PostMapping(path = "/transfers", headers = "X-Operation=refund")
        @Idempotent
        public String refund() {
            return "refunded";
        }
    }

    abstract static class PayoutEndpoint {
        @PostMapping
        @Idempotent
        public String create() {
            return getClass().getSimpleName();
        }
    }

    @RestController
    @org.springframework.web.bind.annotation.RequestMapping(path = "/payouts", headers = "X-Operation=capture")
    static class CaptureController extends PayoutEndpoint {
    }

    @RestController
    @org.springframework.web.bind.annotation.RequestMapping(path = "/payouts", headers = "X-Operation=refund")
    static class RefundController extends PayoutEndpoint {
    }

    @RestController
    static class ScopedHeaderDispatchedController {
        @PostMapping(path = "/transfers", headers = "X-Operation=capture")
        @Idempotent(scope = "capture")
        public String capture() {
            return "captured";
        }

        @PostMapping(path = "/transfers", headers = "X-Operation=refund")
        @Idempotent(scope = "refund")
        public String refund() {
            return "refunded";
        }
    }

    @RestController
    static class CatchAllController {
        @org.springframework.web.bind.annotation.RequestMapping("/tickets")
        @Idempotent
        public String update() {
            return "updated";
        }

        @PostMapping("/tickets")
        @Idempotent
        public String create() {
            return "created";
        }
    }

    @RestController
    static class HeaderCatchAllController {
        @org.springframework.web.bind.annotation.RequestMapping(path = "/tickets", headers = "X-Operation=update")
        @Idempotent
        public String update() {
            return "updated";
        }

        @PostMapping("/tickets")
        @Idempotent
        public String create() {
            return "created";
        }
    }

    @RestController
    static class SeveralRoutesController {
        @org.springframework.web.bind.annotation.RequestMapping(path = {"/notes", "/v1/notes"},
                method = {org.springframework.web.bind.annotation.RequestMethod.POST,
                        org.springframework.web.bind.annotation.RequestMethod.PATCH})
        @Idempotent
        public String note() {
            return "noted";
        }
    }

    @RestController
    static class PutController {
        @org.springframework.web.bind.annotation.PutMapping("/orders/{id}")
        @Idempotent
        public String replace() {
            return "replaced";
        }

        @org.springframework.web.bind.annotation.RequestMapping("/any")
        @Idempotent
        public String anyMethod() {
            return "mapped to every method, so POST and PATCH too";
        }
    }

    @RestController
    static class LeaseWithoutIntentFirstController {
        @PostMapping("/charges")
        @Idempotent(lease = "30s")
        public String charge() {
            return "charged";
        }
    }

    @RestController
    static class BrokenAnnotationsController {
        @PostMapping("/bad-key")
        @Idempotent(key = "#body.(")
        public String badKey() {
            return "x";
        }

        @PostMapping("/bad-fingerprint")
        @Idempotent(key = "#body.id", fingerprint = "#body.amount +")
        public String badFingerprint() {
            return "x";
        }

        @PostMapping("/zero-lease")
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "0s")
        public String zeroLease() {
            return "x";
        }

        @PostMapping("/negative-lease")
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "-5s")
        public String negativeLease() {
            return "x";
        }

        /** Held to the millisecond, it would be over when claimed. */
        @PostMapping("/sub-millisecond-lease")
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "500us")
        public String subMillisecondLease() {
            return "x";
        }

        /** A misspelt method: the POST requests this endpoint serves would silently run without idempotency. */
        @RequestMapping(path = "/misspelt-method", method = {RequestMethod.POST, RequestMethod.PATCH})
        @Idempotent(methods = {"PSOT", "PATCH"})
        public String misspeltMethod() {
            return "x";
        }
    }

    @RestController
    static class MisnamedVariablesController {
        @PostMapping("/charges")
        @Idempotent(fingerprint = {"#amout", "#currency"})
        public String charge(@org.springframework.web.bind.annotation.RequestParam String amount,
                             @org.springframework.web.bind.annotation.RequestParam String currency) {
            return "charged";
        }

        @PostMapping("/refunds")
        @Idempotent(key = "#bdy.transactionId")
        public String refund() {
            return "refunded";
        }
    }

    @RestController
    static class RootReadingKeyController {
        @PostMapping("/callbacks")
        @Idempotent(key = "transactionId", keyRequired = false)
        public String callback(@org.springframework.web.bind.annotation.RequestBody Map<String, Object> body) {
            return "received";
        }
    }

    @RestController
    static class RootReadingFingerprintController {
        @PostMapping("/charges")
        @Idempotent(fingerprint = {"#body.currency", "amount"})
        public String charge(@org.springframework.web.bind.annotation.RequestBody Map<String, Object> body) {
            return "charged";
        }
    }

    @RestController
    static class RootReadingArgumentController {
        @PostMapping("/events")
        @Idempotent(key = "T(java.util.UUID).fromString(eventId)")
        public String event(@org.springframework.web.bind.annotation.RequestBody Map<String, Object> body) {
            return "received";
        }
    }

    /** Written as for Spring's cache annotations, whose root object has the arguments. */
    @RestController
    static class RootVariableController {
        @PostMapping("/charges")
        @Idempotent(fingerprint = "#root.args[0]")
        public String charge(@org.springframework.web.bind.annotation.RequestBody Map<String, Object> body) {
            return "charged";
        }
    }

    /** Also written as for Spring's cache annotations, whose evaluation resolves beans. */
    @RestController
    static class BeanReadingController {
        @PostMapping("/charges")
        @Idempotent(key = "@keys.of(#body)", keyRequired = false)
        public String charge(@org.springframework.web.bind.annotation.RequestBody Map<String, Object> body) {
            return "charged";
        }
    }

    @RestController
    static class FunctionCallingController {
        @PostMapping("/charges")
        @Idempotent(key = "#sha256(#body.transactionId)", keyRequired = false)
        public String charge(@org.springframework.web.bind.annotation.RequestBody Map<String, Object> body) {
            return "charged";
        }
    }

    @RestController
    static class ConstantKeyController {
        @PostMapping("/charges")
        @Idempotent(key = "'#body.id'")
        public String charge(@org.springframework.web.bind.annotation.RequestBody Map<String, Object> body) {
            return "charged";
        }
    }

    @RestController
    static class ConstantFingerprintController {
        @PostMapping("/charges")
        @Idempotent(fingerprint = {"'v2'", "1 + 1"})
        public String charge(@org.springframework.web.bind.annotation.RequestBody Map<String, Object> body) {
            return "charged";
        }
    }

    @RestController
    static class PartlyConstantController {
        @PostMapping("/charges")
        @Idempotent(key = "'charge-' + #body.id", fingerprint = {"'v2'", "#body.amount"})
        public String charge(@org.springframework.web.bind.annotation.RequestBody Map<String, Object> body) {
            return "charged";
        }

        @PostMapping("/refunds")
        @Idempotent(key = "T(java.lang.String).valueOf(#body.id)", fingerprint = "new java.math.BigDecimal('1')")
        public String refund(@org.springframework.web.bind.annotation.RequestBody Map<String, Object> body) {
            return "refunded";
        }
    }

    @RestController
    static class ElementReadingController {
        @PostMapping("/charges")
        @Idempotent(key = "#body.reference?.id", fingerprint = {"#body.lines.![amount]", "#body.lines.?[qty > 0]",
                "#body['amount']", "{currency: #body.currency}", "T(java.lang.Long).parseLong(#body.amount)",
                "#body.get('amount').toString()"})
        public String charge(@org.springframework.web.bind.annotation.RequestBody Map<String, Object> body) {
            return "charged";
        }
    }

    @RestController
    static class NamedVariablesController {
        @PostMapping("/charges/{merchant}")
        @Idempotent(key = "#body.transactionId", fingerprint = {"#amount", "#p1", "#a0", "#path['merchant']",
                "#params['x']", "#headers['X-Y']", "#body.lines.?[#this.qty > 0]", "(#n = 1) + #n"})
        public String charge(@org.springframework.web.bind.annotation.RequestParam String amount,
                             @org.springframework.web.bind.annotation.RequestParam String currency) {
            return "charged";
        }
    }

    /** A request body bound as a class that keeps Object's toString(). */
    public static class Charge {
        private String amount;

        public String getAmount() {
            return amount;
        }

        public void setAmount(String amount) {
            this.amount = amount;
        }
    }

    public record ChargeRecord(String amount) {
    }

    /** A request body whose payer is an object of a class that keeps Object's toString(). */
    public static class Payment {
        private String amount;
        private Charge payer;

        public String getAmount() {
            return amount;
        }

        public void setAmount(String amount) {
            this.amount = amount;
        }

        public Charge getPayer() {
            return payer;
        }

        public void setPayer(Charge payer) {
            this.payer = payer;
        }
    }

    public record PaymentRecord(String amount, ChargeRecord payer, java.util.Map<String, Object> details) {
    }

    @RestController
    static class NestedInstanceNamingController {
        @PostMapping("/nested-payments")
        @Idempotent(fingerprint = {"#payment.amount", "#payment.payer"})
        public String pay(@org.springframework.web.bind.annotation.RequestBody Payment payment) {
            return "paid";
        }
    }

    @RestController
    static class NestedPropertiesController {
        @PostMapping("/nested-payments")
        @Idempotent(fingerprint = {"#payment.amount", "#payment.payer", "#payment.payer.amount",
                "#payment.details.reference"})
        public String pay(@org.springframework.web.bind.annotation.RequestBody PaymentRecord payment) {
            return "paid";
        }
    }

    @RestController
    static class InstanceNamingController {
        @PostMapping("/charges")
        @Idempotent(fingerprint = "#charge")
        public String charge(@org.springframework.web.bind.annotation.RequestBody Charge charge) {
            return "charged";
        }

        @PostMapping("/refunds")
        @Idempotent(key = "#p0")
        public String refund(@org.springframework.web.bind.annotation.RequestBody Charge refund) {
            return "refunded";
        }
    }

    /** A record whose text holds a Charge, whose toString() names the instance. */
    public record ChargeTransfer(String reference, Charge charge) {
    }

    /** A record whose text holds an array's, which names the array. */
    public record SignedCharge(String amount, byte[] signature) {
    }

    public record RecordsTransfer(ChargeRecord charge, java.util.List<ChargeRecord> more,
                                  java.util.Map<String, Object> details) {
    }

    @RestController
    static class HeldInstanceController {
        @PostMapping("/transfers")
        @Idempotent(fingerprint = "#transfer")
        public String transfer(@org.springframework.web.bind.annotation.RequestBody ChargeTransfer transfer) {
            return "transferred";
        }
    }

    @RestController
    static class HeldArrayController {
        @PostMapping("/signed")
        @Idempotent(fingerprint = "#signed")
        public String sign(@org.springframework.web.bind.annotation.RequestBody SignedCharge signed) {
            return "signed";
        }
    }

    @RestController
    static class InstanceListController {
        @PostMapping("/charges")
        @Idempotent(fingerprint = "#charges")
        public String charges(@org.springframework.web.bind.annotation.RequestBody java.util.List<Charge> charges) {
            return "charged";
        }
    }

    @RestController
    static class HeldRecordsController {
        @PostMapping("/transfers")
        @Idempotent(fingerprint = {"#transfer", "#signature"})
        public String transfer(@org.springframework.web.bind.annotation.RequestBody RecordsTransfer transfer,
                               @org.springframework.web.bind.annotation.RequestHeader byte[] signature) {
            return "transferred";
        }
    }

    @RestController
    static class RecordParameterController {
        @PostMapping("/charges")
        @Idempotent(fingerprint = {"#charge", "#charge.amount"})
        public String charge(@org.springframework.web.bind.annotation.RequestBody ChargeRecord charge) {
            return "charged";
        }
    }

    @RestController
    static class NestedController {
        @PostMapping("/nested")
        @Idempotent
        @org.springframework.transaction.annotation.Transactional(
                propagation = org.springframework.transaction.annotation.Propagation.NESTED)
        public String create() {
            return "created";
        }
    }

    /** JPA's transactions, with Hibernate, as an application without Spring Boot's JPA set-up makes them. */
    @Configuration(proxyBeanMethods = false)
    static class JpaTransactions {
        @Bean
        org.springframework.orm.jpa.LocalContainerEntityManagerFactoryBean entityManagerFactory(DataSource dataSource) {
            var factory = new org.springframework.orm.jpa.LocalContainerEntityManagerFactoryBean();
            factory.setDataSource(dataSource);
            factory.setJpaVendorAdapter(new org.springframework.orm.jpa.vendor.HibernateJpaVendorAdapter());
            factory.setPackagesToScan("io.idempotency.spring.noentities");
            return factory;
        }

        @Bean
        org.springframework.orm.jpa.JpaTransactionManager transactionManager(
                jakarta.persistence.EntityManagerFactory factory, DataSource dataSource) {
            var transactionManager = new org.springframework.orm.jpa.JpaTransactionManager(factory);
            transactionManager.setDataSource(dataSource);
            transactionManager.setNestedTransactionAllowed(true); // still no savepoint: Hibernate's dialect makes none
            return transactionManager;
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class StoreOnTheDefaultTable {
        @Bean
        IdempotencyStore idempotencyStore(javax.sql.DataSource dataSource) {
            return new PostgresIdempotencyStore(dataSource, "idempotency_keys");
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class PartitionedStoreOnTheDefaultTable {
        @Bean
        IdempotencyStore idempotencyStore(javax.sql.DataSource dataSource) {
            return new io.idempotency.jdbc.PartitionedPostgresIdempotencyStore(dataSource, "idempotency_keys");
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class StoreOnATableOfItsOwn {
        @Bean
        IdempotencyStore idempotencyStore(javax.sql.DataSource dataSource) {
            return new PostgresIdempotencyStore(dataSource, "api_requests");
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class OwnStore {
        @Bean
        IdempotencyStore idempotencyStore() {
            return (IdempotencyStore) java.lang.reflect.Proxy.newProxyInstance(getClass().getClassLoader(),
                    new Class<?>[] {IdempotencyStore.class}, (proxy, method, args) -> switch (method.getName()) {
                        case "hashCode" -> System.identityHashCode(proxy);
                        case "equals" -> proxy == args[0];
                        case "toString" -> "own store";
                        default -> throw new UnsupportedOperationException(method.getName());
                    });
        }
    }

    @RestController
    static class PostOnlyLongRouteController {
        /** "POST " and this path are 255 characters; "PATCH " and it would be 256, but PATCH is not mapped. */
        @PostMapping("/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                + "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                + "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                + "aaaaaaaaa")
        @Idempotent
        public String create() {
            return "created";
        }
    }

    @RestController
    static class GetOnlyLongRouteController {
        /** "GET " and this path are 255 characters; "HEAD " and it are 256, and HEAD is served with the GET. */
        @org.springframework.web.bind.annotation.GetMapping("/"
                + "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                + "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                + "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                + "aaaaaaaaaa")
        @Idempotent(methods = "GET")
        public String confirm() {
            return "confirmed";
        }
    }

    @RestController
    static class LongRouteController {
        @PostMapping("/merchants/{merchantId}/very-long-segment/very-long-segment/very-long-segment/very-long-segment/"
                + "very-long-segment/very-long-segment/very-long-segment/very-long-segment/"
                + "very-long-segment/very-long-segment/very-long-segment/very-long-segment/"
                + "very-long-segment/very-long-segment/payments")
        @Idempotent
        public String create() {
            return "created";
        }
    }

    @RestController
    static class UnstorableScopeController {
        @PostMapping("/captures")
        @Idempotent(scope = "captures\u0000v2")
        public String capture() {
            return "captured";
        }

        /** Half of a surrogate pair: the driver would send it as '?', making it one scope with "refunds-?". */
        @PostMapping("/refunds")
        @Idempotent(scope = "refunds-\uD83D")
        public String refund() {
            return "refunded";
        }

        /** A whole surrogate pair (a character beyond the BMP) is text like any other. */
        @PostMapping("/charges")
        @Idempotent(scope = "charges-\uD83D\uDCB3")
        public String charge() {
            return "charged";
        }
    }

    @RestController
    static class UnstorableRouteController {
        @PostMapping("/payments/\u0000")
        @Idempotent
        public String create() {
            return "created";
        }
    }

    static class UnstorableScopedFunctionalService {
        @Idempotent(scope = "refunds\u0000")
        public String refund() {
            return "refunded";
        }

        @Bean
        org.springframework.web.servlet.function.RouterFunction<org.springframework.web.servlet.function.ServerResponse>
                unstorableScopedRefunds(UnstorableScopedFunctionalService service) {
            return org.springframework.web.servlet.function.RouterFunctions.route()
                    .POST("/functional-unstorable-refunds", request -> org.springframework.web.servlet.function
                            .ServerResponse.ok().body(service.refund()))
                    .build();
        }
    }

    static class MiskeyedFunctionalService {
        @Idempotent(key = "#body.")
        public String refund() {
            return "refunded";
        }

        @Bean
        org.springframework.web.servlet.function.RouterFunction<org.springframework.web.servlet.function.ServerResponse>
                refunds(MiskeyedFunctionalService service) {
            return org.springframework.web.servlet.function.RouterFunctions.route()
                    .POST("/functional-refunds", request -> org.springframework.web.servlet.function.ServerResponse
                            .ok().body(service.refund()))
                    .build();
        }
    }

    static class LongScopedFunctionalService {
        @Idempotent(scope = "merchant-refunds-" + "very-long-scope-very-long-scope-very-long-scope-very-long-scope-"
                + "very-long-scope-very-long-scope-very-long-scope-very-long-scope-very-long-scope-very-long-scope-"
                + "very-long-scope-very-long-scope-very-long-scope-very-long-scope-123456789012345")
        public String refund() {
            return "refunded";
        }

        @Bean
        org.springframework.web.servlet.function.RouterFunction<org.springframework.web.servlet.function.ServerResponse>
                longScopedRefunds(LongScopedFunctionalService service) {
            return org.springframework.web.servlet.function.RouterFunctions.route()
                    .POST("/functional-long-scoped-refunds", request -> org.springframework.web.servlet.function
                            .ServerResponse.ok().body(service.refund()))
                    .build();
        }
    }

    static class AsyncFunctionalService {
        @Idempotent
        public CompletableFuture<String> refund() {
            return CompletableFuture.completedFuture("refunded");
        }

        /** A primitive is fine here: a handler function's call that is answered without running it throws. */
        @Idempotent
        public long count() {
            return 1;
        }

        @Bean
        org.springframework.web.servlet.function.RouterFunction<org.springframework.web.servlet.function.ServerResponse>
                asyncRefunds(AsyncFunctionalService service) {
            return org.springframework.web.servlet.function.RouterFunctions.route()
                    .POST("/functional-async-refunds", request -> org.springframework.web.servlet.function
                            .ServerResponse.ok().body(service.refund().join()))
                    .POST("/functional-counted-refunds", request -> org.springframework.web.servlet.function
                            .ServerResponse.ok().body(service.count()))
                    .build();
        }
    }

    static class EscapingFunctionalService {
        @Idempotent
        @org.springframework.transaction.annotation.Transactional(
                propagation = org.springframework.transaction.annotation.Propagation.REQUIRES_NEW)
        public String refund() {
            return "refunded";
        }

        @Idempotent
        @org.springframework.transaction.annotation.Transactional(
                isolation = org.springframework.transaction.annotation.Isolation.SERIALIZABLE)
        public String payout() {
            return "paid out";
        }

        @Idempotent
        @org.springframework.transaction.annotation.Transactional(timeout = 5)
        public String settle() {
            return "settled";
        }

        @Idempotent
        @org.springframework.transaction.annotation.Transactional
        public String joins() {
            return "joined";
        }

        @Bean
        org.springframework.web.servlet.function.RouterFunction<org.springframework.web.servlet.function.ServerResponse>
                escapingRoutes(EscapingFunctionalService service) {
            return org.springframework.web.servlet.function.RouterFunctions.route()
                    .POST("/functional-escaping-refunds", request -> org.springframework.web.servlet.function
                            .ServerResponse.ok().body(service.refund()))
                    .POST("/functional-escaping-payouts", request -> org.springframework.web.servlet.function
                            .ServerResponse.ok().body(service.payout()))
                    .POST("/functional-escaping-settlements", request -> org.springframework.web.servlet.function
                            .ServerResponse.ok().body(service.settle()))
                    .POST("/functional-joining", request -> org.springframework.web.servlet.function
                            .ServerResponse.ok().body(service.joins()))
                    .build();
        }
    }

    static class LeasedFunctionalService {
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "${payouts.lease}")
        public String payout() {
            return "paid out";
        }

        @Bean
        org.springframework.web.servlet.function.RouterFunction<org.springframework.web.servlet.function.ServerResponse>
                payouts(LeasedFunctionalService service) {
            return org.springframework.web.servlet.function.RouterFunctions.route()
                    .POST("/functional-payouts", request -> org.springframework.web.servlet.function.ServerResponse
                            .ok().body(service.payout()))
                    .build();
        }
    }

    @RestController
    static class UnresolvedLeaseController {
        @PostMapping("/unresolved")
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "${charges.lease}")
        public String create() {
            return "created";
        }
    }

    /** An interface of the application's own extending StreamingResponseBody, one level removed from it. */
    interface ExportBody extends StreamingResponseBody {
    }

    static class CsvExport implements ExportBody {
        @Override
        public void writeTo(java.io.OutputStream out) throws java.io.IOException {
            out.write(1);
        }
    }

    /** A generic base controller whose answer's type its subclasses choose. */
    abstract static class CommandController<R> {
        @PostMapping
        @Idempotent
        public R run(@RequestBody String command) {
            return answer(command);
        }

        abstract R answer(String command);
    }

    @RestController
    @RequestMapping("/future-commands")
    static class FutureCommands extends CommandController<CompletableFuture<String>> {
        @Override
        CompletableFuture<String> answer(String command) {
            return CompletableFuture.completedFuture(command);
        }
    }

    /** The type variable inside a ResponseEntity. */
    abstract static class EntityCommandController<R> {
        @PostMapping
        @Idempotent
        public ResponseEntity<R> run(@RequestBody String command) {
            return ResponseEntity.ok(answer(command));
        }

        abstract R answer(String command);
    }

    @RestController
    @RequestMapping("/future-entity-commands")
    static class FutureEntityCommands extends EntityCommandController<CompletableFuture<String>> {
        @Override
        CompletableFuture<String> answer(String command) {
            return CompletableFuture.completedFuture(command);
        }
    }

    @RestController
    @RequestMapping("/plain-commands")
    static class PlainCommands extends CommandController<String> {
        @Override
        String answer(String command) {
            return command;
        }
    }

    @RestController
    static class AsyncController {
        @PostMapping("/deferred")
        @Idempotent
        public DeferredResult<String> deferred() {
            return new DeferredResult<>();
        }

        @PostMapping("/callable")
        @Idempotent
        public Callable<String> callable() {
            return () -> "x";
        }

        @PostMapping("/future")
        @Idempotent
        public CompletableFuture<String> future() {
            return CompletableFuture.completedFuture("x");
        }

        @PostMapping("/streaming")
        @Idempotent
        public ResponseEntity<StreamingResponseBody> streaming() {
            return ResponseEntity.ok(out -> out.write(1));
        }

        /** A streaming body of the application's own kind, as its class and inside a ResponseEntity. */
        @PostMapping("/export")
        @Idempotent
        public CsvExport export() {
            return new CsvExport();
        }

        @PostMapping("/export-entity")
        @Idempotent
        public ResponseEntity<CsvExport> exportEntity() {
            return ResponseEntity.ok(new CsvExport());
        }

        @PostMapping("/sse")
        @Idempotent
        public SseEmitter sse() {
            return new SseEmitter();
        }

        @PostMapping("/rx-single")
        @Idempotent
        public io.reactivex.rxjava3.core.Single<String> rxSingle() {
            return io.reactivex.rxjava3.core.Single.just("x");
        }

        @PostMapping("/mutiny-uni")
        @Idempotent
        public io.smallrye.mutiny.Uni<String> mutinyUni() {
            return io.smallrye.mutiny.Uni.createFrom().item("x");
        }

        /** Adapted by Spring MVC's ReactiveAdapterRegistry (without Reactor, through reactive-streams' FlowAdapters). */
        @PostMapping("/flow-publisher")
        @Idempotent
        public java.util.concurrent.Flow.Publisher<String> flowPublisher() {
            return new java.util.concurrent.SubmissionPublisher<>();
        }

        /** How a Kotlin {@code suspend fun suspended(): String} looks from Java. */
        @PostMapping("/suspended")
        @Idempotent
        public Object suspended(kotlin.coroutines.Continuation<? super String> continuation) {
            return "x";
        }

        @PostMapping("/primitive")
        @Idempotent
        public int primitive() {
            return 1;
        }

        @PostMapping("/fine")
        @Idempotent
        public ResponseEntity<String> fine() {
            return ResponseEntity.ok("x");
        }
    }
}
