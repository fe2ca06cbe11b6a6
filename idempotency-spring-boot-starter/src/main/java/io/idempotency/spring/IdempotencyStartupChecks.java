package io.idempotency.spring;

import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.IdempotencyStore;
import io.idempotency.core.Idempotent;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StoragePolicy;
import io.idempotency.core.Transactions;
import io.idempotency.jdbc.JdbcIdempotencyStore;
import io.idempotency.jdbc.SpringTransactions;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.aop.Advisor;
import org.springframework.aop.MethodMatcher;
import org.springframework.aop.PointcutAdvisor;
import org.springframework.aop.config.AopConfigUtils;
import org.springframework.aop.framework.Advised;
import org.springframework.aop.framework.ProxyConfig;
import org.springframework.aop.framework.autoproxy.AbstractAdvisorAutoProxyCreator;
import org.springframework.aop.framework.autoproxy.AutoProxyUtils;
import org.springframework.aop.framework.autoproxy.DefaultAdvisorAutoProxyCreator;
import org.springframework.aop.framework.autoproxy.InfrastructureAdvisorAutoProxyCreator;
import org.springframework.aop.scope.ScopedObject;
import org.springframework.aop.support.AopUtils;
import org.springframework.aot.hint.ExecutableMode;
import org.springframework.aot.hint.RuntimeHints;
import org.springframework.aot.hint.RuntimeHintsRegistrar;
import org.springframework.beans.BeansException;
import org.springframework.beans.factory.BeanFactoryUtils;
import org.springframework.beans.factory.FactoryBean;
import org.springframework.beans.factory.NoSuchBeanDefinitionException;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.beans.factory.SmartInitializingSingleton;
import org.springframework.beans.factory.annotation.BeanFactoryAnnotationUtils;
import org.springframework.beans.factory.config.BeanDefinition;
import org.springframework.beans.factory.config.ConfigurableListableBeanFactory;
import org.springframework.boot.web.servlet.AbstractFilterRegistrationBean;
import org.springframework.boot.web.servlet.DelegatingFilterProxyRegistrationBean;
import org.springframework.boot.web.servlet.FilterRegistrationBean;
import org.springframework.context.ApplicationContext;
import org.springframework.context.ApplicationListener;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.ImportRuntimeHints;
import org.springframework.context.event.ContextRefreshedEvent;
import org.springframework.core.MethodParameter;
import org.springframework.core.Ordered;
import org.springframework.core.ReactiveAdapterRegistry;
import org.springframework.core.ResolvableType;
import org.springframework.core.annotation.AnnotatedElementUtils;
import org.springframework.core.annotation.AnnotationAwareOrderComparator;
import org.springframework.core.annotation.MergedAnnotations;
import org.springframework.core.annotation.OrderUtils;
import org.springframework.http.HttpEntity;
import org.springframework.jdbc.datasource.DataSourceTransactionManager;
import org.springframework.jdbc.datasource.TransactionAwareDataSourceProxy;
import org.springframework.jdbc.datasource.lookup.AbstractRoutingDataSource;
import org.springframework.orm.jpa.DefaultJpaDialect;
import org.springframework.orm.jpa.JpaTransactionManager;
import org.springframework.orm.jpa.support.OpenEntityManagerInViewFilter;
import org.springframework.scheduling.annotation.AsyncAnnotationAdvisor;
import org.springframework.scheduling.config.TaskManagementConfigUtils;
import org.springframework.transaction.InvalidIsolationLevelException;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.transaction.TransactionDefinition;
import org.springframework.transaction.TransactionManager;
import org.springframework.transaction.annotation.AnnotationTransactionAttributeSource;
import org.springframework.transaction.interceptor.TransactionAttribute;
import org.springframework.transaction.interceptor.TransactionAttributeSource;
import org.springframework.transaction.interceptor.TransactionInterceptor;
import org.springframework.transaction.support.AbstractPlatformTransactionManager;
import org.springframework.transaction.support.ResourceTransactionManager;
import org.springframework.util.ClassUtils;
import org.springframework.util.ReflectionUtils;
import org.springframework.util.StringUtils;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.InitBinder;
import org.springframework.web.bind.annotation.ModelAttribute;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.RequestMapping;
import org.springframework.web.bind.annotation.RequestMethod;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.ResponseStatus;
import org.springframework.web.method.HandlerMethod;
import org.springframework.web.servlet.mvc.method.RequestMappingInfo;
import org.springframework.web.servlet.mvc.method.annotation.RequestMappingHandlerMapping;

import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.Future;
import javax.sql.DataSource;

/**
 * Looks at every {@code @Idempotent} endpoint once the handler mappings exist: learns the HTTP methods they serve
 * ({@link IdempotentMethods}), and refuses to start an application whose endpoints could not keep their promise:
 * <ul>
 *   <li>an async return type ({@code DeferredResult}, {@code Callable}, {@code CompletableFuture},
 *       {@code StreamingResponseBody}, {@code ResponseBodyEmitter}/SSE, reactive types, also any other type Spring's
 *       {@code ReactiveAdapterRegistry} adapts, such as {@code java.util.concurrent.Flow.Publisher}): the answer would
 *       be written on another thread, after the transaction had to end;</li>
 *   <li>a primitive return type: a replayed request returns without running the method;</li>
 *   <li>a {@code @ResponseStatus} with a reason and an error status: Spring MVC answers with {@code sendError},
 *       whose error page cannot be stored, so every request would be rolled back;</li>
 *   <li>a {@code @Transactional} handler whose propagation leaves the request's transaction
 *       ({@code REQUIRES_NEW}, {@code NOT_SUPPORTED}, {@code NEVER}), or is {@code NESTED} where the transaction
 *       manager cannot make the savepoint that needs (JPA's), or that asks for an isolation above READ
 *       COMMITTED, which the request's transaction (READ COMMITTED, for the claim) cannot give it — also an
 *       {@code @Idempotent} method that a functional route calls;</li>
 *   <li>an expression on {@code @Idempotent} that does not parse or reads a variable no evaluation has, a lease
 *       that is not a positive duration or names a property that is not set, or a storage policy that cannot be
 *       created — also on an {@code @Idempotent} method that a functional route calls, whose HTTP methods are learnt
 *       too;</li>
 *   <li>an intent-first endpoint whose own lease the retention does not cover (TTL below the retry window plus
 *       that lease), or is invalid — also an {@code @Idempotent} method that a functional route calls;</li>
 *   <li>a transaction manager that does not manage the store's DataSource: the claim and the handler's writes would
 *       not commit together — also one that a {@code @Transactional} handler names
 *       ({@code @Transactional(transactionManager = …)}), or one it names that does not join the request's
 *       transaction (JDBC's beside JPA's on one DataSource), or a plain {@code @Transactional} when no transaction
 *       manager is the default;</li>
 *   <li>a bean with {@code @Idempotent} methods that the advice does not reach: made before Spring's auto-proxy
 *       creator (a post-processor depends on it), so never proxied, or with a final {@code @Idempotent} method, which
 *       the proxy of its class cannot intercept — also a bean whose method a functional route calls;</li>
 *   <li>an {@code @Idempotent} method that Spring calls outside any request ({@code @Scheduled}, a message
 *       listener), where there is no key to take;</li>
 *   <li>an {@code @Idempotent} method that Spring MVC calls besides the handler ({@code @ModelAttribute},
 *       {@code @InitBinder}, {@code @ExceptionHandler}): it is never the handler, so every request it is called for
 *       would fail;</li>
 *   <li>a {@code @Transactional} {@code @Idempotent} method whose transaction advice the application ordered
 *       before (outside) the {@code @Idempotent} advice: its transaction would be open when the advice begins the
 *       request's, which it refuses, so every request would fail;</li>
 *   <li>an {@code @Idempotent} method that Spring's async advice reaches ({@code @Async} on it or its class, with
 *       {@code @EnableAsync}): the request would be answered before the method ran on another thread, where the
 *       {@code @Idempotent} advice cannot run it;</li>
 *   <li>a scope the column cannot hold — the annotation's, or the HTTP method and route template of a handler — longer
 *       than 255 characters or holding a NUL character or half of a surrogate pair: every request would fail — also
 *       the annotation's scope of an {@code @Idempotent} method that a functional route calls;</li>
 *   <li>two handler methods that would share a default scope (the same HTTP method and route template, told apart by
 *       a header, a media type or a version): a key used with one would replay the other's answer.</li>
 * </ul>
 */
@ImportRuntimeHints(IdempotencyStartupChecks.ReflectedMethods.class)
class IdempotencyStartupChecks implements SmartInitializingSingleton, ApplicationListener<ContextRefreshedEvent> {

    private static final Logger log = LoggerFactory.getLogger(IdempotencyStartupChecks.class);


    private static final List<String> ASYNC_TYPES = List.of(
            "org.springframework.web.context.request.async.DeferredResult",
            "org.springframework.web.context.request.async.WebAsyncTask",
            "org.springframework.web.servlet.mvc.method.annotation.StreamingResponseBody",
            "org.springframework.web.servlet.mvc.method.annotation.ResponseBodyEmitter",
            "org.reactivestreams.Publisher",
            "reactor.core.publisher.Flux",
            "reactor.core.publisher.Mono",
            "kotlinx.coroutines.flow.Flow",
            "io.reactivex.rxjava3.core.Single",
            "io.reactivex.rxjava3.core.Maybe",
            "io.reactivex.rxjava3.core.Completable",
            "io.reactivex.rxjava3.core.Observable",
            "io.reactivex.rxjava3.core.Flowable",
            "io.smallrye.mutiny.Uni",
            "io.smallrye.mutiny.Multi");

    private static final boolean JPA_PRESENT = ClassUtils.isPresent("org.springframework.orm.jpa.JpaTransactionManager",
            IdempotencyStartupChecks.class.getClassLoader());
    private static final boolean NATIVE_HIBERNATE_PRESENT = JPA_PRESENT && ClassUtils.isPresent(
            "org.springframework.orm.jpa.hibernate.HibernateTransactionManager",
            IdempotencyStartupChecks.class.getClassLoader()) && ClassUtils.isPresent("org.hibernate.SessionFactory",
            IdempotencyStartupChecks.class.getClassLoader());
    private static final boolean JPA_WEB_PRESENT = JPA_PRESENT && ClassUtils.isPresent(
            "org.springframework.orm.jpa.support.OpenEntityManagerInViewFilter",
            IdempotencyStartupChecks.class.getClassLoader());

    private final ApplicationContext context;
    private final ObjectProvider<IdempotencyProperties> properties;
    private final ObjectProvider<StoragePolicy> storagePolicy;
    private final IdempotentMethods idempotentMethods;

    IdempotencyStartupChecks(ApplicationContext context, ObjectProvider<IdempotencyProperties> properties,
                             ObjectProvider<StoragePolicy> storagePolicy, IdempotentMethods idempotentMethods) {
        this.context = context;
        this.idempotentMethods = idempotentMethods;
        this.properties = properties;
        this.storagePolicy = storagePolicy;
    }

