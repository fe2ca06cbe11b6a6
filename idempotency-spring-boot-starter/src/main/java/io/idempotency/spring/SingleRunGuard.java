package io.idempotency.spring;

import org.aopalliance.aop.Advice;
import org.aopalliance.intercept.MethodInterceptor;
import org.aopalliance.intercept.MethodInvocation;
import org.springframework.aop.Advisor;
import org.springframework.aop.ProxyMethodInvocation;
import org.springframework.aop.framework.Advised;
import org.springframework.aop.support.AopUtils;
import org.springframework.aop.support.StaticMethodMatcherPointcutAdvisor;
import org.springframework.beans.factory.config.BeanPostProcessor;
import org.springframework.core.Ordered;

import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Keeps the body of an {@code @Idempotent} method to one run per attempt of the {@code @Idempotent} advice. A retry
 * advice ordered inside that advice (between it and the method: Spring Retry's {@code @EnableRetry} and
 * Resilience4j's {@code @Retry} aspect are by default) would run the body again within one claim and one
 * transaction, after a failed run whose writes were not rolled back: both runs' writes would commit under one key.
 * <p>
 * Added last to the advice chain of every bean the {@code @Idempotent} advice reaches, after Spring's auto-proxy
 * creator made its proxy, so that it runs inside every advice of that chain, next to the method. It refuses a second
 * call within one attempt with an {@link IllegalStateException}, and the {@link IdempotentMethodInterceptor} fails the
 * attempt even when the retry advice recovered from that refusal: the request is rolled back whole and answered 500.
 * Calls outside an attempt the advice took on (a request without a key on an endpoint where it is optional, an
 * {@code @Idempotent} method called again by a handler function) and calls the body makes itself are not counted.
 */
final class SingleRunGuard implements BeanPostProcessor, Ordered {

    private static final ThreadLocal<Attempt> CURRENT = new ThreadLocal<>();

    private final Advisor advisor = new GuardAdvisor();

    /**
     * Marks an attempt of {@code invocation}'s {@code @Idempotent} method that the advice took on, until
     * {@link Attempt#close()}.
     */
    static Attempt begin(MethodInvocation invocation) {
        Attempt attempt = new Attempt(invocation.getMethod(), invocation.getThis(), CURRENT.get());
        CURRENT.set(attempt);
        return attempt;
    }

    @Override
    public Object postProcessAfterInitialization(Object bean, String beanName) {
        if (bean instanceof Advised advised && !advised.isFrozen()
                && Arrays.stream(advised.getAdvisors()).anyMatch(IdempotentAdvisor.class::isInstance)
                && advised.indexOf(advisor) < 0) {
            advised.addAdvisor(advisor); // last: inside every advice of the chain
        }
        return bean;
    }

    /** After Spring's auto-proxy creator (ordered first), which makes the proxies this adds to. */
    @Override
    public int getOrder() {
        return Ordered.LOWEST_PRECEDENCE;
    }

    /** One attempt of an {@code @Idempotent} method that the advice took on. */
    static final class Attempt implements AutoCloseable {

        private final Method method;
        private final Object target;
        private final Attempt previous;
        private boolean called;
        private int running;
        private IllegalStateException refusal;

        private Attempt(Method method, Object target, Attempt previous) {
            this.method = method;
            this.target = target;
            this.previous = previous;
        }

        /**
         * Whether a call of this attempt has reached the method (this guard, inside every advice of its chain): its
         * body ran, whatever refused a later call before it got here (the method-validation proxy, method security).
         */
        boolean bodyCalled() {
            return called;
        }

        /** Throws the refusal of a second call, which an advice between may have recovered from. */
        void checkRanOnce() {
            if (refusal != null) {
                throw refusal;
            }
        }

        /**
         * The refusal of a second call in place of {@code failure}, which an advice between threw after it (gave up
         * retrying with the first call's exception), else {@code failure}.
         */
        Throwable refusalOr(Throwable failure) {
            if (refusal == null || refusal == failure) {
                return failure;
            }
            refusal.addSuppressed(failure);
            return refusal;
        }

        @Override
        public void close() {
            if (previous == null) {
                CURRENT.remove();
            } else {
                CURRENT.set(previous);
            }
        }

        private boolean isCallOf(MethodInvocation invocation) {
            return invocation.getThis() == target && invocation.getMethod().equals(method);
        }
    }

    /** Advises the methods the {@code @Idempotent} advice does. */
    private static final class GuardAdvisor extends StaticMethodMatcherPointcutAdvisor {

        GuardAdvisor() {
            super(new Guard());
        }

        @Override
        public boolean matches(Method method, Class<?> targetClass) {
            return IdempotentAdvisor.annotated(method, targetClass) != null;
        }
    }

    private static final class Guard implements MethodInterceptor {

        @Override
        public Object invoke(MethodInvocation invocation) throws Throwable {
            Attempt attempt = CURRENT.get();
            if (attempt == null || attempt.running > 0 || !attempt.isCallOf(invocation)) {
                return invocation.proceed(); // not an attempt's call, or one the body makes itself
            }
            if (attempt.called) {
                attempt.refusal = new IllegalStateException("@Idempotent method " + invocation.getMethod()
                        + " was called again within one attempt by an advice between the @Idempotent advice and the"
                        + " method" + between(invocation) + ", such as a retry advice: its first call's effects would"
                        + " be kept beside the second's under one key, so the request is rolled back. Order that"
                        + " advice before (outside) the @Idempotent advice (order " + IdempotentAdvisor.ORDER
                        + ", IdempotentAdvisor.ORDER), so that each of its attempts is claimed and rolled back on its"
                        + " own: @EnableRetry(order = IdempotentAdvisor.ORDER - 1) for Spring Retry,"
                        + " resilience4j.retry.retry-aspect-order below " + IdempotentAdvisor.ORDER
                        + " for Resilience4j; Spring's own @Retryable already runs outside it");
                throw attempt.refusal;
            }
            attempt.called = true;
            attempt.running++;
            try {
                return invocation.proceed();
            } finally {
                attempt.running--;
            }
        }

        /** The advice of the proxy's chain between the {@code @Idempotent} advice and this one, as far as it is known. */
        private static String between(MethodInvocation invocation) {
            if (!(invocation instanceof ProxyMethodInvocation proxied) || !(proxied.getProxy() instanceof Advised advised)) {
                return "";
            }
            Class<?> targetClass = invocation.getThis() == null ? null : AopUtils.getTargetClass(invocation.getThis());
            List<String> advice = new ArrayList<>();
            boolean inside = false;
            for (Advisor advisor : advised.getAdvisors()) {
                if (advisor instanceof GuardAdvisor) {
                    break;
                }
                if (inside && (targetClass == null
                        || IdempotencyStartupChecks.applies(advisor, invocation.getMethod(), targetClass))) {
                    Advice found = advisor.getAdvice();
                    advice.add(found + (advisor instanceof Ordered ordered ? " (order " + ordered.getOrder() + ")"
                            : ""));
                }
                inside |= advisor instanceof IdempotentAdvisor;
            }
            return advice.isEmpty() ? "" : " (" + String.join(", ", advice) + ")";
        }
    }
}
