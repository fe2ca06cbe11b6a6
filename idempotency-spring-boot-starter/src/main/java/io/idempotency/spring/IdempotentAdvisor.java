package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import org.aopalliance.aop.Advice;
import org.springframework.aop.support.AopUtils;
import org.springframework.aop.support.StaticMethodMatcherPointcutAdvisor;
import org.springframework.core.MethodIntrospector;
import org.springframework.core.Ordered;
import org.springframework.core.annotation.AnnotatedElementUtils;
import org.springframework.core.annotation.AnnotationUtils;

import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.util.Comparator;
import java.util.List;

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
        return annotated(method, targetClass) != null;
    }

    /**
     * The method that carries {@code @Idempotent} for a call of {@code method} on an object of {@code targetClass}:
     * the method itself (or one it overrides or implements), else the target class's implementation of it. A proxy
     * made through an interface is called with the interface's method, which does not carry an annotation put on the
     * implementing method.
     *
     * @return null when neither carries it
     */
    static Method annotated(Method method, Class<?> targetClass) {
        if (AnnotatedElementUtils.hasAnnotation(method, Idempotent.class)) {
            return method;
        }
        if (targetClass == null || Proxy.isProxyClass(targetClass)) {
            return null;
        }
        Method specific = AopUtils.getMostSpecificMethod(method, targetClass);
        return specific != method && AnnotatedElementUtils.hasAnnotation(specific, Idempotent.class) ? specific : null;
    }

    /**
     * The methods of {@code type} that carry {@code @Idempotent} as this advisor matches them (the method, or one it
     * overrides or implements), in a stable order; none for a class whose methods cannot be read (a missing optional
     * dependency), which cannot be advised either.
     */
    static List<Method> idempotentMethods(Class<?> type) {
        if (!AnnotationUtils.isCandidateClass(type, Idempotent.class)) {
            return List.of();
        }
        try {
            return MethodIntrospector.selectMethods(type, (MethodIntrospector.MetadataLookup<Boolean>)
                    method -> AnnotatedElementUtils.hasAnnotation(method, Idempotent.class) ? Boolean.TRUE : null)
                    .keySet().stream().sorted(Comparator.comparing(Method::toString)).toList();
        } catch (RuntimeException | LinkageError e) {
            return List.of();
        }
    }
}