    @Override
    public void afterSingletonsInstantiated() {
        List<String> problems = new ArrayList<>();
        List<Method> intentFirst = new ArrayList<>();
        Set<Method> handlers = new HashSet<>();
        // the handlers (controller and method: one method can serve two controllers) under each default scope
        // per default scope, the handlers that share it and the API version and other conditions each is mapped to
        Map<String, Map<String, VersionedMapping>> defaultScopes = new LinkedHashMap<>();
        // the configured methods too, so that handlers these mappings do not list are still served
        Set<String> methods = new HashSet<>(properties.getObject().getMethods().stream()
                .map(IdempotentEndpoint::methodName).toList());
        int idempotentEndpoints = checkHandlers(context, problems, intentFirst, handlers, defaultScopes, methods);
        List<Method> intentFirstElsewhere = new ArrayList<>();
        int elsewhere = methodsElsewhere(handlers, methods, intentFirstElsewhere, problems);
        defaultScopeProblems(defaultScopes, problems);
        unadvised(problems);
        if (idempotentEndpoints > 0 && JPA_WEB_PRESENT) {
            Jpa.openInViewFilterProblem(context).ifPresent(problems::add);
        }
        if (!problems.isEmpty()) {
            throw new IdempotencyConfigurationException("@Idempotent cannot be used on these methods:\n  - "
                    + String.join("\n  - ", problems), "Change each method as its line says, or remove @Idempotent"
                    + " from it.");
        }
        if (idempotentEndpoints + elsewhere > 0) {
            // the advice finds these at the first idempotent request: two of a kind (neither @Primary) would fail
            // every such request with 500, so the application fails to start instead, as Spring says why
            CallerResolver callers = context.getBean(CallerResolver.class);
            context.getBean(ProblemResponses.class);
            routingDataSourceWarning(callers).ifPresent(log::warn);
            stricterIsolationWarning().ifPresent(log::warn);
        }
        idempotentMethods.learn(methods);
        if (IdempotencyEngine.DEFAULT_DOWNSTREAM_SECRET.equals(properties.getObject().getDownstreamKeySecret())) {
            intentFirst.addAll(intentFirstElsewhere);
            warnOfTheDefaultDownstreamSecret(intentFirst);
        }
    }

    /**
     * Checks the {@code @Idempotent} handlers of {@code source}'s own request mappings (not its parent's), adding what
     * it finds to the collections given: the problems, the intent-first handlers, the handlers, the default scopes and
     * the HTTP methods the endpoints are idempotent for. Returns how many endpoints are idempotent.
     */
    private int checkHandlers(ApplicationContext source, List<String> problems, List<Method> intentFirst,
                              Set<Method> handlers, Map<String, Map<String, VersionedMapping>> defaultScopes,
                              Set<String> methods) {
        int endpoints = 0;
        for (RequestMappingHandlerMapping mapping : source.getBeansOfType(RequestMappingHandlerMapping.class).values()) {
            Map<RequestMappingInfo, Set<String>> takenVerbs = verbsTakenFromMappingsWithoutMethods(mapping);
            for (Map.Entry<RequestMappingInfo, HandlerMethod> mapped : mapping.getHandlerMethods().entrySet()) {
                Method method = annotatedMethod(mapped.getValue());
                Idempotent idempotent = AnnotatedElementUtils.findMergedAnnotation(method, Idempotent.class);
                if (idempotent != null) {
                    endpoints++;
                    handlers.add(method);
                    problemWith(method, mapped.getValue().getBeanType()).ifPresent(problems::add);
                    calledOutsideRequests(method).ifPresent(problems::add);
                    calledBesidesTheHandler(method).ifPresent(problems::add);
                    // works as long as the entity is found: a warning, as the handlers that delete it are few
                    boundEntityWarning(mapped.getValue()).ifPresent(log::warn);
                    try {
                        IdempotencyProperties settings = properties.getObject();
                        IdempotentEndpoint endpoint = IdempotentEndpoint.of(method, idempotent, settings.getMethods(),
                                storagePolicy.getObject(), settings.getLease(), context.getEnvironment());
                        methods.addAll(endpoint.methods);
                        Optional<String> neverApplies = neverApplies(method, mapped.getKey(), endpoint);
                        neverApplies.ifPresent(problems::add);
                        if (neverApplies.isEmpty()) {
                            // an endpoint the annotation never applies to is refused for that alone
                            reasonProblem(mapped.getValue()).ifPresent(problems::add);
                            // read as Spring's transaction advice reads them: on the method and class it calls
                            Class<?> target = targetClass(mapped.getValue());
                            propagationProblem(method, target).ifPresent(problems::add);
                            transactionManagerProblem(method, target).ifPresent(problems::add);
                        }
                        unstorableScope(method, mapped.getKey(), endpoint).ifPresent(problems::add);
                        if (endpoint.scope.isEmpty()) {
                            Set<String> taken = takenVerbs.getOrDefault(mapped.getKey(), Set.of());
                            defaultScopes(mapped.getKey(), endpoint).stream()
                                    .filter(scope -> !taken.contains(scope.substring(0, scope.indexOf(' '))))
                                    .forEach(scope -> defaultScopes.computeIfAbsent(scope, s -> new TreeMap<>())
                                            .put(mapped.getValue().toString(),
                                                    VersionedMapping.of(mapped.getKey(), endpoint)));
                        }
                        if (endpoint.mode == IdempotencyMode.INTENT_FIRST) {
                            intentFirst.add(method);
                        }
                        if (endpoint.mode == IdempotencyMode.INTENT_FIRST && !idempotent.lease().isBlank()) {
                            IdempotencyAutoConfiguration.retentionProblem(settings, endpoint.lease,
                                    "the lease of " + method).ifPresent(problems::add);
                        }
                    } catch (IllegalStateException e) {
                        problems.add(e.getMessage());
                    }
                }
            }
        }
        return endpoints;
    }

    /** Handlers that share a default scope, and are not one operation, each in {@code problems}. */
    private static void defaultScopeProblems(Map<String, Map<String, VersionedMapping>> defaultScopes,
                                             List<String> problems) {
        defaultScopes.forEach((scope, mappings) -> {
            Set<String> sharing = mappings.keySet();
            // handlers of one route for different API versions are one operation in several versions: a key is one
            // request, and the version a retry names is part of its fingerprint, so the same key with another version
            // is refused as a mismatch, never answered with the other version's answer. Only when nothing but the
            // version tells them apart: with a header (or a media type, a parameter) beside it, one version can reach
            // either handler (a baseline "1.0+" takes a 2.0 request without the header), and the version the request
            // names no longer tells which one answered
            List<VersionedMapping> all = List.copyOf(mappings.values());
            boolean oneOperationInVersions = all.stream().allMatch(mapping -> mapping.version() != null
                            && mapping.otherConditions().equals(all.get(0).otherConditions()))
                    && all.stream().map(VersionedMapping::version).distinct().count() == all.size();
            // handlers told apart by their parameters alone, each fingerprinted as a whole (the query string and the
            // body, where a form's parameters are): a key used with one and sent to the other differs in the very
            // parameters that chose the handler, so it is refused as a mismatch, never answered with the other's answer
            boolean toldApartByTheFingerprint = all.stream().allMatch(mapping -> mapping.wholeRequestFingerprinted()
                            && java.util.Objects.equals(mapping.version(), all.get(0).version())
                            && mapping.otherConditions().subList(1, mapping.otherConditions().size())
                            .equals(all.get(0).otherConditions().subList(1, all.get(0).otherConditions().size())))
                    && all.stream().map(mapping -> mapping.otherConditions().get(0)).distinct().count() == all.size();
            if (sharing.size() > 1 && !oneOperationInVersions && !toldApartByTheFingerprint) {
                problems.add(sharing + " share the default scope '"
                        + scope + "' (HTTP method and route template), so a key used with one would be answered with"
                        + " the other's stored answer; give each its own scope with @Idempotent(scope = …), or the"
                        + " same one only if they are one operation");
            }
        });
    }

    /**
     * A context of which this application's is an ancestor — a DispatcherServlet's own web application context, made
     * when the servlet starts (at its first request, by default) — has beans of its own, which the post-processors of
     * this context, its auto-proxy creator among them, do not reach: an {@code @Idempotent} controller there would run
     * without the advice, every retry again, while the filter lets its requests through. Its refresh is refused
     * instead, so the servlet fails to start and says why. A child context with an auto-proxy creator of its own that
     * applies its parent's advisors too ({@code DefaultAdvisorAutoProxyCreator}, AspectJ's) takes this context's
     * {@code @Idempotent} advice: its handlers are then checked as this context's are, and the HTTP methods they are
     * idempotent for added to those the filter wraps (the servlet's context is refreshed before its first request
     * reaches the filter).
     */
    @Override
    public void onApplicationEvent(ContextRefreshedEvent event) {
        ApplicationContext refreshed = event.getApplicationContext();
        if (refreshed == context || !(refreshed instanceof ConfigurableApplicationContext child)
                || !descendsFrom(refreshed, context)) {
            return;
        }
        ConfigurableListableBeanFactory beanFactory = child.getBeanFactory();
        // an auto-proxy creator of its own that applies the application context's advisors: not the one
        // @EnableTransactionManagement brings, which applies only the infrastructure advisors of its own context
        AbstractAdvisorAutoProxyCreator creator = null;
        for (String name : beanFactory.getBeanNamesForType(AbstractAdvisorAutoProxyCreator.class, true, false)) {
            AbstractAdvisorAutoProxyCreator candidate = beanFactory.getBean(name, AbstractAdvisorAutoProxyCreator.class);
            if (appliesAdvisorsOfItsParent(candidate)) {
                creator = candidate;
            }
        }
        List<String> problems = new ArrayList<>();
        List<String> beanProblems = new ArrayList<>();
        List<Advisor> advisors = null; // read once, for the first bean not made yet
        for (IdempotentBean found : idempotentBeans(beanFactory)) {
            boolean unadvised = found.bean() == null
                    ? creator == null // else proxied when it is made, by the child's own auto-proxy creator
                    : !isAdvised(found.bean()) && !Mocks.isMock(found.bean());
            if (unadvised) {
                found.methods().forEach(method -> problems.add(method + " (bean '" + found.name() + "')"));
            } else if (found.bean() == null) {
                advisors = advisors != null ? advisors : advisorsOf(beanFactory, creator);
                notMadeYet(beanFactory, creator, advisors, found, beanProblems);
            } else if (!Mocks.isMock(found.bean())) {
                advisedProblems((Advised) found.bean(), found.type(), found.methods(), beanProblems);
            }
        }
        if (!problems.isEmpty()) {
            throw new IdempotencyConfigurationException("@Idempotent has no effect on these methods of beans of "
                    + refreshed + ", a child of the application's context (such as a DispatcherServlet's own): the"
                    + " application context's auto-proxy creator does not reach the beans of another context, so"
                    + " every retry would run them again:\n  - " + String.join("\n  - ", problems), "Declare these"
                    + " beans in the application's context, or give the child context an auto-proxy creator that"
                    + " applies the advisors of its parent too (a static @Bean DefaultAdvisorAutoProxyCreator in its"
                    + " configuration, or @EnableAspectJAutoProxy with AspectJ on the class path).");
        }
        problems.addAll(beanProblems);
        Set<String> methods = new HashSet<>();
        Map<String, Map<String, VersionedMapping>> defaultScopes = new LinkedHashMap<>();
        int endpoints = checkHandlers(refreshed, problems, new ArrayList<>(), new HashSet<>(), defaultScopes, methods);
        defaultScopeProblems(defaultScopes, problems);
        if (!problems.isEmpty()) {
            throw new IdempotencyConfigurationException("@Idempotent cannot be used on these methods of " + refreshed
                    + ", a child of the application's context (such as a DispatcherServlet's own):\n  - "
                    + String.join("\n  - ", problems), "Change each method as its line says, or remove @Idempotent"
                    + " from it.");
        }
        if (endpoints > 0) {
            idempotentMethods.learnAlso(methods);
        }
    }

