package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyEngine;
import io.idempotency.testkit.TestPostgres;
import org.assertj.core.api.AbstractStringAssert;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.test.context.runner.AbstractApplicationContextRunner;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.boot.test.context.runner.ReactiveWebApplicationContextRunner;
import org.springframework.boot.test.context.runner.WebApplicationContextRunner;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.Import;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.jdbc.datasource.DriverManagerDataSource;
import org.springframework.stereotype.Service;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;

import javax.sql.DataSource;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * An application whose {@code @Idempotent} methods the starter cannot serve (no DataSource, no transaction manager,
 * not Spring MVC) does not start; switched off on purpose it starts and says so; without {@code @Idempotent} it
 * starts as before.
 */
@ExtendWith(OutputCaptureExtension.class)
class IdempotencyInactiveAutoConfigurationTest {

    private static final String WARNING = "idempotency.enabled=false: @Idempotent has no effect";

    /** A Spring MVC application with the starter and no database. */
    private final WebApplicationContextRunner withoutDatabase = new WebApplicationContextRunner()
            .withConfiguration(AutoConfigurations.of(
                    org.springframework.boot.webmvc.autoconfigure.WebMvcAutoConfiguration.class,
                    org.springframework.boot.webmvc.autoconfigure.DispatcherServletAutoConfiguration.class,
                    IdempotencyAutoConfiguration.class,
                    IdempotencyInactiveAutoConfiguration.class));

    @Test
    void anIdempotentEndpointWithoutDataSourceStopsTheStartup() {
        assertStartFailsWithReport(withoutDatabase.withUserConfiguration(PaymentController.class))
                .contains("@Idempotent has no effect in this application, so it does not start",
                        "no DataSource bean and no PlatformTransactionManager bean", "spring.datasource.url",
                        "PaymentController.create()", "set idempotency.enabled=false");
    }

    @Test
    void theMessageNamesTheMissingTransactionManager() {
        assertStartFailsWithReport(withoutDatabase.withUserConfiguration(PaymentController.class,
                OnlyADataSource.class))
                .contains("has no PlatformTransactionManager bean", "PaymentController.create()")
                .doesNotContain("no DataSource bean");
    }

    @Test
    void anIdempotentMethodOutsideTheHandlersCountsToo() {
        assertStartFailsWithReport(withoutDatabase.withUserConfiguration(RefundService.class))
                .contains("no DataSource bean", "RefundService.refund()");
    }

    @Test
    void switchedOffOnPurposeItStartsAndWarnsOnce(CapturedOutput output) {
        withoutDatabase.withUserConfiguration(PaymentController.class, RefundService.class)
                .withPropertyValues("idempotency.enabled=false").run(context -> {
                    assertThat(context).hasNotFailed();
                    assertThat(context).doesNotHaveBean(IdempotentAdvisor.class);
                });
        assertThat(output).contains(WARNING, "PaymentController.create()", "RefundService.refund()");
        assertThat(output.toString().split(WARNING, -1)).hasSize(2);
    }

    @Test
    void aValueOfEnabledThatIsNeitherTrueNorFalseIsNoOffSwitch() {
        assertStartFailsWithReport(withoutDatabase.withUserConfiguration(PaymentController.class)
                .withPropertyValues("idempotency.enabled=off"))
                .contains("idempotency.enabled is 'off'");
    }

    @Test
    void withoutIdempotentMethodsTheStarterOnTheClassPathChangesNothing(CapturedOutput output) {
        withoutDatabase.withUserConfiguration(PlainController.class).run(context -> {
            assertThat(context).hasNotFailed();
            assertThat(context).doesNotHaveBean(IdempotencyEngine.class);
        });
        withoutDatabase.withUserConfiguration(PlainController.class).withPropertyValues("idempotency.enabled=false")
                .run(context -> assertThat(context).hasNotFailed());
        assertThat(output).doesNotContain(WARNING);
    }

