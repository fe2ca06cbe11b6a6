package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyKeyParser;
import io.idempotency.core.RequestFingerprint;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StoragePolicy;
import io.idempotency.core.StoredResponse;
import jakarta.servlet.http.HttpServletRequest;
import org.aopalliance.intercept.MethodInterceptor;
import org.aopalliance.intercept.MethodInvocation;
import org.springframework.core.annotation.AnnotatedElementUtils;
import org.springframework.http.MediaType;
import org.springframework.web.context.request.RequestAttributes;
import org.springframework.web.context.request.RequestContextHolder;
import org.springframework.web.context.request.ServletRequestAttributes;
import org.springframework.web.servlet.HandlerMapping;

import java.io.IOException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collections;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The advice around {@code @Idempotent} methods. It runs after Spring MVC has bound and validated the arguments
 * (so a request rejected before the handler body runs leaves nothing behind), and outside any {@code @Transactional}
 * advice ({@link IdempotentAdvisor#ORDER}), so that it opens the transaction the handler's writes join:
 * <ol>
 *   <li>parse the key; fingerprint method, path, query and body — all before a database connection is taken;</li>
 *   <li>claim the key through the {@link IdempotencyEngine};</li>
 *   <li>run the handler with the response captured, or hand the filter the answer to send instead (replay,
 *       mismatch, in progress), in which case the handler does not run and {@code null} is returned.</li>
 * </ol>
 * The {@link IdempotencyFilter} stores the answer and commits after the response has been rendered. Thread-safe.
 */
public class IdempotentMethodInterceptor implements MethodInterceptor {

    /** Sent with every replayed answer. */
    public static final String REPLAYED_HEADER = "Idempotent-Replayed";

    private final IdempotencyEngine engine;
    private final CallerResolver callerResolver;
    private final ProblemResponses problems;
    private final String headerName;
    private final String retryAfterSeconds;
    private final Map<Method, Idempotent> annotations = new ConcurrentHashMap<>();

    public IdempotentMethodInterceptor(IdempotencyEngine engine, CallerResolver callerResolver,
                                       ProblemResponses problems, String headerName, Duration retryAfter) {
        this.engine = engine;
        this.callerResolver = callerResolver;
        this.problems = problems;
        this.headerName = headerName;
        this.retryAfterSeconds = Long.toString(Math.max(1, (retryAfter.toMillis() + 999) / 1000));
    }

    @Override
    public Object invoke(MethodInvocation invocation) throws Throwable {
        HttpServletRequest request = currentRequest();
        IdempotentExchange exchange = request == null ? null
                : (IdempotentExchange) request.getAttribute(IdempotentExchange.ATTRIBUTE);
        if (exchange == null) {
            throw new IllegalStateException("@Idempotent method " + invocation.getMethod()
                    + " was called outside a request that passed the IdempotencyFilter");
        }
        if (exchange.isTaken()) {
            return invocation.proceed(); // an @Idempotent method called by another within one request
        }
        Idempotent idempotent = annotations.computeIfAbsent(invocation.getMethod(),
                method -> AnnotatedElementUtils.findMergedAnnotation(method, Idempotent.class));
        String instance = request.getRequestURI();

        IdempotencyKeyParser.Result parsed =
                IdempotencyKeyParser.parse(Collections.list(request.getHeaders(headerName)));
        if (parsed instanceof IdempotencyKeyParser.Missing) {
            if (!idempotent.keyRequired()) {
                return invocation.proceed();
            }
            return answer(exchange, problems.render(ProblemResponses.Problem.KEY_MISSING,
                    "This endpoint requires an " + headerName + " header.", instance));
        }
        if (parsed instanceof IdempotencyKeyParser.Malformed malformed) {
            return answer(exchange, problems.render(ProblemResponses.Problem.KEY_MALFORMED,
                    "The " + headerName + " header is malformed: " + malformed.reason() + ".", instance));
        }
        String key = ((IdempotencyKeyParser.Valid) parsed).key();

        String fingerprint;
        if (isMultipart(request)) {
            return answer(exchange, problems.render(ProblemResponses.Problem.BODY_UNSUPPORTED,
                    "Multipart bodies cannot be fingerprinted; send the request as JSON or another single body.",
                    instance));
        }
        try {
            fingerprint = RequestFingerprint.of(request.getMethod(), request.getRequestURI(), request.getQueryString(),
                    bodyOf(request, exchange));
        } catch (BodyRecordingRequest.BodyTooLargeException e) {
            return answer(exchange, problems.render(ProblemResponses.Problem.REQUEST_TOO_LARGE,
                    "The request body is too large to be fingerprinted: " + e.getMessage() + ".", instance));
        }
        String caller = callerResolver.resolve(request);
        ScopedKey scopedKey = new ScopedKey(caller == null ? "" : caller, scopeOf(idempotent, request, invocation), key);

        IdempotencyEngine.Start start = engine.start(scopedKey, fingerprint);
        if (start instanceof IdempotencyEngine.Proceed proceed) {
            exchange.begin(proceed.execution(), StoragePolicy.DEFAULT);
            try {
                return invocation.proceed();
            } catch (Throwable handlerFailure) {
                exchange.markHandlerFailed();
                throw handlerFailure;
            }
        }
        if (start instanceof IdempotencyEngine.Replay replay) {
            return answer(exchange, replay.response(), new StoredResponse.Header(REPLAYED_HEADER, "true"));
        }
        if (start instanceof IdempotencyEngine.Mismatch) {
            return answer(exchange, problems.render(ProblemResponses.Problem.KEY_MISMATCH,
                    "This " + headerName + " was already used for a different request (method, path, query or body"
                            + " differ). Use a new key for a new request.", instance));
        }
        return answer(exchange, problems.render(ProblemResponses.Problem.REQUEST_IN_PROGRESS,
                "A request with this " + headerName + " is still being processed. Retry later with the same key.",
                instance, new StoredResponse.Header("Retry-After", retryAfterSeconds)));
    }

    private static Object answer(IdempotentExchange exchange, StoredResponse answer, StoredResponse.Header... headers) {
        exchange.answer(answer, headers);
        return null;
    }

    private static byte[] bodyOf(HttpServletRequest request, IdempotentExchange exchange)
            throws IOException, BodyRecordingRequest.BodyTooLargeException {
        if (isForm(request)) {
            // the container parsed the form itself, past our recording: fingerprint the parameters it parsed
            StringBuilder form = new StringBuilder();
            request.getParameterMap().forEach((name, values) -> {
                for (String value : values) {
                    form.append(name.length()).append(':').append(name).append('=')
                            .append(value.length()).append(':').append(value).append('&');
                }
            });
            return form.toString().getBytes(StandardCharsets.UTF_8);
        }
        return exchange.request().body();
    }

    private static boolean isForm(HttpServletRequest request) {
        String type = request.getContentType();
        return type != null && type.toLowerCase().startsWith(MediaType.APPLICATION_FORM_URLENCODED_VALUE);
    }

    private static boolean isMultipart(HttpServletRequest request) {
        String type = request.getContentType();
        return type != null && type.toLowerCase().startsWith("multipart/");
    }

    private static String scopeOf(Idempotent idempotent, HttpServletRequest request, MethodInvocation invocation) {
        if (!idempotent.scope().isEmpty()) {
            return idempotent.scope();
        }
        Object pattern = request.getAttribute(HandlerMapping.BEST_MATCHING_PATTERN_ATTRIBUTE);
        if (pattern != null) {
            return request.getMethod() + " " + pattern;
        }
        Method method = invocation.getMethod();
        return method.getDeclaringClass().getName() + "#" + method.getName();
    }

    private static HttpServletRequest currentRequest() {
        RequestAttributes attributes = RequestContextHolder.getRequestAttributes();
        return attributes instanceof ServletRequestAttributes servlet ? servlet.getRequest() : null;
    }
}