    /** The name of the {@code @Idempotent} advisor's bean: its {@code @Bean} method's. */
    private static final String IDEMPOTENT_ADVISOR_BEAN_NAME = "idempotentAdvisor";

    /**
     * Whether {@code creator}, a child context's, applies the advisors of its parent, the {@code @Idempotent} one among
     * them: those that look for advisors in the ancestors too (the default one, the AspectJ ones), unless they take
     * only the infrastructure advisors of their own context ({@code @EnableTransactionManagement}'s) or only advisors
     * of a name prefix the {@code @Idempotent} one's does not have.
     */
    private static boolean appliesAdvisorsOfItsParent(AbstractAdvisorAutoProxyCreator creator) {
        if (creator instanceof InfrastructureAdvisorAutoProxyCreator) {
            return false;
        }
        return !(creator instanceof DefaultAdvisorAutoProxyCreator named) || !named.isUsePrefix()
                || named.getAdvisorBeanNamePrefix() == null
                || IDEMPOTENT_ADVISOR_BEAN_NAME.startsWith(named.getAdvisorBeanNamePrefix());
    }

    private static boolean descendsFrom(ApplicationContext descendant, ApplicationContext ancestor) {
        for (ApplicationContext parent = descendant.getParent(); parent != null; parent = parent.getParent()) {
            if (parent == ancestor) {
                return true;
            }
        }
        return false;
    }

    /**
     * The {@code @Idempotent} methods of beans that no handler mapping lists among {@code handlers}: those a functional
     * route calls. Their HTTP methods are added to {@code methods}, so that the filter wraps the requests that reach
     * them; the intent-first ones to {@code intentFirst}. Their settings must be valid, and the lease of an intent-first
     * one holds its claims as long as a controller method's does: it must fit the retention too.
     *
     * @return how many there are
     */
    private int methodsElsewhere(Set<Method> handlers, Set<String> methods, List<Method> intentFirst,
                                 List<String> problems) {
        if (!(context instanceof ConfigurableApplicationContext configurable)) {
            return 0;
        }
        int found = 0;
        IdempotencyProperties settings = properties.getObject();
        for (Method method : InertIdempotentCheck.idempotentMethods(configurable.getBeanFactory())) {
            Idempotent idempotent = AnnotatedElementUtils.findMergedAnnotation(method, Idempotent.class);
            if (handlers.contains(method) || idempotent == null) {
                continue;
            }
            found++;
            calledOutsideRequests(method).ifPresent(problems::add);
            calledBesidesTheHandler(method).ifPresent(problems::add);
            try {
                IdempotentEndpoint endpoint = IdempotentEndpoint.of(method, idempotent, settings.getMethods(),
                        storagePolicy.getObject(), settings.getLease(), context.getEnvironment());
                if (endpoint.methods.isEmpty()) {
                    // as a handler mapped to none of its methods is refused: the filter would wrap no request for
                    // it, and every call would run as if it had no annotation
                    problems.add(method + " is @Idempotent for no HTTP method: its annotation names none, and"
                            + " idempotency.methods is empty, so no request that reaches it would be made idempotent."
                            + " Name its methods (methods = \"POST\"), or set idempotency.methods.");
                    continue;
                }
                methods.addAll(endpoint.methods);
                asyncProblem(method, method.getDeclaringClass()).ifPresent(problems::add);
                // its own scope needs no route to be checked (a default one, the route's, is not known here)
                unstorableScope(method, List.of(endpoint.scope)).ifPresent(problems::add);
                // its @Idempotent advice opens the request's transaction as a controller method's does
                propagationProblem(method, method.getDeclaringClass()).ifPresent(problems::add);
                transactionManagerProblem(method, method.getDeclaringClass()).ifPresent(problems::add);
                if (endpoint.mode == IdempotencyMode.INTENT_FIRST) {
                    intentFirst.add(method);
                    if (!idempotent.lease().isBlank()) {
                        IdempotencyAutoConfiguration.retentionProblem(settings, endpoint.lease, "the lease of " + method)
                                .ifPresent(problems::add);
                    }
                }
            } catch (IllegalStateException e) {
                problems.add(e.getMessage());
            }
        }
        return found;
    }

    /**
     * The beans made so far whose {@code @Idempotent} methods the advice does not reach, so that every retry would run
     * them again: a bean made before Spring's auto-proxy creator existed (one a post-processor depends on: Spring logs
     * that it "is not eligible for getting processed by all BeanPostProcessors") is not proxied at all, and a final
     * method is not intercepted by the proxy of its class. Beans not made yet (lazy ones, those made per scope) are
     * post-processed when they are made, but a final method of theirs is refused now ({@link #notMadeYet}).
     */
    private void unadvised(List<String> problems) {
        if (!(context instanceof ConfigurableApplicationContext configurable)) {
            return;
        }
        ConfigurableListableBeanFactory beanFactory = configurable.getBeanFactory();
        Object creator = beanFactory.containsSingleton(AopConfigUtils.AUTO_PROXY_CREATOR_BEAN_NAME)
                ? beanFactory.getSingleton(AopConfigUtils.AUTO_PROXY_CREATOR_BEAN_NAME) : null;
        List<Advisor> advisors = null; // read once, for the first bean not made yet
        for (IdempotentBean found : idempotentBeans(beanFactory)) {
            if (found.bean() == null) {
                advisors = advisors != null ? advisors : advisorsOf(beanFactory, creator);
                notMadeYet(beanFactory, creator, advisors, found, problems);
                continue;
            }
            Object bean = found.bean();
            Class<?> type = found.type();
            List<Method> idempotent = found.methods();
            String name = found.name();
            if (!isAdvised(bean)) {
                // Asked only here: asking Mockito starts its inline mock maker (seconds: it attaches an agent to the
                // JVM), which an application whose tests made no mock would pay at every start.
                if (Mocks.isMock(bean)) {
                    continue; // a test's mock or spy stands in for the bean, unadvised on purpose
                }
                problems.add(idempotent.get(0) + (idempotent.size() > 1 ? " (and " + (idempotent.size() - 1)
                        + " more of its class)" : "") + " is on bean '" + name + "', which was made before Spring's"
                        + " auto-proxy creator could advise it (a BeanPostProcessor or BeanFactoryPostProcessor depends"
                        + " on it: Spring logs that it is not eligible for getting processed by all"
                        + " BeanPostProcessors), so @Idempotent has no effect on it and every retry would run it"
                        + " again; make that post-processor's @Bean method static, or let it reach the bean lazily"
                        + " (@Lazy, ObjectProvider)");
            } else {
                advisedProblems((Advised) bean, type, idempotent, problems);
            }
        }
    }

    /**
     * The {@code @Idempotent} methods of a bean its proxy advises that the advice still does not reach, or reaches too
     * late: private, static or final ones, {@code @Async} ones, and those whose transaction advice comes first.
     */
    private static void advisedProblems(Advised advised, Class<?> type, List<Method> idempotent,
                                        List<String> problems) {
        idempotent.stream().map(IdempotencyStartupChecks::notOverridableProblem).flatMap(Optional::stream)
                .forEach(problems::add);
        if (AopUtils.isCglibProxy(advised)) {
            idempotent.stream().filter(IdempotencyStartupChecks::isFinalOnly)
                    .forEach(method -> problems.add(finalProblem(method)));
        }
        for (Advisor advisor : advised.getAdvisors()) {
            if (advisor instanceof AsyncAnnotationAdvisor async) {
                asyncProblems(async, type, idempotent, problems);
            }
        }
        transactionAdviceOutside(advised.getAdvisors(), type, idempotent, problems);
    }

    /**
     * The {@code @Idempotent} methods of a bean whose transaction advice comes before the {@code @Idempotent} advice in
     * its proxy's chain, so runs outside it: an application that orders Spring's transaction advice first
     * ({@code @EnableTransactionManagement(order = …)} below {@link IdempotentAdvisor#ORDER}), or an advisor of its own
     * around a {@code TransactionInterceptor}. A {@code @Transactional} handler's transaction would then be open when
     * the advice begins the request's, which it refuses to join (joined, the claim would commit when the handler
     * returns, before the answer is stored): every request to the endpoint would fail with 500.
     */
    private static void transactionAdviceOutside(Advisor[] advisors, Class<?> type, List<Method> idempotent,
                                                 List<String> problems) {
        for (Method method : idempotent) {
            for (Advisor advisor : advisors) {
                if (advisor instanceof IdempotentAdvisor) {
                    break; // what comes after it runs inside it
                }
                // the pointcut first: asking for the advice may make the bean it names, which a proxy does only
                // when a method it advises is first called
                if (applies(advisor, method, type) && advisor.getAdvice() instanceof TransactionInterceptor) {
                    problems.add(method + " is @Transactional, and its transaction advice (order "
                            + (advisor instanceof Ordered ordered ? ordered.getOrder() : Ordered.LOWEST_PRECEDENCE)
                            + ") runs outside the @Idempotent advice (order " + IdempotentAdvisor.ORDER + "): the"
                            + " handler's transaction would be open before the advice begins the request's, so every"
                            + " request would fail; order the transaction advice after the @Idempotent advice"
                            + " (@EnableTransactionManagement(order = …) above " + IdempotentAdvisor.ORDER
                            + ", or its default)");
                    break;
                }
            }
        }
    }

    /** Whether {@code advisor} advises {@code method} of {@code type}; true of an advisor that has no pointcut. */
    static boolean applies(Advisor advisor, Method method, Class<?> type) {
        if (!(advisor instanceof PointcutAdvisor pointcutAdvisor)) {
            return true;
        }
        return pointcutAdvisor.getPointcut().getClassFilter().matches(type)
                && pointcutAdvisor.getPointcut().getMethodMatcher().matches(method, type);
    }

    /**
     * A bean with {@code @Idempotent} methods, of the class they are read from; {@code bean} is null when it is not made
     * yet (lazy, or made per scope), its type then read from its definition.
     */
    private record IdempotentBean(String name, Class<?> type, List<Method> methods, Object bean) {
    }

