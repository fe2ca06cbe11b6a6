package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import org.aopalliance.aop.Advice;
import org.springframework.aop.support.StaticMethodMatcherPointcutAdvisor;
import org.springframework.core.Ordered;
import org.springframework.core.annotation.AnnotatedElementUtils;

import java.lang.reflect.Method;

/**
 * Applies the {@link IdempotentMethodInterceptor} to methods annotated {@code @Idempotent}, ordered outside
 * Spring's transaction advice ({@link #ORDER}).
 */
public class IdempotentAdvisor extends StaticMethodMatcherPointcutAdvisor {

    /**
     * The advice's order: before (outside) {@code @Transactional}, whose advice has
     * {@link Ordered#LOWEST_PRECEDENCE} unless configured otherwise. A {@code @Transactional} handler then joins the
     * transaction this advice opened, instead of committing on its own before the answer is rendered.
     */
    public static final int ORDER = Ordered.LOWEST_PRECEDENCE - 1000;

    public IdempotentAdvisor(Advice advice) {
        super(advice);
        setOrder(ORDER);
    }

    @Override
    public boolean matches(Method method, Class<?> targetClass) {
        return AnnotatedElementUtils.hasAnnotation(method, Idempotent.class);
    }
}
