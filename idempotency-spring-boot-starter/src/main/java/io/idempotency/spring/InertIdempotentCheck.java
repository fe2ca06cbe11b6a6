package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyEngine;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.aop.framework.autoproxy.AutoProxyUtils;
import org.springframework.aot.AotDetector;
import org.springframework.beans.BeansException;
import org.springframework.beans.factory.SmartInitializingSingleton;
import org.springframework.beans.factory.config.ConfigurableListableBeanFactory;
import org.springframework.boot.autoconfigure.condition.ConditionEvaluationReport;
import org.springframework.context.ApplicationContext;
import org.springframework.context.ApplicationContextAware;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.core.annotation.AnnotatedElementUtils;
import org.springframework.core.annotation.MergedAnnotations;
import org.springframework.util.ClassUtils;
import org.springframework.web.context.WebApplicationContext;
import org.springframework.web.method.HandlerMethod;
import org.springframework.web.servlet.mvc.method.annotation.RequestMappingHandlerMapping;

import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Optional;
import java.util.Set;

/**
 * Finds the {@code @Idempotent} methods of an application in which the annotation has no effect, because the starter
 * did not set up its advice, and either refuses to start (idempotency not switched off: the starter could not be
 * configured) or, with {@code idempotency.enabled=false}, logs one warning that lists them. An application that is
 * not a web application at all (no request reaches a handler; a worker using {@code IdempotencyTemplate}) starts with
 * a warning (and a call of such a method is refused: {@link OutsideRequestsAdvisor}), unless one of them is a message
 * listener or a scheduled task, which Spring calls there all the same, or {@code idempotency.enabled} holds neither
 * true nor false: it does not start.
 *
 * <p>Methods are found on the classes of every bean (not only Spring MVC handlers, so that a reactive or non-web
 * application is covered too) and on the handler methods of Spring MVC's mappings. Runs once the singletons exist,
 * before the web server accepts requests.
 */
class InertIdempotentCheck implements SmartInitializingSingleton, ApplicationContextAware {

    private static final Logger log = LoggerFactory.getLogger(InertIdempotentCheck.class);

    static final String ENABLED_PROPERTY = "idempotency.enabled";

    private static final int LISTED_METHODS = 20;

    /**
     * Annotations of methods that Spring calls outside any request: scheduled tasks, message listeners (a listener
     * declared on its class calls the methods marked as its handlers; a Kafka listener with retry topics, its
     * {@code @DltHandler} for the records whose retries ran out), and the message handlers of Spring's messaging
     * support, which STOMP over WebSocket and RSocket call for each message on threads of their own.
     */
    private static final Set<String> CALLED_OUTSIDE_REQUESTS = Set.of(
            "org.springframework.scheduling.annotation.Scheduled",
            "org.springframework.kafka.annotation.KafkaListener",
            "org.springframework.kafka.annotation.KafkaHandler",
            "org.springframework.kafka.annotation.DltHandler",
            "org.springframework.amqp.rabbit.annotation.RabbitListener",
            "org.springframework.amqp.rabbit.annotation.RabbitHandler",
            "org.springframework.jms.annotation.JmsListener",
            "org.springframework.pulsar.annotation.PulsarListener",
            "org.springframework.pulsar.annotation.PulsarReader",
            "io.awspring.cloud.sqs.annotation.SqsListener",
            "org.springframework.messaging.handler.annotation.MessageMapping",
            "org.springframework.messaging.simp.annotation.SubscribeMapping",
            "org.springframework.messaging.rsocket.annotation.ConnectMapping");

    private static final boolean MVC_PRESENT = ClassUtils.isPresent(
            "org.springframework.web.servlet.mvc.method.annotation.RequestMappingHandlerMapping",
            InertIdempotentCheck.class.getClassLoader());

    private ApplicationContext context;

    @Override
    public void setApplicationContext(ApplicationContext context) throws BeansException {
        this.context = context;
    }

