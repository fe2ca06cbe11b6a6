package io.idempotency.spring;

import io.idempotency.core.CanonicalJson;
import io.idempotency.core.DefiniteFailureException;
import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyKeyParser;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.RequestFingerprint;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StoragePolicy;
import io.idempotency.core.StoredResponse;
import io.idempotency.core.Transactions;
import io.idempotency.core.UnstorableKeyException;
import jakarta.servlet.http.HttpServletRequest;
import org.aopalliance.intercept.MethodInterceptor;
import org.aopalliance.intercept.MethodInvocation;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.aop.support.AopUtils;
import org.springframework.context.expression.MethodBasedEvaluationContext;
import org.springframework.core.DefaultParameterNameDiscoverer;
import org.springframework.core.MethodClassKey;
import org.springframework.core.ParameterNameDiscoverer;
import org.springframework.core.annotation.AnnotatedElementUtils;
import org.springframework.core.env.PropertyResolver;
import org.springframework.dao.DataAccessException;
import org.springframework.expression.EvaluationException;
import org.springframework.expression.Expression;
import org.springframework.expression.spel.support.MapAccessor;
import org.springframework.http.HttpEntity;
import org.springframework.http.HttpHeaders;
import org.springframework.http.InvalidMediaTypeException;
import org.springframework.http.MediaType;
import org.springframework.transaction.CannotCreateTransactionException;
import org.springframework.transaction.TransactionSystemException;
import org.springframework.util.LinkedCaseInsensitiveMap;
import org.springframework.web.accept.ApiVersionStrategy;
import org.springframework.web.context.request.RequestAttributes;
import org.springframework.web.context.request.RequestContextHolder;
import org.springframework.web.context.request.ServletRequestAttributes;
import org.springframework.web.method.HandlerMethod;
import org.springframework.web.servlet.HandlerMapping;
import org.springframework.web.servlet.function.RouterFunctions;
import org.springframework.web.servlet.mvc.method.annotation.ResponseBodyEmitter;
import org.springframework.web.util.WebUtils;