    @Test
    void aWorkingSetupHasNoCheck() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        TestDatabases.contextRunner(database)
                .withConfiguration(AutoConfigurations.of(IdempotencyInactiveAutoConfiguration.class))
                .withUserConfiguration(PaymentController.class).run(context -> {
                    assertThat(context).hasNotFailed();
                    assertThat(context).hasSingleBean(IdempotentAdvisor.class);
                    assertThat(context).doesNotHaveBean(InertIdempotentCheck.class);
                });
    }

    /** The starter and a database, without Spring MVC. */
    private static final AutoConfigurations STARTER_WITH_DATABASE = AutoConfigurations.of(
            org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration.class,
            org.springframework.boot.jdbc.autoconfigure.DataSourceTransactionManagerAutoConfiguration.class,
            IdempotencyAutoConfiguration.class,
            IdempotencyInactiveAutoConfiguration.class);

    @Test
    void aReactiveApplicationWithTheAnnotationDoesNotStartEvenWithADatabase() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        assertStartFailsWithReport(new ReactiveWebApplicationContextRunner()
                .withConfiguration(STARTER_WITH_DATABASE)
                .withPropertyValues(database.springPropertyValues().toArray(String[]::new))
                .withUserConfiguration(RefundService.class))
                .contains("a reactive web application", "IdempotencyTemplate", "RefundService.refund()");
    }

    /**
     * An application that serves no requests (a worker sharing a web application's classes) starts, and says that the
     * annotation cannot work there; a call of an annotated method (a service method its message listener calls) is
     * refused, as in a web application, not run unprotected on every redelivery. Switched off on purpose, it runs.
     */
    @Test
    void anApplicationThatServesNoRequestsStartsAndRefusesCallsOfTheAnnotatedMethods(CapturedOutput output) {
        TestPostgres.Database database = TestPostgres.newDatabase();
        new ApplicationContextRunner()
                .withConfiguration(STARTER_WITH_DATABASE)
                .withPropertyValues(database.springPropertyValues().toArray(String[]::new))
                .withUserConfiguration(RefundService.class).run(context -> {
                    assertThat(context).hasNotFailed();
                    assertThat(context).hasSingleBean(io.idempotency.core.IdempotencyTemplate.class);
                    assertCallRefused(context.getBean(RefundService.class));
                });
        assertThat(output).contains("This is not a web application", "a call of one is refused",
                "RefundService.refund()");
        new ApplicationContextRunner() // a batch job without a database
                .withConfiguration(AutoConfigurations.of(IdempotencyAutoConfiguration.class,
                        IdempotencyInactiveAutoConfiguration.class))
                .withUserConfiguration(RefundService.class)
                .run(context -> {
                    assertThat(context).hasNotFailed();
                    assertCallRefused(context.getBean(RefundService.class));
                });
        new ApplicationContextRunner() // a mistyped switch is not the off switch: the start stops
                .withConfiguration(STARTER_WITH_DATABASE)
                .withPropertyValues(database.springPropertyValues().toArray(String[]::new))
                .withPropertyValues("idempotency.enabled=flase")
                .withUserConfiguration(RefundService.class)
                .run(context -> assertThat(context).getFailure()
                        .hasMessageContaining("idempotency.enabled is 'flase', which is neither true nor false")
                        .hasMessageContaining("RefundService.refund()"));
        new ApplicationContextRunner()
                .withConfiguration(STARTER_WITH_DATABASE)
                .withPropertyValues(database.springPropertyValues().toArray(String[]::new))
                .withPropertyValues("idempotency.enabled=false")
                .withUserConfiguration(RefundService.class)
                .run(context -> assertThat(context.getBean(RefundService.class).refund()).isEqualTo("refunded"));
    }

    private static void assertCallRefused(RefundService refunds) {
        assertThatThrownBy(refunds::refund).isInstanceOf(IllegalStateException.class)
                .hasMessageContaining("RefundService.refund()")
                .hasMessageContaining("called outside any HTTP request")
                .hasMessageContaining("IdempotencyTemplate");
    }

    /**
     * Switched off, the starter defines no {@code IdempotencyTemplate} either: a listener that needs one does not
     * start, as the README says, rather than run its work on every redelivery.
     */
    @Test
    void switchedOffAListenerThatNeedsTheTemplateDoesNotStart() {
        TestPostgres.Database database = TestPostgres.newDatabase();
        new ApplicationContextRunner()
                .withConfiguration(STARTER_WITH_DATABASE)
                .withPropertyValues(database.springPropertyValues().toArray(String[]::new))
                .withPropertyValues("idempotency.enabled=false")
                .withUserConfiguration(PaymentListener.class)
                .run(context -> assertThat(context).getFailure()
                        .hasRootCauseInstanceOf(org.springframework.beans.factory.NoSuchBeanDefinitionException.class)
                        .rootCause().hasMessageContaining("io.idempotency.core.IdempotencyTemplate"));
    }

    @Test
    void aDataSourceDefinedAfterTheStarterIsNamedAsTheCause() {
        assertStartFailsWithReport(withoutDatabase.withConfiguration(AutoConfigurations.of(LateDatabase.class))
                .withUserConfiguration(PaymentController.class))
                .contains("did not apply, although", "order the auto-configuration that defines them before",
                        "did not find any beans of type", "PaymentController.create()")
                .doesNotContain("Ancestor");
    }

    /** The scenario as an application meets it: auto-configuration from the starter's jar, DataSource excluded. */
    @Test
    void anApplicationThatExcludesTheDataSourceDoesNotStart() {
        SpringApplicationBuilder application = new SpringApplicationBuilder(NoDatabaseApplication.class)
                .web(WebApplicationType.SERVLET).properties("server.port=0");
        assertThatThrownBy(application::run).satisfies(failure -> assertThat(report(failure))
                .contains("no DataSource bean", "PaymentController.create()"));
        SpringApplicationBuilder lazily = new SpringApplicationBuilder(NoDatabaseApplication.class)
                .web(WebApplicationType.SERVLET).properties("server.port=0", "spring.main.lazy-initialization=true");
        assertThatThrownBy(lazily::run).satisfies(failure -> assertThat(report(failure))
                .contains("no DataSource bean", "PaymentController.create()"));
        SpringApplicationBuilder switchedOff = new SpringApplicationBuilder(NoDatabaseApplication.class)
                .web(WebApplicationType.SERVLET).properties("server.port=0", "idempotency.enabled=false");
        switchedOff.run().close();
    }

    @Test
    void anApplicationThatExcludesTheStarterIsToldSo(CapturedOutput output) {
        SpringApplicationBuilder application = new SpringApplicationBuilder(StarterExcludedApplication.class)
                .web(WebApplicationType.SERVLET).properties("server.port=0");
        assertThatThrownBy(application::run).satisfies(failure -> assertThat(report(failure))
                .contains("IdempotencyAutoConfiguration is excluded", "PaymentController.create()"));
        assertThat(output).as("Spring Boot's report, found through the starter's spring.factories")
                .contains("APPLICATION FAILED TO START", "IdempotencyAutoConfiguration is excluded", "Action:",
                        "Remove it from the exclusions");
    }

    /** Asserts that the application does not start; what is chained on is asserted of its {@link #report}. */
    private static AbstractStringAssert<?> assertStartFailsWithReport(
            AbstractApplicationContextRunner<?, ?, ?> runner) {
        return assertThat(report(StartupFailures.startupFailure(runner)));
    }

    /** What Spring Boot's startup failure report shows: the description, then the action. */
    private static String report(Throwable failure) {
        org.springframework.boot.diagnostics.FailureAnalysis analysis = new IdempotencyFailureAnalyzer().analyze(failure);
        assertThat(analysis).as("analysed: " + failure).isNotNull();
        return analysis.getDescription() + "\n" + analysis.getAction();
    }

    @RestController
    static class PaymentController {
        @PostMapping("/payments")
        @Idempotent
        public String create() {
            return "charged";
        }
    }

    @RestController
    static class PlainController {
        @PostMapping("/plain")
        public String create() {
            return "created";
        }
    }

    @Service
    static class PaymentListener {
        PaymentListener(io.idempotency.core.IdempotencyTemplate template) {
        }
    }

    @Service
    static class RefundService {
        @Idempotent
        public String refund() {
            return "refunded";
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class OnlyADataSource {
        @Bean
        DataSource dataSource() {
            return new DriverManagerDataSource("jdbc:postgresql://127.0.0.1:1/never-connected");
        }
    }

    /** A database that another auto-configuration defines, ordered after the starter's. */
    @AutoConfiguration(after = IdempotencyAutoConfiguration.class)
    static class LateDatabase {
        @Bean
        DataSource lateDataSource() {
            return new DriverManagerDataSource("jdbc:postgresql://127.0.0.1:1/never-connected");
        }

        @Bean
        PlatformTransactionManager lateTransactionManager(DataSource dataSource) {
            return new DataSourceTransactionManager(dataSource);
        }
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration(excludeName = "org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration")
    @Import(PaymentController.class)
    static class NoDatabaseApplication {
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration(exclude = IdempotencyAutoConfiguration.class,
            excludeName = "org.springframework.boot.jdbc.autoconfigure.DataSourceAutoConfiguration")
    @Import(PaymentController.class)
    static class StarterExcludedApplication {
    }
}
