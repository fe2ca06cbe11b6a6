package io.idempotency.spring;

import org.aopalliance.intercept.MethodInterceptor;
import org.springframework.aop.support.StaticMethodMatcherPointcutAdvisor;
import org.springframework.util.ClassUtils;
import org.springframework.web.context.request.RequestContextHolder;

import java.lang.reflect.Method;

/**
 * Stands in for the {@code @Idempotent} advice in an application that serves no HTTP requests (a worker or a batch job
 * sharing a web application's classes), where that advice is not set up: every call of an {@code @Idempotent} method
 * made where no request is served is refused, as the advice refuses a call made outside any request in a web
 * application. Left unadvised, a service method that a message listener or a scheduled task calls would run its work
 * again on every redelivery or rerun, with nothing but a warning at startup to say so.
 */
class OutsideRequestsAdvisor extends StaticMethodMatcherPointcutAdvisor {

    /** Whether Spring's web support, which tells of a request being served on the thread, is on the class path. */
    private static final boolean WEB_PRESENT = ClassUtils.isPresent(
            "org.springframework.web.context.request.RequestContextHolder",
            OutsideRequestsAdvisor.class.getClassLoader());

    OutsideRequestsAdvisor() {
        super((MethodInterceptor) invocation -> {
            if (WEB_PRESENT && Web.servingRequest()) {
                // a request is being served on this thread, by a web context of the hierarchy this one is the parent
                // of: AspectJ's auto-proxy creator (and Spring's DefaultAdvisorAutoProxyCreator) apply a parent's
                // advisors to a child's beans, whose @Idempotent handlers the child's own advice serves. This advice
                // refuses only what runs where no request is served: a listener's, a task's call
                return invocation.proceed();
            }
            throw calledOutsideRequests(invocation.getMethod());
        });
        setOrder(IdempotentAdvisor.ORDER);
    }

    /** Spring's web support, loaded only where it is on the class path. */
    private static final class Web {
        static boolean servingRequest() {
            return RequestContextHolder.getRequestAttributes() != null;
        }
    }

    @Override
    public boolean matches(Method method, Class<?> targetClass) {
        return IdempotentAdvisor.annotated(method, targetClass) != null;
    }

    /** The refusal of a call of {@code method} made where no HTTP request is being served. */
    static IllegalStateException calledOutsideRequests(Method method) {
        // a service method called from a message listener, a scheduled task or a thread of the application's: there
        // is no request to take the key from, so every call fails; a listener's broker redelivers it
        return new IllegalStateException("@Idempotent method " + method + " was called outside any HTTP request (from"
                + " a message listener, a scheduled task or another thread): it is not a handler reached by an HTTP"
                + " request, the only kind of method @Idempotent makes idempotent (it takes the key from the request)."
                + " Work called from a listener or a task is made idempotent with IdempotencyTemplate, under a key of"
                + " its own (the message's id, or the fields that identify the work); remove @Idempotent from this"
                + " method.");
    }
}
