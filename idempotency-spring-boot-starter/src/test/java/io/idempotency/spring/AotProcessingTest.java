package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.core.StoragePolicy;
import io.idempotency.jdbc.IdempotencySchema;
import org.aopalliance.intercept.MethodInterceptor;
import org.aopalliance.intercept.MethodInvocation;
import org.junit.jupiter.api.Test;
import org.springframework.aop.framework.AopProxyUtils;
import org.springframework.aop.framework.autoproxy.DefaultAdvisorAutoProxyCreator;
import org.springframework.aot.generate.ClassNameGenerator;
import org.springframework.aot.generate.DefaultGenerationContext;
import org.springframework.aot.generate.InMemoryGeneratedFiles;
import org.springframework.aot.hint.RuntimeHints;
import org.springframework.aot.hint.predicate.RuntimeHintsPredicates;
import org.springframework.context.annotation.AnnotationConfigApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.aot.ApplicationContextAotGenerator;
import org.springframework.context.support.GenericApplicationContext;
import org.springframework.javapoet.ClassName;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Spring's ahead-of-time processing of an application using the starter (as {@code process-aot} runs it before a
 * native image is built): what the starter reads by reflection or from the class path is in the runtime hints.
 */
public class AotProcessingTest {

    @Test
    void theSchemaScriptsAreResourcesOfTheImage() throws Exception {
        RuntimeHints hints = processAheadOfTime(PolicyController.class);

        assertThat(RuntimeHintsPredicates.resource().forResource(IdempotencySchema.POSTGRESQL_SCRIPT)).accepts(hints);
        assertThat(RuntimeHintsPredicates.resource().forResource(IdempotencySchema.POSTGRESQL_PARTITIONED_SCRIPT))
                .accepts(hints);
    }

    @Test
    void aStoragePolicyNamedByTheAnnotationCanBeInstantiated() throws Exception {
        RuntimeHints hints = processAheadOfTime(PolicyController.class);

        assertThat(RuntimeHintsPredicates.reflection()
                .onConstructorInvocation(OnlyCreated.class.getDeclaredConstructor())).accepts(hints);
        assertThat(RuntimeHintsPredicates.reflection()
                .onConstructorInvocation(FromAnInterface.class.getDeclaredConstructor())).accepts(hints);
    }

    @Test
    void aControllerWithoutPoliciesOfItsOwnAddsNone() throws Exception {
        RuntimeHints hints = processAheadOfTime(PlainController.class);

        assertThat(RuntimeHintsPredicates.reflection().onType(OnlyCreated.class)).rejects(hints);
    }

    @Test
    void theRequestBodyAKeyExpressionReadsAPropertyOfCanBeReadInTheImage() throws Exception {
        RuntimeHints hints = processAheadOfTime(RefundController.class);

        // as the README says: Spring's processing of a controller covers its @RequestBody types
        assertThat(RuntimeHintsPredicates.reflection()
                .onMethodInvocation(Refund.class.getMethod("reference"))).accepts(hints);
    }

    @Test
    void aBeanTheAdviceProxiesThroughItsInterfacesCanBeProxiedInTheImage() {
        RuntimeHints hints;
        try (AnnotationConfigApplicationContext context = new AnnotationConfigApplicationContext()) {
            context.register(InterfaceProxies.class);
            hints = processAheadOfTime(context);
        }

        assertThat(RuntimeHintsPredicates.proxies()
                .forInterfaces(AopProxyUtils.completeJdkProxyInterfaces(RefundApi.class))).accepts(hints);
    }

    private static RuntimeHints processAheadOfTime(Class<?> controller) {
        try (GenericApplicationContext context = new GenericApplicationContext()) {
            context.registerBean(controller);
            return processAheadOfTime(context);
        }
    }

    private static RuntimeHints processAheadOfTime(GenericApplicationContext context) {
        DefaultGenerationContext generation = new DefaultGenerationContext(
                new ClassNameGenerator(ClassName.get(AotProcessingTest.class)), new InMemoryGeneratedFiles());
        new ApplicationContextAotGenerator().processAheadOfTime(context, generation);
        return generation.getRuntimeHints();
    }

    /** The advice applied by an auto-proxy creator that proxies through interfaces, as without Spring Boot's default. */
    @Configuration(proxyBeanMethods = false)
    static class InterfaceProxies {

        @Bean
        static DefaultAdvisorAutoProxyCreator autoProxyCreator() {
            return new DefaultAdvisorAutoProxyCreator();
        }

        @Bean
        static IdempotentAdvisor idempotentAdvisor() {
            return new IdempotentAdvisor((MethodInterceptor) MethodInvocation::proceed);
        }

        @Bean
        PolicyController policyController() {
            return new PolicyController();
        }
    }

    /** Stores 201 only. */
    public static class OnlyCreated implements StoragePolicy {
        @Override
        public boolean isStorable(int status) {
            return status == 201;
        }
    }

    /** Stores 2xx only. */
    public static class FromAnInterface implements StoragePolicy {
        @Override
        public boolean isStorable(int status) {
            return status / 100 == 2;
        }
    }

    public interface RefundApi {
        @Idempotent(storagePolicy = FromAnInterface.class)
        String refund();
    }

    @RestController
    public static class PolicyController implements RefundApi {
        @Idempotent(storagePolicy = OnlyCreated.class)
        @PostMapping("/orders")
        public String create() {
            return "{}";
        }

        @Override
        @PostMapping("/refunds")
        public String refund() {
            return "{}";
        }
    }

    /** A refund, identified by its reference. */
    public record Refund(String reference, long amount) {
    }

    @RestController
    public static class RefundController {
        @Idempotent(key = "#refund.reference")
        @PostMapping("/refunds")
        public String refund(@RequestBody Refund refund) {
            return "{}";
        }
    }

    @RestController
    public static class PlainController {
        @Idempotent
        @PostMapping("/orders")
        public String create() {
            return "{}";
        }
    }
}