    @Override
    public void afterSingletonsInstantiated() {
        if (!(context instanceof ConfigurableApplicationContext configurable)) {
            return;
        }
        ConfigurableListableBeanFactory beanFactory = configurable.getBeanFactory();
        if (beanFactory.getBeanNamesForType(IdempotentAdvisor.class, true, false).length > 0) {
            return; // the advice exists after all (defined late, by hand): the annotations work
        }
        List<Method> methods = idempotentMethods(beanFactory);
        if (methods.isEmpty()) {
            return; // the starter is on the class path, but nothing relies on it
        }
        String enabled = context.getEnvironment().getProperty(ENABLED_PROPERTY);
        if ("false".equalsIgnoreCase(enabled)) {
            log.warn("{}=false: @Idempotent has no effect on these methods, requests to them run again on every"
                    + " retry:{}", ENABLED_PROPERTY, list(methods));
            return;
        }
        // a mistyped value switches the starter off (it needs true) without being its off switch: refused below, in
        // a worker too, which would otherwise start without its IdempotencyTemplate, every call of these methods
        // refused, found only when the first message comes
        boolean mistyped = enabled != null && !"true".equalsIgnoreCase(enabled);
        if (!isWebApplication() && !mistyped) {
            // a listener or a scheduled task is called here all the same, where the annotation has no key to take:
            // every delivery or run would be refused (or, the calls not refused, every redelivery or rerun would run
            // its work again): a web application refuses it at startup too
            List<String> calledAllTheSame = methods.stream().flatMap(method -> calledOutsideRequestsAs(method)
                    .map(type -> method + " is @" + type).stream()).toList();
            if (!calledAllTheSame.isEmpty()) {
                throw new IdempotencyConfigurationException("@Idempotent cannot be used on these methods, which Spring"
                        + " calls outside any request, where it has no key to take: in this application, which serves"
                        + " no requests, every delivery of a message to them, or run of a task, would be refused:\n  - "
                        + String.join("\n  - ", calledAllTheSame),
                        "Remove @Idempotent from these methods and make their work idempotent with"
                        + " IdempotencyTemplate (a key of the message's or the task's own).");
            }
            // no requests are served here (a worker sharing the application's classes, say): nothing a client could
            // retry reaches these methods over HTTP, and code that is not a handler uses IdempotencyTemplate
            log.warn("This is not a web application, so @Idempotent, which serves Spring MVC handlers, cannot make"
                    + " these methods idempotent, and a call of one is refused (IllegalStateException); code that is"
                    + " not a handler uses IdempotencyTemplate:{}", list(methods));
            return;
        }
        Diagnosis diagnosis = diagnose(beanFactory, enabled);
        throw new IdempotencyConfigurationException("@Idempotent has no effect in this application, so it does not"
                + " start: a retried request to these methods would run again:" + list(methods)
                + "\nWhy: " + diagnosis.cause() + ".", capitalized(diagnosis.fix()) + ". To run these methods without"
                + " idempotency on purpose, set " + ENABLED_PROPERTY + "=false.");
    }

    /**
     * The simple name of the annotation by which Spring calls {@code method} outside any request (a message listener's,
     * a scheduled task's), if it has one.
     */
    static Optional<String> calledOutsideRequestsAs(Method method) {
        return MergedAnnotations.from(method, MergedAnnotations.SearchStrategy.TYPE_HIERARCHY).stream()
                .map(annotation -> annotation.getType().getName())
                .filter(CALLED_OUTSIDE_REQUESTS::contains).findFirst()
                .map(type -> type.substring(type.lastIndexOf('.') + 1));
    }

    /**
     * Handler methods Spring MVC maps, also those of handlers that are not beans; loaded only when Spring MVC is on the
     * class path.
     */
    private static final class Mvc {

        static void addIdempotentHandlerMethods(ConfigurableListableBeanFactory beanFactory, Set<Method> found) {
            for (RequestMappingHandlerMapping mapping : beanFactory.getBeansOfType(RequestMappingHandlerMapping.class,
                    false, false).values()) {
                for (HandlerMethod handler : mapping.getHandlerMethods().values()) {
                    if (AnnotatedElementUtils.hasAnnotation(handler.getMethod(), Idempotent.class)) {
                        found.add(handler.getMethod());
                    }
                }
            }
        }
    }

    /** Why the starter did not set up its advice, and what to do about it. */
    private record Diagnosis(String cause, String fix) {
    }

    /** The {@code @Idempotent} methods of the application's beans and Spring MVC handlers, in a stable order. */
    static List<Method> idempotentMethods(ConfigurableListableBeanFactory beanFactory) {
        Set<Method> found = new LinkedHashSet<>();
        Set<Class<?>> seen = new HashSet<>();
        for (String name : beanFactory.getBeanNamesForType(Object.class, true, false)) {
            Class<?> type;
            try {
                type = AutoProxyUtils.determineTargetClass(beanFactory, name);
            } catch (RuntimeException | LinkageError e) {
                continue; // a type that cannot be resolved (without creating the bean) has nothing to tell
            }
            Class<?> userClass = type == null ? null : ClassUtils.getUserClass(type);
            if (userClass != null && seen.add(userClass)) {
                found.addAll(IdempotentAdvisor.idempotentMethods(userClass));
            }
        }
        if (MVC_PRESENT) {
            Mvc.addIdempotentHandlerMethods(beanFactory, found);
        }
        List<Method> methods = new ArrayList<>(found);
        methods.sort(Comparator.comparing(Method::toString));
        return methods;
    }