import java.io.IOException;
import java.lang.reflect.Array;
import java.lang.reflect.Method;
import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.Charset;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The advice around {@code @Idempotent} methods. It runs after Spring MVC has bound and validated the arguments
 * (so a request rejected before the handler body runs leaves nothing behind; arguments left to Spring's
 * method-validation proxy are checked inside it, see {@link RefusedArguments}), and outside any {@code @Transactional}
 * advice ({@link IdempotentAdvisor#ORDER}), so that it opens the transaction the handler's writes join:
 * <ol>
 *   <li>find the key (header or expression) and fingerprint the request — all before a database connection is
 *       taken;</li>
 *   <li>claim the key through the {@link IdempotencyEngine};</li>
 *   <li>run the handler with the response captured, or hand the filter the answer to send instead (replay,
 *       mismatch, in progress, or a problem with the request), in which case the method does not run: a controller
 *       method returns {@code null}, and a method that a handler function called throws
 *       {@link RequestAnsweredException} to stop that function.</li>
 * </ol>
 * The {@link IdempotencyFilter} stores the answer and commits after the response has been rendered. Thread-safe.
 */
public class IdempotentMethodInterceptor implements MethodInterceptor {

    private static final Logger log = LoggerFactory.getLogger(IdempotentMethodInterceptor.class);
    /** Whether a key the database cannot store was logged at WARN: once, the others at DEBUG. */
    private final java.util.concurrent.atomic.AtomicBoolean unstorableKeyWarned =
            new java.util.concurrent.atomic.AtomicBoolean();

    /** Sent with every replayed answer. */
    public static final String REPLAYED_HEADER = "Idempotent-Replayed";

    private static final ParameterNameDiscoverer PARAMETER_NAMES = new DefaultParameterNameDiscoverer();
    private static final byte[] NOTHING = new byte[0];

    private final IdempotencyEngine engine;
    private final CallerResolver callerResolver;
    private final ProblemResponses problems;
    private final IdempotencyProperties properties;
    private final StoragePolicy defaultPolicy;
    private final String retryAfterSeconds;
    private final PropertyResolver placeholders;
    private final TransactionResources transactionResources;
    private final ApiVersionStrategy apiVersions;
    private final Map<Method, IdempotentEndpoint> endpoints = new ConcurrentHashMap<>();
    /** The endpoint of each method called on each target class, found once: the per-request path does no look-up. */
    private final Map<MethodClassKey, IdempotentEndpoint> calls = new ConcurrentHashMap<>();

    /** @param placeholders resolves {@code ${…}} placeholders in {@link Idempotent#lease()} */
    public IdempotentMethodInterceptor(IdempotencyEngine engine, CallerResolver callerResolver,
                                       ProblemResponses problems, IdempotencyProperties properties,
                                       StoragePolicy defaultPolicy, PropertyResolver placeholders) {
        this(engine, callerResolver, problems, properties, defaultPolicy, placeholders, TransactionResources.NONE,
                null);
    }

    /**
     * @param apiVersions Spring MVC's API versioning, or {@code null} when the application does not version its API:
     *                    the version a request asks for is part of its fingerprint
     */
    IdempotentMethodInterceptor(IdempotencyEngine engine, CallerResolver callerResolver, ProblemResponses problems,
                                IdempotencyProperties properties, StoragePolicy defaultPolicy,
                                PropertyResolver placeholders, TransactionResources transactionResources,
                                ApiVersionStrategy apiVersions) {
        this.transactionResources = transactionResources;
        this.apiVersions = apiVersions;
        this.placeholders = placeholders;
        this.engine = engine;
        this.callerResolver = callerResolver;
        this.problems = problems;
        this.properties = properties;
        this.defaultPolicy = defaultPolicy;
        Duration retryAfter = properties.getRetryAfter();
        // whole seconds, rounded up; in seconds, as no duration overflows them
        this.retryAfterSeconds =
                Long.toString(Math.max(1, retryAfter.getSeconds() + (retryAfter.getNano() > 0 ? 1 : 0)));
    }

    /** The endpoint settings of {@code method}, parsed once; fails on invalid expressions. */
    IdempotentEndpoint endpoint(Method method) {
        return endpoints.computeIfAbsent(method, m -> IdempotentEndpoint.of(m,
                AnnotatedElementUtils.findMergedAnnotation(m, Idempotent.class), properties.getMethods(),
                defaultPolicy, properties.getLease(), placeholders));
    }

    /**
     * The endpoint settings of the method called: the method itself, or — for a proxy made through an interface,
     * called with the interface's method — the target's implementation that carries {@code @Idempotent}.
     */
    private IdempotentEndpoint endpoint(MethodInvocation invocation) {
        Method method = invocation.getMethod();
        Class<?> targetClass = invocation.getThis() == null ? null : AopUtils.getTargetClass(invocation.getThis());
        return calls.computeIfAbsent(new MethodClassKey(method, targetClass), call -> {
            Method annotated = targetClass == null ? null : IdempotentAdvisor.annotated(method, targetClass);
            return endpoint(annotated != null ? annotated : method);
        });
    }

    @Override
    public Object invoke(MethodInvocation invocation) throws Throwable {
        HttpServletRequest request = currentRequest();
        IdempotentEndpoint endpoint = endpoint(invocation);
        if (request != null && !endpoint.appliesTo(request.getMethod())) {
            return invocation.proceed(); // not idempotent for this verb (the filter may not even have seen it)
        }
        IdempotentExchange exchange = request == null ? null
                : (IdempotentExchange) request.getAttribute(IdempotentExchange.ATTRIBUTE);
        if (exchange == null) {
            if (request == null) {
                throw OutsideRequestsAdvisor.calledOutsideRequests(invocation.getMethod());
            }
            throw new IllegalStateException("@Idempotent method " + invocation.getMethod()
                    + " was called outside a request that passed the IdempotencyFilter");
        }
        if (!exchange.isTheWrappedDispatch(request)) {
            // a forward made after the filter (by a handler): the container ends the response when the forward
            // returns, before the filter could send the answer after the commit: the effects would be kept and the
            // client would get an empty answer
            throw new IllegalStateException("@Idempotent method " + invocation.getMethod() + " was reached through a "
                    + request.getDispatcherType() + " dispatch made after the IdempotencyFilter ran; an idempotent"
                    + " endpoint must be the handler of the request the filter wrapped. Map the request to it directly.");
        }
        if (exchange.attemptRunning()) {
            exchange.noteReentry(); // the handler's body has started: it calls an @Idempotent method itself
        } else if (isHandlerOf(request, invocation)) {
            // the handler called again by an advice outside this one (Spring's @Retryable), after its attempt ended
            if (exchange.answer() != null) {
                return answered(request); // the answer decided (a replay, a refusal) stands: the handler does not run
            }
            if (exchange.attemptHasEnded() && exchange.takenOnWith(invocation.getMethod(), invocation.getThis())
                    && (exchange.handlerFailed() || isControllerHandled(request))) {
                // it failed, or returned and an advice outside refused the result: a new attempt under the key,
                // claimed again, as the client's own retry would be; never the handler without idempotency, nor in
                // the ended attempt's transaction. Only the call that took the request on: where no controller
                // method is known to be the handler (a functional endpoint's), another @Idempotent method called
                // after it is part of the request, and must not roll back what the first one did. So is the same
                // method called again after it returned (a handler function calling it once per item): only a call
                // after one that failed is a new attempt there
                exchange.retry();
            }
        }
        if (exchange.isTaken()) {
            IdempotencyEngine.Execution running = exchange.execution();
            if (running != null && endpoint.mode == IdempotencyMode.INTENT_FIRST
                    && running.mode() != IdempotencyMode.INTENT_FIRST) {
                // the request is claimed once, in the mode of the method that took it on: an intent-first method
                // (a gateway call) would run inside that one transaction, with no claim committed before it and
                // nothing left for the resolver when its outcome is unknown
                throw new IllegalStateException("@Idempotent(mode = INTENT_FIRST) on " + invocation.getMethod()
                        + " cannot work: it was called within a request that " + exchange.takenBy()
                        + " took on in " + running.mode() + " mode, in whose one transaction it would run. Put"
                        + " @Idempotent(mode = INTENT_FIRST) on the handler, and remove @Idempotent from the method"
                        + " it calls.");
            }
            return invocation.proceed(); // an @Idempotent method called by another within one request
        }
        if (!isHandlerOf(request, invocation)) {
            // a replay or a refusal could not stop the handler that called this method: whatever it did next would
            // run again on every retry, outside any transaction
            throw new IllegalStateException("@Idempotent on " + invocation.getMethod() + " cannot work: it was"
                    + " called by the request's handler instead of being it. Put @Idempotent on the controller method"
                    + " (the handler), or use IdempotencyTemplate.");
        }
        exchange.takeOnWith(invocation.getMethod(), invocation.getThis());
        String instance = request.getRequestURI();
        String headerName = properties.getHeaderName();

        // a header key is read before the body, so that a request without one on an optional-key endpoint runs as
        // it would without the library, whatever its body (a key in the body needs the body first)
        IdempotencyKeyParser.Result headerKey = endpoint.keyExpression == null
                ? IdempotencyKeyParser.parse(Collections.list(request.getHeaders(headerName))) : null;
        if (headerKey instanceof IdempotencyKeyParser.Missing && !endpoint.keyRequired) {
            exchange.passThrough();
            return invocation.proceed();
        }
        if (headerKey != null && !(headerKey instanceof IdempotencyKeyParser.Valid)) {
            // the key is checked before anything of the request is processed (the draft's security considerations):
            // a request without a usable key is told so, whatever its body
            return answer(exchange, keyProblem(headerKey, endpoint, headerName, instance));
        }
        // so is an optional key read from elsewhere than the body (a header, a parameter, the path): only a key read
        // from the body needs the body first
        IdempotencyKeyParser.Result keyReadFirst = null;
        if (endpoint.keyExpression != null && !endpoint.keyRequired && !endpoint.keyReadsBody) {
            try {
                keyReadFirst = keyFromExpression(endpoint.keyExpression,
                        evaluationContext(request, endpoint.method, invocation, null), invocation);
            } catch (UnreadableParametersException e) {
                return unreadableParameters(exchange, e, instance);
            }
            if (keyReadFirst instanceof IdempotencyKeyParser.Missing) {
                exchange.passThrough();
                return invocation.proceed();
            }
        }
        if (isMultipart(request)) {
            return answer(exchange, problems.render(ProblemResponses.Problem.BODY_UNSUPPORTED,
                    "Multipart bodies cannot be fingerprinted; send the request as JSON or another single body.",
                    instance));
        }
        RequestView view;
        boolean expressions = endpoint.keyExpression != null || !endpoint.fingerprintExpressions.isEmpty();
        try {
            // a JSON body is read for the canonical fingerprint and for the expressions' #body; compared byte for
            // byte, or not at all (expressions that do not read #body take the body's place in the fingerprint), it
            // needs no reading, and is not refused for what only its canonical form cannot hold
            view = new RequestView(request, exchange.request(), endpoint.readsBody || !expressions
                    && properties.getBodyFingerprint() == IdempotencyProperties.BodyFingerprint.CANONICAL_JSON,
                    endpoint.readsBody);
        } catch (BodyRecordingRequest.BodyTooLargeException e) {
            return answer(exchange, problems.render(ProblemResponses.Problem.REQUEST_TOO_LARGE,
                    "The request body is too large to be fingerprinted: " + e.getMessage() + ".", instance));
        } catch (CanonicalJson.InvalidJsonException e) {
            return answer(exchange, problems.render(ProblemResponses.Problem.BODY_INVALID,
                    "The JSON body cannot be fingerprinted: " + e.getMessage() + ".", instance));
        } catch (ContentCodings.UndecodableBodyException e) {
            return answer(exchange, problems.render(ProblemResponses.Problem.BODY_INVALID,
                    "The body cannot be decompressed to be fingerprinted: " + e.getMessage() + ".", instance));
        } catch (UnreadableParametersException e) {
            return unreadableParameters(exchange, e, instance);
        }
        MethodBasedEvaluationContext context = null;
        if (expressions) {
            try {
                context = view.evaluationContext(endpoint.method, invocation, endpoint.readsBody);
            } catch (UnreadableParametersException e) {
                return unreadableParameters(exchange, e, instance);
            } catch (UnreadableTextException e) {
                return answer(exchange, problems.render(ProblemResponses.Problem.BODY_INVALID,
                        "The body cannot be read as text, which this endpoint's key or fingerprint is read from: "
                                + e.getMessage() + ".", instance));
            }
        }

        IdempotencyKeyParser.Result parsed = headerKey != null ? headerKey : keyReadFirst != null ? keyReadFirst
                : keyFromExpression(endpoint.keyExpression, context, invocation);
        if (parsed instanceof IdempotencyKeyParser.Missing && !endpoint.keyRequired) {
            exchange.passThrough();
            return invocation.proceed();
        }
        if (!(parsed instanceof IdempotencyKeyParser.Valid valid)) {
            return answer(exchange, keyProblem(parsed, endpoint, headerName, instance));
        }
        String key = valid.key();

        String fingerprint;
        try {
            fingerprint = fingerprint(endpoint, view, context);
        } catch (EvaluationException e) {
            return answer(exchange, problems.render(ProblemResponses.Problem.BODY_INVALID,
                    "The request does not carry the values this endpoint is fingerprinted by.", instance));
        }
        String caller;
        try {
            caller = callerResolver.resolve(request);
            if (caller == null) {
                // not anonymous: scoped as "", it would be answered with every anonymous client's stored answers
                throw new IllegalStateException("The CallerResolver " + callerResolver.getClass().getName()
                        + " named no caller for a request to " + invocation.getMethod() + ": it must return the"
                        + " caller's namespace, \"\" for an anonymous request, never null");
            }
        } catch (Throwable e) { // the handler does not run: what the request bound is not for a later transaction
            transactionResources.discardPending();
            throw e;
        }
        ScopedKey scopedKey = new ScopedKey(CallerResolver.namespace(caller), scopeOf(endpoint, request, invocation),
                key);

        IdempotencyEngine.Start start;
        try {
            start = engine.start(scopedKey, fingerprint, endpoint.mode, endpoint.lease);
        } catch (Transactions.AlreadyActiveException e) {
            if (exchange.arrivedInTransaction()) {
                // refused (by the transactions, before anything was claimed) because of a transaction the request
                // arrived in: name the usual cause and the way out. Transactions of the application's own that
                // accept an outer transaction do not refuse, and this says nothing
                throw inArrivedTransaction(invocation, e);
            }
            throw e;
        } catch (UnstorableKeyException e) {
            // the database refused the key's text itself (a character its encoding lacks, more bytes than its column
            // holds): every retry would fail alike, so no 503 and its invitation to retry. Any client can send such
            // keys, and the database's message quotes them: the operator is told once, the rest at DEBUG
            if (unstorableKeyWarned.compareAndSet(false, true)) {
                log.warn("Idempotent request {} {} could not be claimed: {} (SQLState {}); answering 400. Later such"
                                + " requests are logged at DEBUG", request.getMethod(),
                        IdempotencyFilter.loggedPath(request), e.getMessage(), e.sqlState());
            } else {
                log.debug("Idempotent request {} {} could not be claimed: {} (SQLState {}); answering 400",
                        request.getMethod(), IdempotencyFilter.loggedPath(request), e.getMessage(), e.sqlState());
            }
            return answer(exchange, problems.render(ProblemResponses.Problem.KEY_MALFORMED, "The request was not"
                    + " run: the database cannot store its key (with the caller and the operation it belongs to) as"
                    + " it is. Retrying it will not help.", instance));
        } catch (DataAccessException | CannotCreateTransactionException | TransactionSystemException e) {
            // the database failed the claim or gave no connection for it: the handler did not run
            log.warn("Idempotent request {} {} could not be claimed; answering 503", request.getMethod(),
                    IdempotencyFilter.loggedPath(request), e);
            return answer(exchange, problems.render(ProblemResponses.Problem.STORE_UNAVAILABLE,
                    "The request was not run: its idempotency record could not be read or written. Retry later with"
                            + " the same key.", instance, new StoredResponse.Header("Retry-After", retryAfterSeconds)));
        } catch (Throwable e) { // the stale claim resolver a retry asked failed, say: the handler did not run either
            transactionResources.discardPending();
            throw e;
        }
        if (start instanceof IdempotencyEngine.Proceed proceed) {
            exchange.begin(proceed.execution(), endpoint.storagePolicy);
            // whether a call of this attempt reached the method's body before it failed: a refusal of its arguments
            // (or method security's) raised when an advice inside this one called it again came after the body ran
            boolean[] bodyCalled = new boolean[1];
            try {
                exchange.closeAfterTransaction(transactionResources.keepOpen(request));
                Object result = proceed.execution().context().runWith(() -> {
                    Object value;
                    // the body runs once in this attempt: an advice between this one and the method (a retry
                    // advice ordered inside it) running it again would keep both runs' writes under one key
                    try (SingleRunGuard.Attempt attempt = SingleRunGuard.begin(invocation)) {
                        try {
                            value = invocation.proceed();
                        } catch (Throwable failure) {
                            bodyCalled[0] = attempt.bodyCalled();
                            throw attempt.refusalOr(failure);
                        }
                        attempt.checkRanOnce();
                    }
                    if (IdempotencyStartupChecks.isAsyncValue(value)) {
                        return value; // nothing of it is written or run (below)
                    }
                    // JPA holds writes back until the commit, which the filter makes after the answer is written:
                    // write them now, so that a failing one (a unique constraint) reaches Spring MVC's exception
                    // handling, and under the handler's context (entity listeners run at the flush)
                    proceed.execution().flush();
                    return value;
                });
                if (IdempotencyStartupChecks.isAsyncValue(result)) {
                    return refuseAsyncValue(exchange, proceed.execution(), result, invocation, instance);
                }
                return result;
            } catch (Throwable handlerFailure) {
                // definitely not done: the method-validation proxy refused its arguments, or method security refused
                // the call, before its body ran (intent-first: the claim is released, so the corrected or now
                // permitted request runs), or the handler says so (the claim is marked FAILED, for the same request to
                // run again). A refusal of a call the handler made to itself through its proxy names the same method
                // and object, but its body had run: it passed this advice again (reentered). So does the refusal of a
                // call a retry advice inside this one made again after a call whose body ran (bodyCalled)
                exchange.markHandlerFailed(!exchange.reentered() && !bodyCalled[0]
                        && (RefusedArguments.of(invocation, handlerFailure)
                        || DeniedBeforeTheBody.of(handlerFailure))
                        ? IdempotentExchange.HandlerFailure.NOT_RUN
                        : handlerFailure instanceof DefiniteFailureException
                        ? IdempotentExchange.HandlerFailure.DEFINITE : IdempotentExchange.HandlerFailure.UNKNOWN);
                abandonBeforeTheExceptionIsHandled(exchange, handlerFailure);
                throw handlerFailure;
            } finally {
                exchange.attemptEnded();
            }
        }
        if (start instanceof IdempotencyEngine.Replay replay) {
            return answer(exchange, replay.response(), new StoredResponse.Header(REPLAYED_HEADER, "true"));
        }
        if (start instanceof IdempotencyEngine.Mismatch) {
            return answer(exchange, problems.render(ProblemResponses.Problem.KEY_MISMATCH,
                    "This idempotency key was already used for a different request (method, path, query or body"
                            + " differ). Use a new key for a new request.", instance));
        }
        return answer(exchange, problems.render(ProblemResponses.Problem.REQUEST_IN_PROGRESS,
                "A request with this idempotency key is still being processed. Retry later with the same key.",
                instance, new StoredResponse.Header("Retry-After", retryAfterSeconds)));
    }

    /**
     * A handler declared to return something else ({@code Object}, {@code ResponseEntity<?>}) returned an async value
     * — a {@code Callable}, a {@code StreamingResponseBody}, a future, or a {@code ResponseEntity} holding an emitter or
     * a publisher — which the startup checks could not see. Given to Spring MVC, it would be run or completed on
     * another thread after the transaction had ended: a {@code Callable}'s work would be kept while the client is told
     * that nothing was, and run again by the retry. It is rolled back and answered as a
     * handler that started async processing is, and Spring MVC never gets it, so what it holds never runs.
     */
    private Object refuseAsyncValue(IdempotentExchange exchange, IdempotencyEngine.Execution execution, Object value,
                                    MethodInvocation invocation, String instance) {
        HttpServletRequest request = exchange.request();
        try {
            exchange.abandon();
        } catch (RuntimeException e) {
            log.warn("Idempotent request {} {} could not be rolled back (nothing of it was committed); sending its"
                    + " answer", request.getMethod(), IdempotencyFilter.loggedPath(request), e);
        }
        log.error("Idempotent request {} {}: {} returned {}, an async answer, which @Idempotent does not support;"
                + " rolled back, and it was not run{}", request.getMethod(), IdempotencyFilter.loggedPath(request),
                invocation.getMethod(), value.getClass().getName(), IdempotencyFilter.claimLeftProcessing(execution));
        if ((value instanceof HttpEntity<?> entity ? entity.getBody() : value) instanceof ResponseBodyEmitter emitter) {
            // never to be given to Spring MVC: what the application's threads send to it would be kept in it for good,
            // and its sends never fail. Completed, it refuses them (IllegalStateException); its onCompletion and
            // onError callbacks do not run, since no request ever used it
            try {
                emitter.completeWithError(new IllegalStateException("the answer of an @Idempotent request cannot be"
                        + " sent asynchronously: the request was rolled back and answered 500"));
            } catch (RuntimeException e) { // an emitter of the application's own kind: the answer is sent all the same
                log.warn("The refused emitter of {} {} could not be completed", request.getMethod(),
                        IdempotencyFilter.loggedPath(request), e);
            }
        }
        return answer(exchange, IdempotencyFilter.answeredAsynchronously(problems, execution, instance));
    }

    /** The answer to a request whose key is missing (where one is required) or malformed. */
    private StoredResponse keyProblem(IdempotencyKeyParser.Result parsed, IdempotentEndpoint endpoint,
                                      String headerName, String instance) {
        if (parsed instanceof IdempotencyKeyParser.Malformed malformed) {
            return problems.render(ProblemResponses.Problem.KEY_MALFORMED,
                    (endpoint.keyExpression == null ? "The " + headerName + " header" : "The key")
                            + " is malformed: " + malformed.reason() + ".", instance);
        }
        return problems.render(ProblemResponses.Problem.KEY_MISSING,
                endpoint.keyExpression == null ? "This endpoint requires an " + headerName + " header."
                        : "The request does not carry the value this endpoint is keyed by.", instance);
    }

    /**
     * Rolls the handler's transaction back now, before Spring MVC hands the exception to the application's exception
     * handlers: as without {@code @Idempotent}, where the handler's own transaction has rolled back by then. An
     * exception handler that reads the database would otherwise run in a transaction PostgreSQL has aborted, or (JPA)
     * make Hibernate retry the write that failed.
     */
    private static void abandonBeforeTheExceptionIsHandled(IdempotentExchange exchange, Throwable handlerFailure) {
        try {
            exchange.abandon();
        } catch (Throwable e) { // also a checked exception a store in Kotlin passes on undeclared
            handlerFailure.addSuppressed(e); // the filter finds the execution ended either way
        }
    }

    /**
     * A key the request carries but the key expression could not read: code it called refused the value (e.g.
     * {@code T(java.util.UUID).fromString(#body.eventId)} given something else), or a conversion failed. The client
     * sent a value meant as its key, so the request is refused as with a malformed header (400), not run without
     * idempotency, and not answered 500. The exception's message is not logged: {@code UUID.fromString} and
     * {@code Long.parseLong} quote the text they could not read, which may be a card or account number.
     */
    private static IdempotencyKeyParser.Result unreadableKey(MethodInvocation invocation, RuntimeException e) {
        Throwable cause = e instanceof EvaluationException && e.getCause() != null ? e.getCause() : e;
        log.debug("The key expression of {} could not read the request's key: {} (its message may quote the request,"
                + " so it is not logged)", invocation.getMethod(), cause.getClass().getName());
        return new IdempotencyKeyParser.Malformed("the value this endpoint is keyed by cannot be read as its key");
    }

    /**
     * A query or form the container cannot read (a broken %-escape, bytes invalid in the declared charset, more
     * parameters than it takes): the request cannot be fingerprinted, and the handler would meet the same refusal.
     * Its message quotes the parameter it stopped at, which may be a card or account number: neither logged nor
     * sent.
     */
    private Object unreadableParameters(IdempotentExchange exchange, UnreadableParametersException e,
                                        String instance) {
        if (e.getCause() instanceof BodyRecordingRequest.FormTooLargeException tooLarge) {
            // a form sent in chunks, read to be kept for the handler: larger than the cap, as a declared length says
            return answer(exchange, problems.render(ProblemResponses.Problem.REQUEST_TOO_LARGE,
                    "The request body is too large to be fingerprinted: " + tooLarge.getMessage() + ".", instance));
        }
        log.debug("The parameters of {} {} cannot be read: {}", exchange.request().getMethod(),
                IdempotencyFilter.loggedPath(exchange.request()), e.getCause().getClass().getName());
        return answer(exchange, problems.render(ProblemResponses.Problem.BODY_INVALID,
                "The request's parameters cannot be read to be fingerprinted: check their %-escapes, their charset"
                        + " and their number.", instance));
    }

    /**
     * The variables the expressions read, {@code body} as given (null where the body is not read yet: only for an
     * expression that does not read it).
     *
     * @param annotated the method that carries {@code @Idempotent}: its parameters are named as the expressions
     *                  name them
     */
    private static MethodBasedEvaluationContext evaluationContext(HttpServletRequest request, Method annotated,
                                                                  MethodInvocation invocation, Object body)
            throws UnreadableParametersException {
        RequestEvaluationContext context = new RequestEvaluationContext(annotated, invocation.getArguments());
        context.addPropertyAccessor(new MapAccessor());
        context.setRequestVariable("body", body);
        context.setRequestVariable("path", RequestView.pathVariables(request));
        // a header or parameter sent more than once is all its values, joined as a String argument binds them
        // ("5,6"): its first value alone would make amount=5&amount=6 the request amount=5, answered with its answer
        Map<String, String> headers = new LinkedCaseInsensitiveMap<>(Locale.ROOT);
        for (String name : Collections.list(request.getHeaderNames())) {
            headers.putIfAbsent(name, String.join(",", Collections.list(request.getHeaders(name))));
        }
        context.setRequestVariable("headers", headers);
        Map<String, String> params = new LinkedHashMap<>();
        RequestView.parameters(request).forEach((name, values) -> params.put(name, String.join(",", values)));
        context.setRequestVariable("params", params);
        return context;
    }

    /**
     * The method's arguments by name, as Spring's context gives them, under the request's variables: a parameter named
     * {@code body}, {@code path}, {@code headers} or {@code params} does not hide the request's variable of that name
     * (as the startup checks take it). Spring loads the arguments as variables only when an expression first reads a
     * variable it does not have, and they then replaced the request's of the same name, or removed it (a null
     * argument): which {@code #body} an expression read depended on whether another had read {@code #provider} first.
     */
    private static final class RequestEvaluationContext extends MethodBasedEvaluationContext {

        private final Map<String, Object> requestVariables = new HashMap<>();

        RequestEvaluationContext(Method annotated, Object[] arguments) {
            super(null, annotated, arguments, PARAMETER_NAMES);
        }

        void setRequestVariable(String name, Object value) {
            requestVariables.put(name, value);
        }

        @Override
        public Object lookupVariable(String name) {
            return requestVariables.containsKey(name) ? requestVariables.get(name) : super.lookupVariable(name);
        }
    }

    /** A body that is neither JSON nor a form has no one text for {@code #body}; the message says why. */
    private static final class UnreadableTextException extends Exception {

        UnreadableTextException(String message) {
            super(message);
        }
    }

    /** The container refused to parse the request's parameters. */
    private static final class UnreadableParametersException extends Exception {

        UnreadableParametersException(IllegalStateException cause) {
            super(cause);
        }
    }

    /** The key {@code expression} gives in {@code context}: missing, malformed (the value cannot be read) or valid. */
    private static IdempotencyKeyParser.Result keyFromExpression(Expression expression,
                                                                 MethodBasedEvaluationContext context,
                                                                 MethodInvocation invocation) {
        try {
            return keyFromExpression(expression, context);
        } catch (EvaluationException e) {
            if (e.getCause() == null) {
                // e.g. a member the body does not have: the key is missing (the expression's own words are not the
                // client's business, but a mistyped expression shows here)
                log.debug("The key expression of {} gave no key: {}", invocation.getMethod(), e.getMessage());
                return new IdempotencyKeyParser.Missing();
            }
            return unreadableKey(invocation, e);
        } catch (RuntimeException e) {
            // code the expression called refused the request's value (SpEL passes its unchecked exceptions on)
            return unreadableKey(invocation, e);
        }
    }

    private static IdempotencyKeyParser.Result keyFromExpression(Expression expression,
                                                                 MethodBasedEvaluationContext context) {
        Object value = expression.getValue(context);
        // an Optional (a parameter such as @RequestHeader Optional<String>) is what it holds: an empty one is no value,
        // as a null is (taken as its text, every request without one would share the key "Optional.empty" and be
        // answered the first one's answer), and a present one is keyed as its value would be, not as "Optional[…]"
        if (value instanceof Optional<?> optional) {
            value = optional.orElse(null);
        }
        // a JSON tree (a JsonNode parameter, or a part of one) as the body's members are: a text without its quotes,
        // a number by its value, an object or array by its canonical form (below); a null node is no value
        value = CanonicalJson.treeContent(value);
        // so is an empty object, collection or array: taken as its text ("{}", "[]"), every request whose value came
        // empty would share one key, and each after the first be answered with the first one's answer
        if (value == null || value instanceof Map<?, ?> map && map.isEmpty()
                || value instanceof Collection<?> collection && collection.isEmpty()
                || value.getClass().isArray() && Array.getLength(value) == 0
                || value.toString().isEmpty()) {
            return new IdempotencyKeyParser.Missing();
        }
        // a JSON number is compared as its exact decimal value, as in the fingerprint: 1000, 1000.0 and 1e3 are one key
        // an object or array (of the body, or a collection) as its canonical JSON, as in the fingerprint: its
        // toString() depends on the order of its members and on how its numbers are written
        String key = value instanceof BigDecimal number ? plainKey(number)
                : value instanceof Map<?, ?> || value instanceof Collection<?> || value.getClass().isArray()
                ? new String(CanonicalJson.canonicalize(value), StandardCharsets.UTF_8)
                : value.toString();
        if (key == null || key.length() > IdempotencyKeyParser.MAX_KEY_LENGTH) {
            return new IdempotencyKeyParser.Malformed(
                    "the key is longer than " + IdempotencyKeyParser.MAX_KEY_LENGTH + " characters");
        }
        if (!ScopedKey.storable(key)) {
            // a JSON string or a decoded query can carry these, a header cannot: no text column stores a NUL, and the
            // driver would send half of a surrogate pair (a JSON escape, \ud800) as '?', making two keys one
            return new IdempotencyKeyParser.Malformed(key.indexOf('\0') >= 0 ? "the key contains a NUL character"
                    : "the key contains half of a surrogate pair");
        }
        return new IdempotencyKeyParser.Valid(key);
    }

    /**
     * A number's exact decimal value written out without an exponent, or null when that text would be longer than a
     * key may be. Judged before it is written: a parameter bound from {@code 1e1500000000} (Spring MVC binds any
     * exponent an int holds) would otherwise be written out as a billion and a half digits, gigabytes and seconds for
     * one short request, only to be refused for its length.
     */
    private static String plainKey(BigDecimal number) {
        if (number.signum() == 0) {
            return "0";
        }
        // the place of its first digit: the digits before the point, or (negated) the zeros after it
        long leading = (long) number.precision() - number.scale();
        if (Math.abs(leading) > IdempotencyKeyParser.MAX_KEY_LENGTH) {
            return null;
        }
        // without its trailing zeros, as the fingerprint writes it (counted on the digits: stripping them one division
        // at a time is quadratic in a long number's length)
        BigDecimal stripped = new BigDecimal(new String(CanonicalJson.canonicalize(number), StandardCharsets.UTF_8));
        return stripped.precision() > IdempotencyKeyParser.MAX_KEY_LENGTH ? null : stripped.toPlainString();
    }

    private String fingerprint(IdempotentEndpoint endpoint, RequestView view, MethodBasedEvaluationContext context) {
        HttpServletRequest request = view.request;
        if (!endpoint.fingerprintExpressions.isEmpty()) {
            List<Object> values = new ArrayList<>();
            for (Expression expression : endpoint.fingerprintExpressions) {
                try {
                    values.add(expression.getValue(context)); // a JSON tree is written by its content
                } catch (EvaluationException e) {
                    throw e;
                } catch (RuntimeException e) {
                    // code the expression called refused the request's value (SpEL passes its unchecked exceptions
                    // on): the request does not carry a value this endpoint can be fingerprinted by, as above
                    throw new EvaluationException("the fingerprint expression could not read the request", e);
                }
            }
            byte[] canonical;
            try {
                canonical = CanonicalJson.canonicalize(values);
            } catch (IllegalArgumentException e) {
                // a map whose names are written alike (the number 1 and the text "1"): compared by one of them, two
                // different requests would be one, so this one is not fingerprinted, as above
                throw new EvaluationException("the fingerprint expression's value has no canonical form", e);
            }
            return RequestFingerprint.of(method(request), request.getRequestURI(), null, canonical, null,
                    apiVersion(request));
        }
        if (endpoint.keyExpression != null) {
            return RequestFingerprint.of(method(request), request.getRequestURI(), null, NOTHING, null,
                    apiVersion(request));
        }
        IdempotencyProperties.BodyFingerprint mode = properties.getBodyFingerprint();
        return RequestFingerprint.of(method(request), request.getRequestURI(), request.getQueryString(),
                view.bodyFingerprintBytes(mode), view.bytesCharset(mode), apiVersion(request));
    }

    /**
     * The API version the request asks for, as it sent it (a header, a media type parameter, a query parameter or a
     * path segment, as the application's {@link ApiVersionStrategy} reads it), or {@code null}: the version selects
     * the handler, so the same key with another version is another request. The version as sent, not as resolved: a
     * request that names none is the same request after the application changed its default version, and its retry
     * is answered as it was.
     */
    private String apiVersion(HttpServletRequest request) {
        if (apiVersions == null) {
            return null;
        }
        try {
            return apiVersions.resolveVersion(request);
        } catch (RuntimeException e) {
            // Spring MVC resolved it to map the request to this handler; a custom resolver that fails on a second
            // reading leaves the request fingerprinted without it, as in an application without versions
            log.debug("The API version of {} {} could not be read again: {}", request.getMethod(),
                    IdempotencyFilter.loggedPath(request), e.getClass().getName());
            return null;
        }
    }

    /** Whether Spring MVC maps the request to a controller method, rather than to a handler function. */
    private static boolean isControllerHandled(HttpServletRequest request) {
        return request.getAttribute(HandlerMapping.BEST_MATCHING_HANDLER_ATTRIBUTE) instanceof HandlerMethod;
    }

    /** Whether the advised method is the handler Spring MVC chose for the request (or no handler is known). */
    private static boolean isHandlerOf(HttpServletRequest request, MethodInvocation invocation) {
        Object handler = request.getAttribute(HandlerMapping.BEST_MATCHING_HANDLER_ATTRIBUTE);
        if (!(handler instanceof HandlerMethod handlerMethod)) {
            return true;
        }
        Method called = invocation.getMethod();
        Method mapped = handlerMethod.getMethod();
        if (called.equals(mapped)) {
            return true; // the usual case, without comparing parameter lists on every request
        }
        return called.getName().equals(mapped.getName())
                && Arrays.equals(called.getParameterTypes(), mapped.getParameterTypes())
                && (mapped.getDeclaringClass().isAssignableFrom(called.getDeclaringClass())
                || called.getDeclaringClass().isAssignableFrom(mapped.getDeclaringClass()));
    }

    /**
     * Answers the request with {@code answer} instead of its handler's: what the request's unit of work holds for the
     * handler (an entity its data binding changed) is dropped, so that nothing run later in the request writes it.
     */
    private Object answer(IdempotentExchange exchange, StoredResponse answer, StoredResponse.Header... headers) {
        transactionResources.discardPending();
        BodyRecordingRequest request = exchange.request();
        if (headers.length == 0 && request.getProtocol().startsWith("HTTP/1.") && request.bodyLeftUnread()) {
            // answered before the body was read to its end (a bad key, a body refused by its size): the rest of
            // it is still in the connection, which the container then closes without reading it (Jetty does not say
            // so in an answer already sent). Said, so that the client knows to send its next request on another
            headers = IdempotencyFilter.CLOSE_CONNECTION;
        }
        exchange.answer(answer, headers);
        return answered(request);
    }

    /**
     * What the advice gives back when it answered the request without running the method. A controller method is the
     * handler: it did not run, and Spring MVC renders nothing of its {@code null}. A method that a handler function
     * called is not: the function would go on with a {@code null} it does not expect, and do its work after the call
     * again on every retry, outside any transaction; the exception stops it (see {@link RequestAnsweredException}).
     * Spring MVC refuses a {@code null} {@code HttpHeaders} (the request would end in a 500 instead of the decided
     * answer), so a handler returning headers gets empty ones, of which Spring MVC renders nothing either.
     */
    private static Object answered(HttpServletRequest request) {
        if (request.getAttribute(HandlerMapping.BEST_MATCHING_HANDLER_ATTRIBUTE) instanceof HandlerMethod handler) {
            return handler.getReturnType().getParameterType() == HttpHeaders.class ? new HttpHeaders() : null;
        }
        throw new RequestAnsweredException();
    }

    private static boolean isMultipart(HttpServletRequest request) {
        String type = request.getContentType();
        return type != null && type.toLowerCase(Locale.ROOT).startsWith("multipart/");
    }

    private static String scopeOf(IdempotentEndpoint endpoint, HttpServletRequest request, MethodInvocation invocation) {
        if (!endpoint.scope.isEmpty()) {
            return endpoint.scope;
        }
        Object pattern = request.getAttribute(HandlerMapping.BEST_MATCHING_PATTERN_ATTRIBUTE);
        if (pattern != null) {
            return method(request) + " " + pattern;
        }
        Method method = invocation.getMethod();
        return method.getDeclaringClass().getName() + "#" + method.getName();
    }

    /**
     * The request's method as its scope and fingerprint name it: in upper case, as the endpoint's methods cover it. A
     * route mapped to no method in particular takes {@code post} too, which the default methods cover as POST: named
     * as sent, it would be a scope of its own, and run the handler again under a key POST has used.
     */
    private static String method(HttpServletRequest request) {
        return request.getMethod().toUpperCase(Locale.ROOT);
    }

    private static HttpServletRequest currentRequest() {
        RequestAttributes attributes = RequestContextHolder.getRequestAttributes();
        return attributes instanceof ServletRequestAttributes servlet ? servlet.getRequest() : null;
    }

    /**
     * The request as the fingerprint and the expressions see it; the JSON body is read once: parsed for the
     * expressions, else only written in its canonical form as it is read (its parsed values would take many times its
     * size).
     */
    private static final class RequestView {

        private final HttpServletRequest request;
        private final byte[] body;
        private final boolean form;
        private final boolean unparsedForm; // a form with a part the container left in the body, read as bytes
        private final boolean coded; // still in a content coding the library cannot undo
        private final boolean isJson; // the body was read as JSON
        private final Object json; // the parsed JSON body (null for the JSON text null), or null when it is not JSON
        private final byte[] canonicalJson; // the JSON body's canonical form, when it was read but not parsed

        /**
         * @param readJson  whether a JSON body is read (and refused when it cannot be)
         * @param parseJson whether a JSON body that is read is parsed, for the expressions' {@code #body}; else only
         *                  its canonical form is kept
         */
        RequestView(HttpServletRequest request, BodyRecordingRequest recorded, boolean readJson, boolean parseJson)
                throws IOException, BodyRecordingRequest.BodyTooLargeException, CanonicalJson.InvalidJsonException,
                ContentCodings.UndecodableBodyException, UnreadableParametersException {
            this.request = request;
            this.form = isForm(request);
            if (form) {
                // the container parses the form from its own stream: reading the body here would leave it nothing
                recorded.checkDeclaredLength();
                Map<String, Object> parameters = formParameters(request);
                byte[] parsed = CanonicalJson.canonicalize(parameters);
                if (recorded.getContentLengthLong() < 0 && !recorded.isFormKept()) {
                    // a chunked form declares no length, and the container has read it: measured by its parameters
                    // as they are fingerprinted. A declared length is the form as sent, checked above, as is a form
                    // read into the copy: its parameters written as JSON are longer than the form where they are
                    // many and short
                    recorded.checkLength(parsed.length);
                }
                // what the container did not parse as parameters (forms of some methods only, and a form a filter
                // or the handler's converters read first) is still in the body, where the handler's converters read it
                byte[] unparsed = recorded.isFormKept() ? NOTHING : recorded.body();
                this.unparsedForm = unparsed.length > 0;
                this.body = unparsed.length == 0 ? parsed : CanonicalJson.canonicalize(
                        List.of(parameters, new String(unparsed, StandardCharsets.ISO_8859_1)));
                this.coded = false;
            } else {
                this.unparsedForm = false;
                ContentCodings.Decoded decoded = recorded.decodedBody();
                this.body = decoded.bytes();
                this.coded = decoded.coded();
            }
            // a body still in a content coding the library cannot undo is compared as the bytes it is
            MediaType jsonType = !readJson || form || coded || body.length == 0 ? null : jsonType(request);
            this.isJson = jsonType != null;
            byte[] utf8 = isJson ? inUtf8(body, jsonType, request) : null;
            this.json = isJson && parseJson ? CanonicalJson.parse(utf8) : null;
            this.canonicalJson = isJson && !parseJson ? CanonicalJson.canonicalize(utf8) : null;
        }

        /**
         * The JSON body in UTF-8, as the canonical form reads it. Spring MVC's converters decode a body in the charset
         * its Content-Type names (else in the request's character encoding): two bodies are the same request when
         * they read the same, whatever their bytes. Its Jackson converter hands a body in UTF-8, US-ASCII, UTF-16 or
         * UTF-32 to Jackson as bytes, whose encoding Jackson detects itself (see {@link #detectedByJackson}).
         */
        private static byte[] inUtf8(byte[] body, MediaType type, HttpServletRequest request)
                throws CanonicalJson.InvalidJsonException {
            Charset charset;
            try {
                charset = charsetOf(type, request);
            } catch (IllegalArgumentException e) {
                throw new CanonicalJson.InvalidJsonException("the JSON body's charset is not supported");
            }
            if (charset == null || JACKSON_DETECTS.contains(charset.name())) {
                JacksonEncoding detected = detectedByJackson(body, charset);
                charset = detected.charset();
                if (detected.mark() > 0) { // copied only then: most bodies have none
                    body = Arrays.copyOfRange(body, detected.mark(), body.length);
                }
            }
            if (charset == null || charset.equals(StandardCharsets.UTF_8)) {
                return body;
            }
            CharBuffer text;
            try {
                text = charset.newDecoder()
                        .onMalformedInput(CodingErrorAction.REPORT)
                        .onUnmappableCharacter(CodingErrorAction.REPORT)
                        .decode(ByteBuffer.wrap(body));
            } catch (CharacterCodingException e) {
                throw new CanonicalJson.InvalidJsonException("the JSON body is not valid " + charset.name());
            }
            try {
                // some decoders (CESU-8, UTF-32) give half of a surrogate pair, which UTF-8 cannot hold: replaced
                // by '?', the body would read as another
                ByteBuffer utf8 = StandardCharsets.UTF_8.newEncoder()
                        .onMalformedInput(CodingErrorAction.REPORT)
                        .onUnmappableCharacter(CodingErrorAction.REPORT)
                        .encode(text);
                byte[] bytes = new byte[utf8.remaining()];
                utf8.get(bytes);
                return bytes;
            } catch (CharacterCodingException e) {
                throw new CanonicalJson.InvalidJsonException("the JSON body holds half of a surrogate pair");
            }
        }

        /** The charsets for which Spring MVC's Jackson converter lets Jackson detect the body's encoding. */
        private static final Set<String> JACKSON_DETECTS = Set.of("UTF-8", "US-ASCII", "UTF-16", "UTF-16BE",
                "UTF-16LE", "UTF-32", "UTF-32BE", "UTF-32LE");

        /**
         * How Jackson reads a body it is handed as bytes: in which encoding, after a byte order mark of how many bytes
         * (0 when it has none, or one Jackson does not skip).
         */
        private record JacksonEncoding(Charset charset, int mark) {
        }

        /**
         * The encoding Jackson reads a body in that it is handed as bytes: as the first bytes tell (RFC 4627,
         * section 3), UTF-32 or UTF-16 by where their zero bytes are, else UTF-8; or, in a body of four bytes or more
         * that begins with a byte order mark, as the mark shows, whatever charset is named, the mark itself skipped.
         *
         * @param named the charset the body's type or the request names, or null
         */
        private static JacksonEncoding detectedByJackson(byte[] body, Charset named) {
            int[] b = new int[4];
            for (int i = 0; i < b.length; i++) {
                b[i] = i < body.length ? body[i] & 0xff : -1;
            }
            if (body.length >= 4) {
                // Jackson looks for a byte order mark only where it has four bytes
                if (b[0] == 0 && b[1] == 0 && b[2] == 0xFE && b[3] == 0xFF) {
                    return new JacksonEncoding(Charset.forName("UTF-32BE"), 4);
                }
                if (b[0] == 0xFF && b[1] == 0xFE && b[2] == 0 && b[3] == 0) {
                    return new JacksonEncoding(Charset.forName("UTF-32LE"), 4);
                }
                if (b[0] == 0 && b[1] == 0 && b[2] == 0xFF && b[3] == 0xFE
                        || b[0] == 0xFE && b[1] == 0xFF && b[2] == 0 && b[3] == 0) {
                    return new JacksonEncoding(named, 0); // the mark of an order of UCS-4 that Jackson refuses
                }
                if (b[0] == 0xFE && b[1] == 0xFF) {
                    return new JacksonEncoding(StandardCharsets.UTF_16BE, 2);
                }
                if (b[0] == 0xFF && b[1] == 0xFE) {
                    return new JacksonEncoding(StandardCharsets.UTF_16LE, 2);
                }
                if (b[0] == 0xEF && b[1] == 0xBB && b[2] == 0xBF) {
                    return new JacksonEncoding(StandardCharsets.UTF_8, 3);
                }
                if (b[0] == 0 && b[1] == 0 && b[2] == 0) {
                    return new JacksonEncoding(Charset.forName("UTF-32BE"), 0);
                }
                if (b[1] == 0 && b[2] == 0 && b[3] == 0) {
                    return new JacksonEncoding(Charset.forName("UTF-32LE"), 0);
                }
                if (b[0] == 0 && b[2] == 0 && b[3] == 0 || b[0] == 0 && b[1] == 0 && b[3] == 0) {
                    return new JacksonEncoding(named, 0); // an order of UCS-4 that Jackson refuses
                }
            }
            if (body.length >= 2 && b[0] == 0) {
                return new JacksonEncoding(StandardCharsets.UTF_16BE, 0);
            }
            if (body.length >= 2 && b[1] == 0) {
                return new JacksonEncoding(StandardCharsets.UTF_16LE, 0);
            }
            return new JacksonEncoding(StandardCharsets.UTF_8, 0);
        }

        /**
         * The charset Spring MVC reads the body in: the one its Content-Type names, else the request's character
         * encoding (which Spring MVC adds to a type that names none), else null.
         *
         * @throws IllegalArgumentException if the charset is not supported
         */
        private static Charset charsetOf(MediaType type, HttpServletRequest request) {
            Charset charset = type == null ? null : type.getCharset();
            if (charset == null && request.getCharacterEncoding() != null) {
                charset = Charset.forName(request.getCharacterEncoding());
            }
            return charset;
        }

        byte[] bodyFingerprintBytes(IdempotencyProperties.BodyFingerprint mode) {
            if (isCanonical(mode)) {
                return canonicalJson != null ? canonicalJson : CanonicalJson.canonicalize(json, body.length);
            }
            return body;
        }

        private boolean isCanonical(IdempotencyProperties.BodyFingerprint mode) {
            return isJson && mode == IdempotencyProperties.BodyFingerprint.CANONICAL_JSON;
        }

        /**
         * The name of the charset a body compared as its bytes is read in, when it is not UTF-8, else null. A
         * {@code String} argument reads the same bytes in another charset as other text: another request. A form
         * is compared by the parameters the container decoded (and what it left in the body as bytes, which Spring
         * MVC's form converter decodes in the charset), a canonical JSON body as the text it reads.
         */
        String bytesCharset(IdempotencyProperties.BodyFingerprint mode) {
            if (form && !unparsedForm || body.length == 0 || isCanonical(mode)) {
                return null;
            }
            MediaType type = contentType(request);
            Charset charset;
            try {
                charset = charsetOf(type, request);
            } catch (IllegalArgumentException e) {
                // unknown to this platform: named as it is spelled, which keeps it apart from the others
                String named = type != null && type.getParameter("charset") != null ? type.getParameter("charset")
                        : request.getCharacterEncoding();
                return named.toLowerCase(Locale.ROOT);
            }
            return charset == null || charset.equals(StandardCharsets.UTF_8) ? null : charset.name();
        }

        /**
         * The variables the expressions read, {@code #body} as {@link #bodyVariable} gives it.
         *
         * @param annotated the method that carries {@code @Idempotent}: its parameters are named as the expressions
         *                  name them, also where the proxy is called with an interface's method that names them
         *                  otherwise
         */
        MethodBasedEvaluationContext evaluationContext(Method annotated, MethodInvocation invocation,
                                                       boolean readsBody)
                throws UnreadableParametersException, UnreadableTextException {
            return IdempotentMethodInterceptor.evaluationContext(request, annotated, invocation,
                    bodyVariable(readsBody));
        }

        /**
         * The body as {@code #body} reads it: the JSON body parsed; a form as the canonical JSON of its parameters
         * (read through {@code #params}); any other body as text in the charset a {@code String} argument reads it in,
         * the one its Content-Type names, else the request's character encoding, else UTF-8. Bytes that are no text
         * in that charset (also a body in a content coding the library cannot undo) have no one text: read with
         * replacement characters, two bodies that differ there would read alike, and be one key or fingerprint.
         *
         * @param readsBody whether an expression reads {@code #body}: only then is it read (else null), and such a
         *                  body refused
         * @throws UnreadableTextException if the body has no one text and an expression reads it
         */
        private Object bodyVariable(boolean readsBody) throws UnreadableTextException {
            if (!readsBody) {
                return null; // no expression reads it: not worth decoding
            }
            if (isJson) {
                return json;
            }
            if (form) {
                return new String(body, StandardCharsets.UTF_8);
            }
            Charset charset;
            try {
                charset = charsetOf(contentType(request), request);
            } catch (IllegalArgumentException e) {
                throw new UnreadableTextException("its charset is not supported");
            }
            if (charset == null) {
                charset = StandardCharsets.UTF_8;
            }
            try {
                CharBuffer text = charset.newDecoder()
                        .onMalformedInput(CodingErrorAction.REPORT)
                        .onUnmappableCharacter(CodingErrorAction.REPORT)
                        .decode(ByteBuffer.wrap(body));
                // half of a surrogate pair (which some decoders give) would be written as '?' in the fingerprint
                StandardCharsets.UTF_8.newEncoder()
                        .onMalformedInput(CodingErrorAction.REPORT)
                        .onUnmappableCharacter(CodingErrorAction.REPORT)
                        .encode(text.duplicate());
                return text.toString();
            } catch (CharacterCodingException e) {
                throw new UnreadableTextException(coded
                        ? "it is in a content coding the library does not decompress"
                        : "it is not valid " + charset.name());
            }
        }

        /** The request's Content-Type, or null when it has none or it does not parse. */
        private static MediaType contentType(HttpServletRequest request) {
            try {
                return request.getContentType() == null ? null : MediaType.parseMediaType(request.getContentType());
            } catch (InvalidMediaTypeException e) {
                return null;
            }
        }

        /**
         * The variables of the route the request matched: a controller method's, or a functional route's, which
         * Spring MVC keeps under an attribute of its own (the handler function reads them from its
         * {@code ServerRequest}).
         */
        private static Map<?, ?> pathVariables(HttpServletRequest request) {
            Object variables = request.getAttribute(HandlerMapping.URI_TEMPLATE_VARIABLES_ATTRIBUTE);
            if (variables == null) {
                variables = request.getAttribute(RouterFunctions.URI_TEMPLATE_VARIABLES_ATTRIBUTE);
            }
            return variables instanceof Map<?, ?> map ? map : Map.of();
        }

        /** The request's content type when it is JSON ({@code json} or {@code +json}), else null. */
        private static MediaType jsonType(HttpServletRequest request) {
            String type = request.getContentType();
            if (type == null) {
                return null;
            }
            try {
                MediaType parsed = MediaType.parseMediaType(type);
                String subtype = parsed.getSubtype();
                return subtype.equals("json") || subtype.endsWith("+json") ? parsed : null;
            } catch (InvalidMediaTypeException e) {
                return null;
            }
        }

        private static boolean isForm(HttpServletRequest request) {
            String type = request.getContentType();
            return type != null && type.toLowerCase(Locale.ROOT).startsWith(MediaType.APPLICATION_FORM_URLENCODED_VALUE);
        }

        /** The container parsed the form itself, past our recording: fingerprint the parameters it parsed. */
        private static Map<String, Object> formParameters(HttpServletRequest request)
                throws UnreadableParametersException {
            Map<String, Object> form = new LinkedHashMap<>();
            parameters(request).forEach((name, values) -> form.put(name, List.of(values)));
            return form;
        }

        /**
         * The request's parameters. The container parses them on the first call that asks for one, and refuses a
         * query or form it cannot read (Servlet 6.1: {@code IllegalStateException}).
         */
        private static Map<String, String[]> parameters(HttpServletRequest request)
                throws UnreadableParametersException {
            try {
                BodyRecordingRequest recorded = WebUtils.getNativeRequest(request, BodyRecordingRequest.class);
                if (recorded != null) {
                    recorded.keepFormBody();
                }
                return request.getParameterMap();
            } catch (IllegalStateException e) {
                throw new UnreadableParametersException(e);
            }
        }
    }

    /**
     * The refusal of a request that arrived inside a transaction already active on its thread: a {@code @Transactional}
     * test's MockMvc request, usually. The transactions' own refusal is kept as a suppressed exception, so that this
     * one, the one that says what to do, stays the root cause a test framework shows.
     */
    private static IllegalStateException inArrivedTransaction(MethodInvocation invocation,
                                                              Transactions.AlreadyActiveException refused) {
        IllegalStateException refusal = new IllegalStateException("@Idempotent method " + invocation.getMethod()
                + " was called in a request that arrived inside a transaction already active on its thread, so nothing"
                + " was claimed or run: its claim and its answer must commit in a transaction of their own, as they"
                + " do for a client's request on a server. This happens in a @Transactional test (Spring's"
                + " test-managed transaction) that sends the request through MockMvc, which runs it on the test's"
                + " thread; take that test method out of the transaction with"
                + " @Transactional(propagation = Propagation.NOT_SUPPORTED) (or leave @Transactional off the test"
                + " class) and remove what it wrote yourself, or send the request to the application on a random"
                + " port. Outside tests, a filter ordered before the IdempotencyFilter opened the transaction:"
                + " end it before the filter chain goes on.");
        refusal.addSuppressed(refused);
        return refusal;
    }
}
