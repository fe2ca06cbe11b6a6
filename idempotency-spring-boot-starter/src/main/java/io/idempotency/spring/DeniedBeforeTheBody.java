package io.idempotency.spring;

import java.util.Set;

/**
 * Recognizes a refusal of an {@code @Idempotent} handler by Spring Security's method security
 * ({@code @PreAuthorize}, {@code @Secured}, {@code @RolesAllowed}) when its interceptor runs inside the
 * {@code @Idempotent} advice ({@code @EnableMethodSecurity(offset = …)}): after the claim, but before the handler's
 * body. Such a refusal means the handler did nothing. (Ordered as by default, method security refuses before the
 * advice runs, and nothing is claimed.)
 *
 * <p>Spring Security's denial carries nothing that names the call it refused, so the refusal is recognized by where
 * it was raised, from its stack trace: an {@code AccessDeniedException} raised by the authorization step of an
 * {@code AuthorizationManagerBeforeMethodInterceptor} that the advice reached through nothing but the proceeding of
 * the advice chain and other method-security interceptors that let the call through. Not a refusal raised anywhere
 * in what that interceptor proceeded to: the handler's body (a secured bean it called, maybe after calling the
 * gateway), another advice between the two (it may have done something), or an {@code @PostAuthorize} check after
 * the body returned. A trace that does not show all of this (stack traces switched off, an exception made on another
 * thread, method security ordered inside {@code @Transactional} or another advice) is not taken for a refusal before
 * the body: the outcome stays unknown, as for any other exception.
 */
final class DeniedBeforeTheBody {

    private static final String ACCESS_DENIED = "org.springframework.security.access.AccessDeniedException";
    private static final String BEFORE_INTERCEPTOR =
            "org.springframework.security.authorization.method.AuthorizationManagerBeforeMethodInterceptor";
    /**
     * The frames of proceeding along the advice chain, and of the method-security interceptors that let it through
     * (each before-interceptor is registered behind a deferring one, which hands the call on).
     */
    private static final Set<String> PROCEEDING = Set.of(
            "org.springframework.aop.framework.ReflectiveMethodInvocation",
            "org.springframework.security.config.annotation.method.configuration.DeferringMethodInterceptor",
            BEFORE_INTERCEPTOR);

    private DeniedBeforeTheBody() {
    }

    /**
     * Whether {@code failure} is method security refusing the handler the advice proceeded to, before its body ran.
     * The advice must not ask for a failure that came after the handler called an {@code @Idempotent} method through
     * its proxy (that call's frames would stand for the advice's own).
     */
    static boolean of(Throwable failure) {
        if (!isAccessDenied(failure)) {
            return false;
        }
        StackTraceElement[] frames = failure.getStackTrace();
        // the advice's frame nearest to where the refusal was raised: the advice proceeding to the handler
        int advice = -1;
        for (int i = 0; i < frames.length; i++) {
            if (frames[i].getClassName().equals(IdempotentMethodInterceptor.class.getName())) {
                advice = i;
                break;
            }
        }
        if (advice < 0) {
            return false;
        }
        // the authorization step nearest to where it was raised, of an interceptor called by the advice chain
        int authorization = -1;
        for (int i = 0; i < advice; i++) {
            if (is(frames[i], BEFORE_INTERCEPTOR, "attemptAuthorization")) {
                authorization = i;
                break;
            }
        }
        if (authorization < 0 || authorization + 1 >= advice
                || !is(frames[authorization + 1], BEFORE_INTERCEPTOR, "invoke")) {
            return false;
        }
        if (authorization > 0 && is(frames[authorization - 1], BEFORE_INTERCEPTOR, "proceed")) {
            return false; // the interceptor let the call through: raised by what it proceeded to
        }
        // between the advice and that interceptor: only the chain proceeding, and interceptors that let it through
        for (int i = authorization + 2; i < advice; i++) {
            if (!PROCEEDING.contains(frames[i].getClassName())) {
                return false;
            }
        }
        return true;
    }

    private static boolean is(StackTraceElement frame, String type, String method) {
        return frame.getClassName().equals(type) && frame.getMethodName().equals(method);
    }

    /** Whether {@code failure} is Spring Security's {@code AccessDeniedException}, without needing it on the class path. */
    private static boolean isAccessDenied(Throwable failure) {
        for (Class<?> type = failure.getClass(); type != null; type = type.getSuperclass()) {
            if (type.getName().equals(ACCESS_DENIED)) {
                return true;
            }
        }
        return false;
    }
}