    private Diagnosis diagnose(ConfigurableListableBeanFactory beanFactory, String enabled) {
        if (enabled != null && !"true".equalsIgnoreCase(enabled)) {
            return new Diagnosis(ENABLED_PROPERTY + " is '" + enabled + "', which is neither true nor false: the"
                    + " starter is off, but not on purpose", "set " + ENABLED_PROPERTY + " to true");
        }
        ConditionEvaluationReport report = ConditionEvaluationReport.get(beanFactory);
        String configuration = IdempotencyAutoConfiguration.class.getName();
        if (report.getExclusions().contains(configuration)) {
            return new Diagnosis(configuration + " is excluded from auto-configuration", "remove it from the"
                    + " exclusions (spring.autoconfigure.exclude, or the exclude of @SpringBootApplication or"
                    + " @EnableAutoConfiguration), or import it");
        }
        List<String> missing = new ArrayList<>();
        if (countBeans(beanFactory, "javax.sql.DataSource") == 0) {
            missing.add("no DataSource bean");
        }
        if (countBeans(beanFactory, "org.springframework.transaction.PlatformTransactionManager") == 0) {
            missing.add("no PlatformTransactionManager bean");
        }
        if (!missing.isEmpty()) {
            return new Diagnosis("the idempotency starter needs a DataSource (PostgreSQL) and the transaction manager"
                    + " of that DataSource, and the application has " + String.join(" and ", missing),
                    "configure the database (spring.datasource.url, and do not exclude Spring Boot's DataSource and"
                    + " transaction manager auto-configurations), or define both beans");
        }
        if (beanFactory.getBeanNamesForType(IdempotencyEngine.class, true, false).length > 0
                && !isServletWebApplication()) {
            return new Diagnosis("the @Idempotent advice serves Spring MVC handlers, and this is a reactive web"
                    + " application", "serve these endpoints with Spring"
                    + " MVC; code that is not a Spring MVC handler uses IdempotencyTemplate instead of the annotation");
        }
        if (AotDetector.useGeneratedArtifacts()) {
            // the conditions were decided when the application was processed, and no report of them is kept
            return new Diagnosis("the application was processed ahead of time with the starter off (Spring AOT decides"
                    + " the auto-configuration's conditions then: " + ENABLED_PROPERTY + "=false, or no DataSource or"
                    + " transaction manager at that time), and its settings now do not switch it back on",
                    "process the application again with the settings it runs with");
        }
        return new Diagnosis("the idempotency auto-configuration did not apply, although the application has a"
                + " DataSource and a PlatformTransactionManager now: its conditions do not see beans that an"
                + " auto-configuration ordered after it defines" + outcomes(report), "define the DataSource and the"
                + " transaction manager in the application's own configuration, or order the auto-configuration that"
                + " defines them before " + configuration);
    }

    /** A servlet or a reactive web application: one that serves requests. */
    private boolean isWebApplication() {
        return isServletWebApplication() || ClassUtils.getAllInterfacesForClassAsSet(context.getClass()).stream()
                .anyMatch(type -> type.getSimpleName().endsWith("ReactiveWebApplicationContext"));
    }

    private boolean isServletWebApplication() {
        return ClassUtils.isPresent("org.springframework.web.context.WebApplicationContext",
                InertIdempotentCheck.class.getClassLoader()) && context instanceof WebApplicationContext;
    }

    private static long countBeans(ConfigurableListableBeanFactory beanFactory, String className) {
        ClassLoader classLoader = InertIdempotentCheck.class.getClassLoader();
        if (!ClassUtils.isPresent(className, classLoader)) {
            return 0;
        }
        return beanFactory.getBeanNamesForType(ClassUtils.resolveClassName(className, classLoader), true, false).length;
    }

    /** The conditions of the starter's auto-configuration that did not match, as Spring Boot recorded them. */
    private static String outcomes(ConditionEvaluationReport report) {
        StringBuilder text = new StringBuilder();
        report.getConditionAndOutcomesBySource().forEach((source, outcomes) -> {
            String configuration = IdempotencyAutoConfiguration.class.getName();
            if (source.equals(configuration) || source.equals(configuration + "$Web")) {
                outcomes.forEach(outcome -> {
                    String message = outcome.getOutcome().getMessage();
                    if (!outcome.getOutcome().isMatch() && message != null && !message.startsWith("Ancestor ")) {
                        text.append(text.isEmpty() ? " (" : "; ").append(message);
                    }
                });
            }
        });
        return text.isEmpty() ? "" : text.append(')').toString();
    }

    private static String capitalized(String text) {
        return Character.toUpperCase(text.charAt(0)) + text.substring(1);
    }

    private static String list(List<Method> methods) {
        StringBuilder text = new StringBuilder();
        methods.stream().limit(LISTED_METHODS).forEach(method -> text.append("\n  - ").append(method));
        if (methods.size() > LISTED_METHODS) {
            text.append("\n  - and ").append(methods.size() - LISTED_METHODS).append(" more");
        }
        return text.toString();
    }
}