    /**
     * The beans of {@code beanFactory} (not of its ancestors) with {@code @Idempotent} methods, but scoped proxies and
     * factory beans, and beans whose type cannot be told without making them. A scoped bean ({@code @RequestScope},
     * {@code @SessionScope}) is found by its target's name ({@code scopedTarget.…}), not made yet: its instances, made
     * per scope, are advised when made, and what its scoped proxy calls is theirs.
     */
    private static List<IdempotentBean> idempotentBeans(ConfigurableListableBeanFactory beanFactory) {
        List<IdempotentBean> found = new ArrayList<>();
        for (String name : beanFactory.getBeanNamesForType(Object.class, true, false)) {
            Object bean = null;
            Class<?> type;
            if (beanFactory.containsSingleton(name)) {
                bean = beanFactory.getSingleton(name);
                if (bean == null || bean instanceof ScopedObject || bean instanceof FactoryBean<?>) {
                    continue;
                }
                type = AopUtils.getTargetClass(bean);
            } else {
                try {
                    type = beanFactory.getType(name, false);
                } catch (RuntimeException | LinkageError e) {
                    continue; // a type that cannot be resolved without making the bean has nothing to tell
                }
                if (type == null || FactoryBean.class.isAssignableFrom(type)) {
                    continue;
                }
            }
            type = ClassUtils.getUserClass(type);
            // a JDK proxy class's methods are its interfaces': no handler is mapped on them
            List<Method> idempotent = Proxy.isProxyClass(type) ? List.of() : IdempotentAdvisor.idempotentMethods(type);
            if (!idempotent.isEmpty()) {
                found.add(new IdempotentBean(name, type, idempotent, bean));
            }
        }
        return found;
    }

    /** Whether {@code bean} is a proxy that the {@code @Idempotent} advice is part of. */
    private static boolean isAdvised(Object bean) {
        return bean instanceof Advised advised
                && Arrays.stream(advised.getAdvisors()).anyMatch(IdempotentAdvisor.class::isInstance);
    }

    /** A final method that is neither private nor static (those are refused for that, whatever the proxy). */
    private static boolean isFinalOnly(Method method) {
        int modifiers = method.getModifiers();
        return Modifier.isFinal(modifiers) && !Modifier.isPrivate(modifiers) && !Modifier.isStatic(modifiers);
    }

    /**
     * A private or static {@code @Idempotent} method: no proxy overrides it, whether made by class or through
     * interfaces, so only the bean's own code (or the class's) calls it, past the advice; every retry would run it
     * again. The proxied bean itself looks advised, as the advisor matches the method.
     */
    private static Optional<String> notOverridableProblem(Method method) {
        String kind = Modifier.isPrivate(method.getModifiers()) ? "private"
                : Modifier.isStatic(method.getModifiers()) ? "static" : null;
        return Optional.ofNullable(kind).map(modifier -> method + " is " + modifier + ": no proxy can intercept it,"
                + " so it is called past the advice, @Idempotent has no effect on it and every retry would run it"
                + " again; make it a public method of a bean and call it through the bean (from another bean)");
    }

    private static String finalProblem(Method method) {
        return method + " is final: the proxy of its class cannot intercept it, so @Idempotent has no effect on it and"
                + " every retry would run it again; remove final";
    }

    /**
     * A bean not made yet — lazy ({@code spring.main.lazy-initialization}, {@code @Lazy}), or made per scope — is
     * proxied when it is made, after the start, by its class unless it is proxied through interfaces: a final
     * {@code @Idempotent} method is refused now, as it would then run without the advice, every retry again. A final
     * method that an interface declares is reached through the interface's on a proxy made through interfaces. So is an
     * {@code @Async} one when async processing is enabled (see {@link #asyncProblems}), and one whose transaction advice
     * its proxy will run outside the {@code @Idempotent} advice (see {@link #transactionAdviceOutside}).
     */
    /**
     * @param creator  the context's auto-proxy creator
     * @param advisors the advisors it applies ({@link #advisorsOf})
     */
    private static void notMadeYet(ConfigurableListableBeanFactory beanFactory, Object creator, List<Advisor> advisors,
                                   IdempotentBean found, List<String> problems) {
        String name = found.name();
        Class<?> type = found.type();
        List<Method> idempotent = found.methods();
        if (beanFactory.containsBean(TaskManagementConfigUtils.ASYNC_ANNOTATION_PROCESSOR_BEAN_NAME)) {
            // the async advice, with the annotations it acts on by default, that the bean will get when it is made
            asyncProblems(new AsyncAnnotationAdvisor(), type, idempotent, problems);
        }
        idempotent.stream().map(IdempotencyStartupChecks::notOverridableProblem).flatMap(Optional::stream)
                .forEach(problems::add);
        transactionAdviceOutside(AopUtils.findAdvisorsThatCanApply(advisors, type)
                .toArray(Advisor[]::new), type, idempotent, problems);
        List<Method> finals = idempotent.stream().filter(IdempotencyStartupChecks::isFinalOnly).toList();
        if (finals.isEmpty()) {
            return;
        }
        boolean byClass = AutoProxyUtils.shouldProxyTargetClass(beanFactory, name)
                || creator instanceof ProxyConfig config && config.isProxyTargetClass();
        Set<Class<?>> interfaces = ClassUtils.getAllInterfacesForClassAsSet(type);
        for (Method method : finals) {
            boolean throughInterface = !byClass && interfaces.stream().anyMatch(implemented ->
                    ClassUtils.hasMethod(implemented, method.getName(), method.getParameterTypes()));
            if (!throughInterface) {
                problems.add(finalProblem(method));
            }
        }
    }

    /**
     * The advisors {@code creator} (the context's auto-proxy creator; null: none, so none are) will give a bean it
     * proxies, in the order of its proxy's chain: the {@code Advisor} beans it takes, as it finds them (also those of
     * the ancestors; for the one that takes only infrastructure advisors, those its own context defines with that
     * role; for one taking a name prefix, those named so), sorted by their order. One that cannot be had now (being
     * made, or failing) is passed over, as the creator itself does.
     */
    private static List<Advisor> advisorsOf(ConfigurableListableBeanFactory beanFactory, Object creator) {
        List<Advisor> advisors = new ArrayList<>();
        if (!(creator instanceof AbstractAdvisorAutoProxyCreator)) {
            return advisors;
        }
        for (String name : BeanFactoryUtils.beanNamesForTypeIncludingAncestors(beanFactory, Advisor.class, true,
                false)) {
            if (creator instanceof InfrastructureAdvisorAutoProxyCreator && !(beanFactory.containsBeanDefinition(name)
                    && beanFactory.getBeanDefinition(name).getRole() == BeanDefinition.ROLE_INFRASTRUCTURE)) {
                continue;
            }
            if (creator instanceof DefaultAdvisorAutoProxyCreator named && named.isUsePrefix()
                    && named.getAdvisorBeanNamePrefix() != null && !name.startsWith(named.getAdvisorBeanNamePrefix())) {
                continue;
            }
            if (beanFactory.isCurrentlyInCreation(name)) {
                continue;
            }
            try {
                advisors.add(beanFactory.getBean(name, Advisor.class));
            } catch (BeansException e) {
                // as the auto-proxy creator does for one being made; one that fails will fail it too, and say why
            }
        }
        AnnotationAwareOrderComparator.sort(advisors);
        return advisors;
    }

    /**
     * The {@code @Idempotent} methods of a bean that Spring's async advice ({@code @Async} with {@code @EnableAsync},
     * on the method or its class) also reaches. That advice comes first: the call returns at once, so Spring MVC
     * answers the request (200, nothing in it) before anything was done, and the body is handed to another thread,
     * where there is no request, no key and no transaction, and the {@code @Idempotent} advice cannot run it. Every
     * request would be told that it succeeded while its work is lost.
     */
    private static void asyncProblems(AsyncAnnotationAdvisor async, Class<?> type, List<Method> idempotent,
                                      List<String> problems) {
        if (!async.getPointcut().getClassFilter().matches(type)) {
            return;
        }
        MethodMatcher matcher = async.getPointcut().getMethodMatcher();
        idempotent.stream().filter(method -> matcher.matches(method, type))
                .forEach(method -> problems.add(method + " is @Async (on the method or its class): the request"
                        + " would be answered before the method runs, and it would run on another thread, without"
                        + " the request's key and transaction, where @Idempotent cannot run it, so every request"
                        + " would be told it succeeded while its work is lost; remove @Async, and hand only the"
                        + " work that may run after the answer to an @Async method of another bean"));
    }

    /**
     * A store whose DataSource routes each connection to one of several DataSources (Spring's
     * {@code AbstractRoutingDataSource}, also behind a wrapper that reports what it wraps), while callers are named by
     * the principal alone. Routed by tenant, a database or schema each, the records of the tenants are kept apart, but
     * what the engine keeps in memory — the answers, the requests running — is looked up by caller, scope and key:
     * one tenant's request would be answered with another's answer, and its own work never done. A warning, not a
     * refusal: a DataSource that sends read-only transactions to a replica is fine, and cannot be told apart.
     */
    private Optional<String> routingDataSourceWarning(CallerResolver callers) {
        DataSource dataSource = storeDataSource();
        if (dataSource == null || callers != CallerResolver.PRINCIPAL || !routes(dataSource)) {
            return Optional.empty();
        }
        return Optional.of("The idempotency store's DataSource " + dataSource + " routes each connection to one of"
                + " several DataSources (an AbstractRoutingDataSource), and callers are named by the principal alone."
                + " If it routes by tenant (a database or schema each), the tenants' records are kept apart, but the"
                + " answers and running requests this instance keeps in memory are not: a request of one tenant under"
                + " the key, caller name and payload of another tenant's request would be answered with that one's"
                + " answer, and its own work never done. Define a CallerResolver that names the tenant. Note also that"
                + " the table is created or checked, cleaned up and swept only in the database the DataSource routes"
                + " to outside any request. Nothing to do where it only sends read-only transactions to a replica: the"
                + " claim and the handler's writes run in the request's transaction, which is not read-only.");
    }

    /**
     * A store whose DataSource's connections default to REPEATABLE READ or SERIALIZABLE (the application's choice for
     * its transactions, or the database's own default: InnoDB's is REPEATABLE READ): the request's transaction runs at
     * READ COMMITTED, which the claim needs, so the {@code @Idempotent} handlers run without that level — what stops
     * the start when a handler asks for the level itself, but here through the pool. A warning, not a refusal:
     * handlers may lock what they protect. The level is the one the auto-configuration asked for the starter's
     * transactions (nothing when it could not be asked, or when the application defines its own transactions).
     */
    private Optional<String> stricterIsolationWarning() {
        IdempotencyAutoConfiguration.StoreIsolation isolation = context
                .getBeanProvider(IdempotencyAutoConfiguration.StoreIsolation.class).getIfAvailable();
        if (isolation == null || isolation.level() == null) {
            return Optional.empty();
        }
        DataSource dataSource = isolation.dataSource();
        String level = switch (isolation.level()) {
            case Connection.TRANSACTION_REPEATABLE_READ -> "REPEATABLE READ";
            case Connection.TRANSACTION_SERIALIZABLE -> "SERIALIZABLE";
            default -> null;
        };
        return Optional.ofNullable(level).map(stricter -> "The connections of the idempotency store's DataSource "
                + dataSource + " default to " + stricter + ", but @Idempotent handlers run at READ COMMITTED, not at "
                + stricter + ": they run in the request's transaction, which holds the claim and runs at READ COMMITTED"
                + " (the claim needs it), so their reads and writes lose the protection the pool's level gives the"
                + " application's other transactions (a balance checked and then debited could be debited twice"
                + " concurrently). Guard what they protect with row locks (SELECT ... FOR UPDATE) or optimistic locking"
                + " (@Version); where nothing else needs the stricter level, set the pool to READ COMMITTED ("
                + readCommittedSetting(dataSource) + "), which also spares each request the statements that set the"
                + " level.");
    }

