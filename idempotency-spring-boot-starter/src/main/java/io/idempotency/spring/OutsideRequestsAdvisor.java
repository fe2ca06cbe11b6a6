package io.idempotency.spring;

import org.aopalliance.intercept.MethodInterceptor;
import org.springframework.aop.support.StaticMethodMatcherPointcutAdvisor;
import org.springframework.util.ClassUtils;
import org.springframework.web.context.request.RequestContextHolder;

import java.lang.reflect.Method;

/**
 * Stands in for the {@code @Idempotent} advice in an application that serves no HTTP requests (a worker or a batch job
 * sharing a web application's classes), where that advice is not set up: every call of an {@code @Idempotent} method
 * is refused, as the advice refuses a call made outside any request in a web application. Left unadvised, a service
 * method that a message listener or a scheduled task calls would run its work again on every redelivery or rerun,
 * with nothing but a warning at startup to say so.
 */
class OutsideRequestsAdvisor extends StaticMethodMatcherPointcutAdvisor {

    /** Whether Spring's web support, which tells of a request being served on the thread, is on the class path. */
    private static final boolean WEB_PRESENT = ClassUtils.isPresent(
            "org.springframework.web.context.request.RequestContextHolder", OutsideRequestsAdvisor.class.getClassLoader());

    OutsideRequestsAdvisor() {
        super((MethodInterceptor) invocation -> {
            if (WEB_PRESENT && Web.servingRequest()) {
                // a bean of a context that serves no requests, called by a web context's handler: a parent context's
                // (SpringApplicationBuilder's parent(...) serves none), whose beans no web context's advice reaches
                throw new IllegalStateException("@Idempotent method " + invocation.getMethod() + " is on a bean of an"
                        + " application context that serves no HTTP requests (a parent of the web one, say), and was"
                        + " called while a request was being served: @Idempotent works on the beans of the web"
                        + " application context only. Put it on the handler the request reaches, and remove it from"
                        + " this method.");
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