    /**
     * The setting that makes the connections of {@code dataSource} default to READ COMMITTED, for the pools Spring Boot
     * configures: each pool has a property of its own, and the others' bind to nothing.
     */
    static String readCommittedSetting(DataSource dataSource) {
        DataSource pool = unwrap(dataSource);
        for (Class<?> type = pool == null ? null : pool.getClass(); type != null; type = type.getSuperclass()) {
            switch (type.getName()) {
                case "com.zaxxer.hikari.HikariDataSource" -> {
                    return "with Spring Boot's HikariCP: spring.datasource.hikari.transaction-isolation"
                            + "=TRANSACTION_READ_COMMITTED";
                }
                case "org.apache.commons.dbcp2.BasicDataSource" -> {
                    return "with Spring Boot's Commons DBCP2: spring.datasource.dbcp2.default-transaction-isolation=2";
                }
                case "org.apache.tomcat.jdbc.pool.DataSourceProxy" -> {
                    return "with Spring Boot's Tomcat JDBC: spring.datasource.tomcat.default-transaction-isolation=2";
                }
                default -> {
                }
            }
        }
        return "the pool's default transaction isolation, or the database role's default_transaction_isolation";
    }

    /** Whether {@code dataSource} is, or wraps, a DataSource that routes each connection; false if it cannot say. */
    private static boolean routes(DataSource dataSource) {
        try {
            return dataSource.isWrapperFor(AbstractRoutingDataSource.class);
        } catch (SQLException | RuntimeException e) {
            return false;
        }
    }

    /**
     * Warns that intent-first endpoints derive their downstream keys with the library's public default secret: the
     * controller methods and the methods functional routes call, in {@code intentFirst}.
     */
    private void warnOfTheDefaultDownstreamSecret(List<Method> endpoints) {
        Set<Method> intentFirst = new LinkedHashSet<>(endpoints); // each method once, however many mappings list it
        if (!intentFirst.isEmpty()) {
            // two applications on one third-party account, both with the default, derive the same downstream key for
            // the same caller, scope and key: the third party would take the second one's call for a rerun
            log.warn("idempotency.downstream-key-secret is not set, and {} endpoint(s) call third parties in"
                    + " intent-first mode (e.g. {}): their downstream keys are derived with the library's public"
                    + " default. Set a secret of this application's own, the same on every instance.",
                    intentFirst.size(), intentFirst.iterator().next());
        }
    }

    /**
     * The handler's method, or the method that carries {@code @Idempotent} for it: a controller proxied through an
     * interface is mapped with the interface's methods, and the annotation may be on the implementing one.
     */
    private Method annotatedMethod(HandlerMethod handler) {
        Method method = handler.getMethod();
        if (AnnotatedElementUtils.hasAnnotation(method, Idempotent.class)) {
            return method;
        }
        Class<?> target = beanTargetClass(handler);
        Method annotated = target == null ? null : IdempotentAdvisor.annotated(method, target);
        return annotated != null ? annotated : method;
    }

    /**
     * The class of the object a handler's calls reach: its bean type, or — for a controller proxied through an
     * interface, whose bean type is the proxy class — the class behind the proxy, where Spring's transaction advice
     * reads {@code @Transactional} (on the implementing method or class) and the type-level {@code @Qualifier}.
     */
    private Class<?> targetClass(HandlerMethod handler) {
        Class<?> beanType = handler.getBeanType();
        if (!Proxy.isProxyClass(beanType)) {
            return beanType;
        }
        Class<?> target = beanTargetClass(handler);
        return target != null && !Proxy.isProxyClass(target) ? target : beanType;
    }

    /** The class behind the bean a handler is mapped on, as the auto-proxy creator saw it; null if not known. */
    private Class<?> beanTargetClass(HandlerMethod handler) {
        if (!(handler.getBean() instanceof String name)
                || !(context.getAutowireCapableBeanFactory() instanceof ConfigurableListableBeanFactory beanFactory)
                || !beanFactory.containsBeanDefinition(name)) {
            return null;
        }
        return AutoProxyUtils.determineTargetClass(beanFactory, name);
    }

    /**
     * An endpoint mapped only to HTTP methods its {@code @Idempotent} does not apply to (e.g. a {@code @PutMapping}
     * under the default POST and PATCH): the annotation would silently do nothing.
     */
    private static Optional<String> neverApplies(Method method, RequestMappingInfo mapping, IdempotentEndpoint endpoint) {
        if (!idempotentVerbs(mapping, endpoint).isEmpty()) {
            return Optional.empty();
        }
        return Optional.of(method + " is mapped to " + mapping.getMethodsCondition().getMethods().stream()
                .map(Enum::name).sorted().toList()
                + " only, but its @Idempotent applies to " + endpoint.methods.stream().sorted().toList()
                + ", so it would never take effect; list the endpoint's methods in @Idempotent(methods = …) or in"
                + " idempotency.methods");
    }

    /**
     * The HTTP methods that a mapping without methods never serves, because another mapping of {@code handlerMapping}
     * names them and is otherwise the same (route, headers, parameters, media types, version): Spring MVC prefers the
     * one that names the method. A {@code @RequestMapping("/x")} beside a {@code @PostMapping("/x")} gets no POST, so
     * the two share no default scope.
     */
    private static Map<RequestMappingInfo, Set<String>> verbsTakenFromMappingsWithoutMethods(
            RequestMappingHandlerMapping handlerMapping) {
        Map<RequestMappingInfo, Set<String>> taken = new HashMap<>();
        for (RequestMappingInfo info : handlerMapping.getHandlerMethods().keySet()) {
            Set<RequestMethod> named = info.getMethodsCondition().getMethods();
            if (!named.isEmpty()) {
                taken.computeIfAbsent(info.mutate().methods().build(), i -> new HashSet<>())
                        .addAll(named.stream().map(Enum::name).toList());
            }
        }
        return taken;
    }

    /** The default scopes of a mapping: each HTTP method it is idempotent for, with each of its route templates. */
    private static List<String> defaultScopes(RequestMappingInfo mapping, IdempotentEndpoint endpoint) {
        return defaultScopes(mapping, idempotentVerbs(mapping, endpoint));
    }

    private static List<String> defaultScopes(RequestMappingInfo mapping, List<String> verbs) {
        List<String> scopes = new ArrayList<>();
        for (String pattern : mapping.getPatternValues()) {
            verbs.forEach(verb -> scopes.add(verb + " " + pattern));
        }
        return scopes;
    }

    /**
     * A scope the column cannot hold: every request would fail. The scope is the annotation's, or the HTTP method
     * and route template of the request (HEAD too where GET is served).
     */
    private static Optional<String> unstorableScope(Method method, RequestMappingInfo mapping,
                                                    IdempotentEndpoint endpoint) {
        List<String> scopes = List.of(endpoint.scope);
        if (endpoint.scope.isEmpty()) {
            List<String> verbs = new ArrayList<>(idempotentVerbs(mapping, endpoint));
            if (verbs.contains("GET") && !verbs.contains("HEAD")) {
                // Spring MVC serves HEAD with a GET mapping, and the HEAD is idempotent under "HEAD " and the route,
                // one character longer than the GET's scope
                verbs.add("HEAD");
            }
            scopes = defaultScopes(mapping, verbs);
        }
        return unstorableScope(method, scopes);
    }

    /**
     * The refusal of the first of {@code scopes} that the column cannot hold, if one cannot: longer than it (measured
     * as {@link ScopedKey} measures it, in UTF-16 units), or holding a NUL character or half of a surrogate pair,
     * which {@link ScopedKey} refuses on every request.
     */
    private static Optional<String> unstorableScope(Method method, List<String> scopes) {
        for (String scope : scopes) {
            if (scope.length() > ScopedKey.MAX_LENGTH) {
                // cut at a code point, so that the message itself holds no half of a pair
                String start = scope.substring(0, scope.offsetByCodePoints(0, 40));
                return Optional.of(method + " has the scope '" + shown(start) + "…' of " + scope.length()
                        + " characters, more than " + ScopedKey.MAX_LENGTH + "; give it a shorter one with"
                        + " @Idempotent(scope = …)");
            }
            if (!ScopedKey.storable(scope)) {
                return Optional.of(method + " has the scope '" + shown(scope) + "', which holds a NUL"
                        + " character or half of a surrogate pair: no text column holds it, so every request would"
                        + " fail; give it a scope of whole characters with @Idempotent(scope = …)");
            }
        }
        return Optional.empty();
    }

    /** {@code text} as {@link ScopedKey#printable} shows it, and each half of a surrogate pair as a Java escape. */
    private static String shown(String text) {
        StringBuilder shown = new StringBuilder();
        ScopedKey.printable(text).codePoints().forEach(c -> {
            if (c <= Character.MAX_VALUE && Character.isSurrogate((char) c)) {
                shown.append(String.format("\\u%04x", c));
            } else {
                shown.appendCodePoint(c);
            }
        });
        return shown.toString();
    }

    /**
     * The HTTP methods an idempotent request to this mapping can have: those the mapping serves that the annotation
     * applies to (all the annotation's when the mapping serves every method).
     */
    private static List<String> idempotentVerbs(RequestMappingInfo mapping, IdempotentEndpoint endpoint) {
        Set<RequestMethod> mapped = mapping.getMethodsCondition().getMethods();
        return mapped.isEmpty() ? List.copyOf(endpoint.methods)
                : mapped.stream().map(Enum::name).filter(endpoint::appliesTo).toList();
    }

    /**
     * A {@code @ResponseStatus} with a reason and an error status (or none, which is 500), on the handler or its
     * class: Spring MVC answers every request with {@code sendError} once the handler has returned, and the container
     * renders that answer after the filter, so there is never an answer to store and every request, retries included,
     * is rolled back under the status named. A success or a redirect through {@code sendError} is an answer like any
     * other ({@link DeferredResponse#isErrorSent()}): stored and replayed with its status and headers, without a body.
     */
    private static Optional<String> reasonProblem(HandlerMethod handler) {
        // found as Spring MVC finds it: on the method, else on the controller
        ResponseStatus status = handler.getMethodAnnotation(ResponseStatus.class);
        if (status == null) {
            status = AnnotatedElementUtils.findMergedAnnotation(handler.getBeanType(), ResponseStatus.class);
        }
        if (status == null || !StringUtils.hasText(status.reason()) || DeferredResponse.isSuccessOrRedirect(
                status.code().value())) {
            return Optional.empty();
        }
        return Optional.of(handler.getMethod() + " has @ResponseStatus with a reason: Spring MVC then answers with"
                + " sendError, whose answer the container renders after the transaction has ended, so nothing could"
                + " be stored and every request would be rolled back under status " + status.code().value()
                + "; remove the reason, or return a ResponseEntity");
    }

    /**
     * The {@code @Transactional} settings of {@code method} on {@code beanType} as the application's transaction advice
     * reads them (jakarta {@code @Transactional} included); null for none.
     */
    private TransactionAttribute transactionAttribute(Method method, Class<?> beanType) {
        TransactionAttributeSource source = context.getBeanProvider(TransactionAttributeSource.class)
                .getIfUnique(() -> new AnnotationTransactionAttributeSource(false));
        return source.getTransactionAttribute(method, beanType);
    }

    /**
     * A {@code @Transactional} on the handler (or its class; also on an {@code @Idempotent} method a functional route
     * calls) whose propagation leaves the request's transaction:
     * {@code REQUIRES_NEW} commits the handler's writes when it returns, before the answer is stored, and
     * {@code NOT_SUPPORTED} runs them outside any transaction; either way they stay when the request is rolled back
     * (an answer that is not stored, a failed commit) and run again on the retry. {@code NEVER} fails every request.
     * Or one that joins it asking for {@code REPEATABLE_READ} or {@code SERIALIZABLE}: the request's transaction runs
     * at READ COMMITTED, Spring ignores the isolation of a transaction it joins, and PostgreSQL cannot raise it after
     * the claim's statement, so the handler would lose the protection it asks for without a word. Or one that joins it
     * with a timeout, which Spring ignores in a transaction it joins just as well.
     */
    private Optional<String> propagationProblem(Method method, Class<?> beanType) {
        TransactionAttribute attribute = transactionAttribute(method, beanType);
        if (attribute == null) {
            return Optional.empty();
        }
        String isolation = switch (attribute.getIsolationLevel()) {
            case TransactionDefinition.ISOLATION_REPEATABLE_READ -> "REPEATABLE_READ";
            case TransactionDefinition.ISOLATION_SERIALIZABLE -> "SERIALIZABLE";
            default -> null;
        };
        String propagation = switch (attribute.getPropagationBehavior()) {
            case TransactionDefinition.PROPAGATION_REQUIRES_NEW -> "REQUIRES_NEW";
            case TransactionDefinition.PROPAGATION_NOT_SUPPORTED -> "NOT_SUPPORTED";
            case TransactionDefinition.PROPAGATION_NEVER -> "NEVER";
            default -> null;
        };
        if (attribute.getPropagationBehavior() == TransactionDefinition.PROPAGATION_NESTED) {
            Optional<String> nested = nestedProblem(method);
            if (nested.isPresent()) {
                return nested;
            }
        }
        if (propagation == null && isolation != null) {
            // Spring ignores the isolation of a transaction it joins, and PostgreSQL cannot change it once a
            // statement (the claim) has run: the handler would silently run at READ COMMITTED
            return Optional.of(method + " is @Transactional with isolation " + isolation + ": it joins"
                    + " the request's transaction, which runs at READ COMMITTED (the claim needs it), and Spring ignores"
                    + " the isolation of a transaction it joins, so it would silently run at READ COMMITTED; remove the"
                    + " isolation and guard what it protects with row locks (SELECT ... FOR UPDATE) or optimistic"
                    + " locking (@Version)");
        }
        if (propagation == null && attribute.getTimeout() != TransactionDefinition.TIMEOUT_DEFAULT) {
            // ignored as well: the handler's statements would run unbounded, where it asked for a bound
            return Optional.of(method + " is @Transactional with timeout " + attribute.getTimeout() + "s: it joins"
                    + " the request's transaction, and Spring ignores the timeout of a transaction it joins, so its"
                    + " statements would run without the bound; remove the timeout and bound them another way (such as"
                    + " PostgreSQL's statement_timeout: SET LOCAL statement_timeout in the handler; on MariaDB,"
                    + " SET STATEMENT max_statement_time = ... FOR a statement)");
        }
        if (propagation == null) {
            return Optional.empty();
        }
        return Optional.of(method + " is @Transactional with propagation " + propagation + ": its writes"
                + " would not commit in the transaction that holds the claim and the stored answer, and would stay when"
                + " the request is rolled back; use the default propagation (REQUIRED)");
    }

    /**
     * A {@code NESTED} handler: inside the request's transaction it is a savepoint, which JPA's transaction manager
     * cannot make (it allows no nested transactions unless told to, and Spring's JPA dialects make no savepoints), nor
     * one told not to allow them. Every request with a key would fail, while one without a key runs (no transaction
     * is open then), so it would show only once keys are sent. JDBC's makes the savepoint.
     */
    private Optional<String> nestedProblem(Method method) {
        PlatformTransactionManager request = requestTransactionManager();
        String why = null;
        if (request instanceof AbstractPlatformTransactionManager manager && !manager.isNestedTransactionAllowed()) {
            why = "allows no nested transactions (nestedTransactionAllowed)";
        } else if (JPA_PRESENT && Jpa.isJpa(request) && !Jpa.mayMakeSavepoints(request)) {
            why = "is JPA's, whose dialect makes no savepoints";
        }
        return Optional.ofNullable(why).map(reason -> method + " is @Transactional with propagation NESTED, which in"
                + " the request's transaction needs a savepoint, and the transaction manager " + request + " " + reason
                + ", so every request with a key would fail; use the default propagation (REQUIRED)");
    }

    /**
     * A {@code @Transactional} on the handler (or its class; also on an {@code @Idempotent} method a functional route
     * calls) whose transaction manager — the one it names, else the application's default — does not manage the
     * store's DataSource (a second database's, or the primary one while the records are kept in a second): the
     * handler's writes commit in a transaction of their own when it returns, before the answer is stored, and stay
     * when the request is rolled back, as with {@code REQUIRES_NEW}. So does one that manages that DataSource but is
     * of another kind than the request's (see {@link #joins}). A name that matches no transaction manager, or none
     * with several and no primary one, fails every request.
     */
    private Optional<String> transactionManagerProblem(Method method, Class<?> beanType) {
        TransactionAttribute attribute = transactionAttribute(method, beanType);
        if (attribute == null) {
            return Optional.empty();
        }
        String qualifier = attribute.getQualifier();
        String which;
        TransactionManager named;
        // without a name of its own, a @Qualifier on the class names it when it names one, as for Spring's
        // transaction interceptor (a qualifier for other beans leaves the default)
        String typeQualifier = StringUtils.hasText(qualifier) ? null
                : BeanFactoryAnnotationUtils.getQualifierValue(beanType);
        TransactionManager typeQualified = StringUtils.hasText(typeQualifier)
                ? qualifiedTransactionManager(typeQualifier) : null;
        if (typeQualified != null) {
            which = "transaction manager '" + typeQualifier + "' (the @Qualifier of its class)";
            named = typeQualified;
        } else if (!StringUtils.hasText(qualifier)) {
            // the primary one, as Spring's transaction interceptor takes it: not the store's when the application
            // keeps its records in a second database, with transactions of its own on that database's
            which = "the application's default transaction manager";
            // a TransactionManagementConfigurer's, which the interceptor holds, else the primary one
            TransactionInterceptor interceptor = context.getBeanProvider(TransactionInterceptor.class).getIfUnique();
            named = interceptor != null && interceptor.getTransactionManager() != null
                    ? interceptor.getTransactionManager()
                    : context.getBeanProvider(TransactionManager.class).getIfUnique();
            if (named == null) {
                String[] candidates = context.getBeanNamesForType(TransactionManager.class);
                if (candidates.length < 2) {
                    return Optional.empty();
                }
                // the interceptor asks for the single (or primary) transaction manager: none, every request fails
                return Optional.of(method + " is @Transactional without naming a transaction manager, and none of the"
                        + " application's " + Arrays.stream(candidates).map(name -> "'" + name + "'").toList()
                        + " is the primary one, so Spring finds no transaction manager for it and every request to it"
                        + " would fail; name the transaction manager of the idempotency store's DataSource, or make"
                        + " it the primary one");
            }
        } else {
            which = "transaction manager '" + qualifier + "'";
            try {
                // as Spring's transaction interceptor finds it
                named = BeanFactoryAnnotationUtils.qualifiedBeanOfType(context.getAutowireCapableBeanFactory(),
                        TransactionManager.class, qualifier);
            } catch (NoSuchBeanDefinitionException e) {
                return Optional.of(method + " is @Transactional with transaction manager '" + qualifier + "', which"
                        + " names no single transaction manager bean, so every request to it would fail; name the"
                        + " transaction manager of the idempotency store's DataSource, or none");
            }
        }
        DataSource dataSource = storeDataSource();
        if (dataSource == null) {
            return Optional.empty(); // a store of the application's own: where it keeps its records is its business
        }
        String problem = null;
        if (!(named instanceof PlatformTransactionManager platform)) {
            problem = "is not a PlatformTransactionManager";
        } else {
            try {
                checkTransactionManager(platform, dataSource);
            } catch (IdempotencyConfigurationException e) {
                problem = keepsNoSynchronization(platform)
                        ? "keeps no transaction synchronization (SYNCHRONIZATION_NEVER), so the idempotency store cannot"
                        + " tell that its transactions are open"
                        : "does not manage the idempotency store's DataSource";
            }
            PlatformTransactionManager request = requestTransactionManager();
            if (problem == null && request != null && !joins(platform, request)) {
                return Optional.of(method + " is @Transactional with " + which + ", which manages the idempotency"
                        + " store's DataSource but does not join the request's transaction, that of " + request
                        + ": a transaction manager of another kind on the same DataSource (JDBC's beside JPA's) starts"
                        + " a transaction of its own on the request's connection and commits it when the handler"
                        + " returns, claim included, so the handler's writes and the claim would stay when the request"
                        + " is rolled back; name the transaction manager of the request's transaction, or none");
            }
        }
        return Optional.ofNullable(problem).map(why -> method + " is @Transactional with " + which + ", which "
                + why + ": its writes would not commit in the transaction that holds the claim and the stored answer,"
                + " and would stay when the request is rolled back; name the transaction manager of the store's"
                + " DataSource");
    }

    /** The transaction manager of the request's transaction, when the {@code Transactions} used are Spring's. */
    private PlatformTransactionManager requestTransactionManager() {
        return context.getBeanProvider(Transactions.class).getIfUnique() instanceof SpringTransactions spring
                ? spring.transactionManager() : null;
    }

    /**
     * Whether a transaction of {@code named}, begun while one of {@code request} is open, joins it. Two transaction
     * managers on one DataSource do not when they are of different kinds: JPA's binds the connection for JDBC code
     * without marking a JDBC transaction active, so a JDBC transaction manager begins (and commits) one of its own on
     * it; the other way round, JPA's refuses to begin inside a JDBC transaction.
     */
    static boolean joins(PlatformTransactionManager named, PlatformTransactionManager request) {
        if (named == request) {
            return true;
        }
        if (named instanceof DataSourceTransactionManager jdbc && request instanceof DataSourceTransactionManager other) {
            return jdbc.getDataSource() != null && other.getDataSource() != null
                    && sameDataSource(jdbc.getDataSource(), other.getDataSource());
        }
        if (JPA_PRESENT && (Jpa.isJpa(named) || Jpa.isJpa(request))) {
            return Jpa.isJpa(named) && Jpa.isJpa(request) && Jpa.sameEntityManagerFactory(named, request);
        }
        return named.getClass() == request.getClass()
                && named instanceof ResourceTransactionManager resource
                && request instanceof ResourceTransactionManager other
                && resource.getResourceFactory() == other.getResourceFactory();
    }

    /** The transaction manager {@code qualifier} names, as Spring's transaction interceptor finds it; null if none. */
    private TransactionManager qualifiedTransactionManager(String qualifier) {
        try {
            return BeanFactoryAnnotationUtils.qualifiedBeanOfType(context.getAutowireCapableBeanFactory(),
                    TransactionManager.class, qualifier);
        } catch (NoSuchBeanDefinitionException e) {
            return null;
        }
    }

    /** The DataSource of a JDBC store of the library (also one the application defined); null for any other store. */
    private DataSource storeDataSource() {
        return context.getBeanProvider(IdempotencyStore.class).getIfUnique() instanceof JdbcIdempotencyStore store
                ? store.dataSource() : null;
    }

    /** @param beanType the controller's class, against which the return type's type variables are resolved */
    static Optional<String> problemWith(Method method, Class<?> beanType) {
        Class<?> returnType = method.getReturnType();
        if (returnType.isPrimitive() && returnType != void.class) {
            return Optional.of(method + " returns a primitive; return its wrapper type or a ResponseEntity");
        }
        return asyncProblem(method, beanType);
    }

    /**
     * A required path variable or request parameter of an entity type, which Spring Data's web support loads by the id
     * the request names: Spring MVC resolves it before the advice runs, so a retry after the handler deleted the entity
     * (or made it invisible to its repository) is refused with 400 before the advice can replay the stored answer, and
     * the client is told its completed request was bad. Warned about at startup: a handler that keeps the entity
     * findable is replayed as any other.
     */
    static Optional<String> boundEntityWarning(HandlerMethod handler) {
        for (MethodParameter parameter : handler.getMethodParameters()) {
            PathVariable pathVariable = parameter.getParameterAnnotation(PathVariable.class);
            RequestParam requestParam = parameter.getParameterAnnotation(RequestParam.class);
            boolean required = pathVariable != null ? pathVariable.required()
                    : requestParam != null && requestParam.required();
            if (required && !parameter.isOptional()
                    && MergedAnnotations.from(parameter.getParameterType()).isPresent("jakarta.persistence.Entity")) {
                return Optional.of(handler.getMethod() + " takes the entity " + parameter.getParameterType().getName()
                        + " as a required " + (pathVariable != null ? "path variable" : "request parameter")
                        + ": Spring MVC loads it before @Idempotent sees the request, so a retry after the request"
                        + " deleted it (or its repository no longer finds it) is refused with 400 instead of being"
                        + " answered with the stored answer. If the request may delete it, take its id and load the"
                        + " entity in the handler (or declare the parameter Optional)");
            }
        }
        return Optional.empty();
    }

    /**
     * An answer the method gives on another thread: its value is refused on every request, also the value of a method
     * a handler function calls (which may return a primitive: answered without running it, it throws). A type variable
     * (a generic base controller's {@code R}) is resolved against {@code beanType}, the class Spring MVC calls it on.
     */
    static Optional<String> asyncProblem(Method method, Class<?> beanType) {
        Class<?> returnType = method.getReturnType();
        ResolvableType type = ResolvableType.forMethodReturnType(method, beanType);
        if (HttpEntity.class.isAssignableFrom(returnType)) {
            type = type.as(HttpEntity.class).getGeneric(0);
        }
        Class<?>[] parameters = method.getParameterTypes();
        if (parameters.length > 0 && parameters[parameters.length - 1].getName().equals("kotlin.coroutines.Continuation")) {
            return Optional.of(method + " is a Kotlin suspend function: its answer is written after the transaction"
                    + " has to end; make it a regular function");
        }
        if (isAsync(type.resolve())) {
            String called = beanType == method.getDeclaringClass() ? method.toString()
                    : method + ", called on " + beanType.getName() + ",";
            return Optional.of(called + " returns " + type + ": async answers are written after the transaction"
                    + " has to end; return the answer synchronously");
        }
        return Optional.empty();
    }

    /**
     * An {@code @Idempotent} method that Spring calls on a thread of its own, never inside a request: a scheduled task,
     * a message listener. There is no request to take a key from, so the advice would fail every call and the work would
     * never run; a redelivered message or a rerun task is made idempotent with {@code IdempotencyTemplate}.
     */
    static Optional<String> calledOutsideRequests(Method method) {
        return InertIdempotentCheck.calledOutsideRequestsAs(method)
                .map(type -> method + " is @" + type + ": Spring calls it outside"
                        + " any request, where @Idempotent has no key to take, so every call would fail and its work"
                        + " would never run; remove @Idempotent and make the work idempotent with IdempotencyTemplate"
                        + " (a key of the task's or the message's own)");
    }

    /**
     * An {@code @Idempotent} method that Spring MVC calls for requests besides their handler: a {@code @ModelAttribute}
     * method (one that is not a handler itself) or an {@code @InitBinder} method before the handler of every request
     * to its controller (or to every controller, on a {@code @ControllerAdvice}), an {@code @ExceptionHandler} method
     * when a handler fails. It is never the handler, so the advice refuses it whenever the request's handler has not
     * taken the request on: every idempotent request to the controller (its idempotent handlers' included, whose model
     * and binder are made before they run) would fail with 500, and so would the exception handler's answer to a
     * handler that is not idempotent.
     */
    static Optional<String> calledBesidesTheHandler(Method method) {
        String annotation = AnnotatedElementUtils.hasAnnotation(method, InitBinder.class) ? "InitBinder"
                : AnnotatedElementUtils.hasAnnotation(method, ExceptionHandler.class) ? "ExceptionHandler"
                : AnnotatedElementUtils.hasAnnotation(method, ModelAttribute.class)
                && !AnnotatedElementUtils.hasAnnotation(method, RequestMapping.class) ? "ModelAttribute" : null;
        return Optional.ofNullable(annotation).map(type -> method + " is @" + type + ": Spring MVC calls it besides"
                + " the handler of a request, never as the handler, where @Idempotent cannot take the request on, so"
                + " every request it is called for would fail; remove @Idempotent from it, and put it on the handler"
                + " (the @RequestMapping method)");
    }

    /**
     * Whether Spring MVC answers with {@code value}, which an {@code @Idempotent} handler returned behind a declared type
     * that may not say so ({@code Object}, {@code ResponseEntity<?>}), on another thread: an async value, or an
     * {@code HttpEntity} holding one in its body (an emitter or a publisher, which Spring MVC takes from a
     * {@code ResponseEntity} too).
     */
    static boolean isAsyncValue(Object value) {
        Object answer = value instanceof HttpEntity<?> entity ? entity.getBody() : value;
        return answer != null && isAsync(answer.getClass());
    }

    /** Whether Spring MVC answers with a value of {@code type} on another thread. */
    static boolean isAsync(Class<?> type) {
        if (type == null) {
            return false;
        }
        if (Callable.class.isAssignableFrom(type) || CompletionStage.class.isAssignableFrom(type)
                || Future.class.isAssignableFrom(type)) {
            return true;
        }
        for (Class<?> candidate = type; candidate != null; candidate = candidate.getSuperclass()) {
            if (ASYNC_TYPES.contains(candidate.getName())) {
                return true;
            }
            if (extendsAsyncInterface(candidate)) {
                return true;
            }
        }
        // any other type Spring MVC adapts as a reactive one, found as it finds them: java.util.concurrent.Flow.Publisher,
        // say, which it adapts through reactive-streams' FlowAdapters when Reactor is absent
        return ReactiveAdapterRegistry.getSharedInstance().getAdapter(type) != null;
    }

    /**
     * Whether one of the interfaces {@code type} implements is async, or extends one that is, however deep: an
     * application's own {@code interface ExportBody extends StreamingResponseBody} is answered on another thread too
     * (Spring MVC asks {@code isAssignableFrom}).
     */
    private static boolean extendsAsyncInterface(Class<?> type) {
        for (Class<?> implemented : type.getInterfaces()) {
            if (ASYNC_TYPES.contains(implemented.getName()) || extendsAsyncInterface(implemented)) {
                return true;
            }
        }
        return false;
    }

    /**
     * The claim, the handler's writes and the answer must commit in one transaction: one DataSource for both. Accepted:
     * a JDBC transaction manager on the store's DataSource; JPA's, when it exposes its connection to JDBC code
     * (a DataSource and a dialect that can expose it, as Boot configures it with Hibernate); native Hibernate's
     * ({@code HibernateTransactionManager}), which exposes it for its DataSource; any other whose resource is the
     * DataSource.
     */
    static void checkTransactionManager(PlatformTransactionManager transactionManager, DataSource dataSource) {
        Object managed = null;
        if (transactionManager instanceof DataSourceTransactionManager jdbc) {
            managed = jdbc.getDataSource();
        } else if (JPA_PRESENT && Jpa.isJpa(transactionManager)) {
            Jpa.problem(transactionManager).ifPresent(problem -> {
                throw new IdempotencyConfigurationException("The idempotency store cannot join the transactions of "
                        + transactionManager + ": " + problem + ". The claim, the handler's writes and the stored"
                        + " answer must commit in one transaction.", "Use Spring Boot's JPA set-up (a"
                        + " JpaTransactionManager with the store's DataSource and Hibernate's dialect), or a"
                        + " DataSourceTransactionManager on the store's DataSource.");
            });
            managed = Jpa.dataSource(transactionManager);
        } else if (NATIVE_HIBERNATE_PRESENT && NativeHibernate.isHibernate(transactionManager)) {
            // its resource is the SessionFactory, but it binds its connection to its DataSource for JDBC code
            managed = NativeHibernate.dataSource(transactionManager);
        } else if (transactionManager instanceof ResourceTransactionManager resource) {
            managed = resource.getResourceFactory();
        }
        if (managed instanceof DataSource managedDataSource && sameDataSource(managedDataSource, dataSource)) {
            if (keepsNoSynchronization(transactionManager)) {
                // JDBC's transaction manager marks the connection it binds as in a transaction, which the store's own
                // transactions then join; JPA's and Hibernate's mark nothing, and only their synchronization tells
                throw new IdempotencyConfigurationException("The transaction manager " + transactionManager
                        + " keeps no transaction synchronization (SYNCHRONIZATION_NEVER): it binds the request's"
                        + " connection without marking a transaction active, so the idempotency store cannot tell"
                        + " that a transaction is open, and would commit the claim on that connection in a"
                        + " transaction of its own, apart from the handler's writes.", "Leave the transaction"
                        + " manager's synchronization at its default (SYNCHRONIZATION_ALWAYS).");
            }
            return;
        }
        throw new IdempotencyConfigurationException("The idempotency store uses DataSource " + dataSource
                + ", but the transaction manager " + transactionManager + " manages " + managed + ". The claim, the"
                + " handler's writes and the stored answer must commit in one transaction.", "Define a transaction"
                + " manager on the store's DataSource (Spring Boot defines none of its own once the application defines"
                + " one, for a second database, say) and make it the primary one, or define the idempotency"
                + " Transactions on it (new SpringTransactions(transactionManager)); or give the store the DataSource"
                + " of the application's transaction manager.");
    }

    /**
     * A transaction manager other than JDBC's that keeps no synchronization: it binds its connection without marking
     * a transaction active, which only its synchronization would tell.
     */
    private static boolean keepsNoSynchronization(PlatformTransactionManager transactionManager) {
        return !(transactionManager instanceof DataSourceTransactionManager)
                && transactionManager instanceof AbstractPlatformTransactionManager manager
                && manager.getTransactionSynchronization() == AbstractPlatformTransactionManager.SYNCHRONIZATION_NEVER;
    }

    /**
     * The executions' transactions run at READ COMMITTED, which the claim needs. Where the connections do not default
     * to it (MariaDB's, or a pool set to another level), every transaction asks the transaction manager to set it, and
     * some cannot: JPA's, when Hibernate releases its connection after each transaction
     * ({@code hibernate.connection.handling_mode} {@code DELAYED_ACQUISITION_AND_RELEASE_AFTER_TRANSACTION}), refuses
     * any isolation level, and every idempotent request would fail. One transaction is begun and rolled back to find
     * out; a failure of another kind (the database not reachable yet) is left to the requests, which meet it anyway.
     */
    static void checkReadCommittedCanBeSet(Transactions transactions, PlatformTransactionManager transactionManager,
                                           DataSource dataSource) {
        Transactions.Transaction probe;
        try {
            probe = transactions.begin();
        } catch (InvalidIsolationLevelException e) {
            throw new IdempotencyConfigurationException("The transaction manager " + transactionManager + " cannot"
                    + " run the idempotency transactions at READ COMMITTED, which the claim needs: the DataSource's"
                    + " connections were not found to default to it, so each transaction asks for it, and the"
                    + " transaction manager refuses to set an isolation level (" + e.getMessage()
                    + "). Every idempotent request would fail.", "Make the connections default to READ COMMITTED"
                    + " (" + readCommittedSetting(dataSource) + "), or let the"
                    + " transaction manager set the level: with Hibernate, keep a connection handling mode that holds"
                    + " the connection until the session closes (Spring Boot's default,"
                    + " DELAYED_ACQUISITION_AND_HOLD).");
        } catch (RuntimeException e) {
            return;
        }
        try {
            probe.rollback();
        } catch (RuntimeException e) {
            // nothing was written: the connection is the pool's to discard
        }
    }

    /**
     * Mockito's mocks and spies, which tests' bean overrides ({@code @MockitoBean}) register as singletons of their own,
     * past the post-processors; read reflectively, as Mockito is on the class path of tests only.
     */
    private static final class Mocks {

        private static final Method MOCKING_DETAILS;
        private static final Method IS_MOCK;

        static {
            Method mockingDetails = null;
            Method isMock = null;
            ClassLoader classLoader = IdempotencyStartupChecks.class.getClassLoader();
            if (ClassUtils.isPresent("org.mockito.Mockito", classLoader)) {
                try {
                    mockingDetails = ClassUtils.forName("org.mockito.Mockito", classLoader)
                            .getMethod("mockingDetails", Object.class);
                    isMock = mockingDetails.getReturnType().getMethod("isMock");
                } catch (ReflectiveOperationException | LinkageError e) {
                    mockingDetails = null;
                }
            }
            MOCKING_DETAILS = mockingDetails;
            IS_MOCK = isMock;
        }

        static boolean isMock(Object bean) {
            if (MOCKING_DETAILS == null) {
                return false;
            }
            Object details = ReflectionUtils.invokeMethod(MOCKING_DETAILS, null, bean);
            return Boolean.TRUE.equals(ReflectionUtils.invokeMethod(IS_MOCK, details));
        }
    }

    /** Native Hibernate's transaction manager; loaded only when spring-orm and Hibernate are on the class path. */
    private static final class NativeHibernate {

        static boolean isHibernate(PlatformTransactionManager transactionManager) {
            return transactionManager instanceof org.springframework.orm.jpa.hibernate.HibernateTransactionManager;
        }

        /**
         * The DataSource it binds the connection of its transactions to for JDBC code: the one it was given, or its
         * SessionFactory's, which it finds by itself; null when it knows none (then it exposes no connection).
         */
        static DataSource dataSource(PlatformTransactionManager transactionManager) {
            return ((org.springframework.orm.jpa.hibernate.HibernateTransactionManager) transactionManager)
                    .getDataSource();
        }
    }

    /** The protected getter {@link Jpa#targetBeanName} calls. */
    private static final String TARGET_BEAN_NAME = "getTargetBeanName";

    /**
     * The methods the checks call by reflection, which a native image invokes only when its metadata names them;
     * recorded by Spring's ahead-of-time processing of an application that has the checks.
     */
    static final class ReflectedMethods implements RuntimeHintsRegistrar {

        @Override
        public void registerHints(RuntimeHints hints, ClassLoader classLoader) {
            hints.reflection().registerType(DelegatingFilterProxyRegistrationBean.class,
                    type -> type.withMethod(TARGET_BEAN_NAME, List.of(), ExecutableMode.INVOKE));
        }
    }

    /** JPA's transaction manager; loaded only when spring-orm is on the class path. */
    private static final class Jpa {

        static boolean isJpa(PlatformTransactionManager transactionManager) {
            return transactionManager instanceof JpaTransactionManager;
        }

        /**
         * Why JDBC code (the store) would not run on the connection of JPA's transactions: JpaTransactionManager binds
         * that connection for JDBC code only when it knows the DataSource and its dialect can hand the connection out.
         */
        static Optional<String> problem(PlatformTransactionManager transactionManager) {
            JpaTransactionManager jpa = (JpaTransactionManager) transactionManager;
            if (jpa.getDataSource() == null) {
                return Optional.of("it knows no DataSource, so it exposes no JDBC connection (set its dataSource)");
            }
            if (jpa.getJpaDialect().getClass() == DefaultJpaDialect.class) {
                return Optional.of("its JpaDialect (" + DefaultJpaDialect.class.getName() + ") cannot expose the"
                        + " JDBC connection of a transaction; use the JPA provider's dialect, such as"
                        + " HibernateJpaDialect");
            }
            return Optional.empty();
        }

        /**
         * Whether JPA's {@code transactionManager} may make a savepoint in a transaction it runs: only with a dialect
         * of the application's own, as none of Spring's (the default, Hibernate's, EclipseLink's) makes one.
         */
        static boolean mayMakeSavepoints(PlatformTransactionManager transactionManager) {
            return !((JpaTransactionManager) transactionManager).getJpaDialect().getClass().getName()
                    .startsWith("org.springframework.orm.jpa.");
        }

        static DataSource dataSource(PlatformTransactionManager transactionManager) {
            return ((JpaTransactionManager) transactionManager).getDataSource();
        }

        static boolean sameEntityManagerFactory(PlatformTransactionManager a, PlatformTransactionManager b) {
            Object factory = ((JpaTransactionManager) a).getEntityManagerFactory();
            return factory != null && factory == ((JpaTransactionManager) b).getEntityManagerFactory();
        }

        /**
         * An {@code OpenEntityManagerInViewFilter} that runs inside the idempotency filter closes the EntityManager
         * before that filter ends the transaction: the rollback of a failed request would then fail. (Boot's
         * open-in-view interceptor is handled; a filter only needs to come first.)
         */
        static Optional<String> openInViewFilterProblem(ApplicationContext context) {
            Set<Object> registered = Collections.newSetFromMap(new IdentityHashMap<>());
            // a filter instance registered more than once runs (OncePerRequestFilter) where it comes first
            Map<Object, Integer> firstEnabledOrder = new IdentityHashMap<>();
            for (AbstractFilterRegistrationBean<?> registration
                    : context.getBeansOfType(AbstractFilterRegistrationBean.class).values()) {
                Object filter = null;
                if (registration instanceof FilterRegistrationBean<?> plain) {
                    filter = plain.getFilter();
                } else if (registration instanceof DelegatingFilterProxyRegistrationBean proxy) {
                    String target = targetBeanName(proxy); // Boot registers the proxy, not the bean it names
                    if (target != null && context.containsBean(target)) {
                        filter = context.getBean(target);
                    }
                }
                if (filter != null) {
                    registered.add(filter);
                    if (registration.isEnabled()) {
                        firstEnabledOrder.merge(filter, registration.getOrder(), Math::min);
                    }
                }
            }
            int idempotencyOrder = firstEnabledOrder.entrySet().stream()
                    .filter(entry -> entry.getKey() instanceof IdempotencyFilter)
                    .mapToInt(Map.Entry::getValue).min().orElse(IdempotencyFilter.ORDER);
            for (Map.Entry<Object, Integer> entry : firstEnabledOrder.entrySet()) {
                if (entry.getKey() instanceof OpenEntityManagerInViewFilter && entry.getValue() >= idempotencyOrder) {
                    return Optional.of(openInViewFilterMessage(entry.getValue(), idempotencyOrder));
                }
            }
            for (OpenEntityManagerInViewFilter filter : context.getBeansOfType(OpenEntityManagerInViewFilter.class).values()) {
                if (!registered.contains(filter)) { // registered by Spring Boot with its own order, or the lowest
                    int order = filter instanceof Ordered ordered ? ordered.getOrder()
                            : OrderUtils.getOrder(filter.getClass(), Ordered.LOWEST_PRECEDENCE);
                    if (order >= idempotencyOrder) {
                        return Optional.of(openInViewFilterMessage(order, idempotencyOrder));
                    }
                }
            }
            return Optional.empty();
        }

        /** The bean a proxy registration delegates to ({@code getTargetBeanName()} is protected). */
        private static String targetBeanName(DelegatingFilterProxyRegistrationBean proxy) {
            Method getter = ReflectionUtils.findMethod(DelegatingFilterProxyRegistrationBean.class, TARGET_BEAN_NAME);
            if (getter == null) {
                return null;
            }
            ReflectionUtils.makeAccessible(getter);
            return (String) ReflectionUtils.invokeMethod(getter, proxy);
        }

        private static String openInViewFilterMessage(int order, int idempotencyOrder) {
            return "an OpenEntityManagerInViewFilter runs after the IdempotencyFilter (order " + order + " >= "
                    + idempotencyOrder + "): it would close the EntityManager before the idempotent request's"
                    + " transaction ends. Register it with an order below the IdempotencyFilter's, or use Spring Boot's"
                    + " spring.jpa.open-in-view instead";
        }
    }

    private static boolean sameDataSource(DataSource a, DataSource b) {
        return unwrap(a) == unwrap(b);
    }

    private static DataSource unwrap(DataSource dataSource) {
        DataSource current = dataSource;
        while (current instanceof TransactionAwareDataSourceProxy proxy && proxy.getTargetDataSource() != null) {
            current = proxy.getTargetDataSource();
        }
        return current;
    }

    /**
     * The API version a handler is mapped to (null if none), and the conditions besides its route and HTTP method that
     * Spring MVC tells handlers apart by: parameters, headers, consumed and produced media types, a custom condition.
     */
    private record VersionedMapping(String version, List<Object> otherConditions, boolean wholeRequestFingerprinted) {

        /**
         * The parameters condition comes first. {@code wholeRequestFingerprinted}: the endpoint has neither a key nor a
         * fingerprint expression, so its fingerprint holds the query string and the body.
         */
        static VersionedMapping of(RequestMappingInfo info, IdempotentEndpoint endpoint) {
            // the custom condition is null when there is none, which List.of would refuse
            return new VersionedMapping(info.getVersionCondition().getVersion(), Arrays.asList(
                    info.getParamsCondition(), info.getHeadersCondition(), info.getConsumesCondition(),
                    info.getProducesCondition(), info.getCustomCondition()),
                    endpoint.keyExpression == null && endpoint.fingerprintExpressions.isEmpty());
        }
    }
}
