package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.core.StoragePolicy;
import org.springframework.aot.hint.MemberCategory;
import org.springframework.beans.factory.aot.BeanRegistrationAotContribution;
import org.springframework.beans.factory.aot.BeanRegistrationAotProcessor;
import org.springframework.beans.factory.support.RegisteredBean;
import org.springframework.core.annotation.AnnotatedElementUtils;
import org.springframework.util.ClassUtils;
import org.springframework.util.ReflectionUtils;

import java.util.LinkedHashSet;
import java.util.Set;

/**
 * Ahead-of-time processing of beans with {@code @Idempotent} methods: the {@link StoragePolicy} classes their
 * annotations name ({@code @Idempotent(storagePolicy = …)}) are instantiated by reflection through their no-argument
 * constructor, which a native image allows only for constructors it was told of. Found through
 * {@code META-INF/spring/aot.factories}.
 */
final class IdempotentBeanRegistrationAotProcessor implements BeanRegistrationAotProcessor {

    @Override
    public BeanRegistrationAotContribution processAheadOfTime(RegisteredBean registeredBean) {
        Class<?> beanClass = ClassUtils.getUserClass(registeredBean.getBeanClass());
        Set<Class<?>> policies = storagePolicies(beanClass);
        if (policies.isEmpty()) {
            return null;
        }
        return (generationContext, code) -> policies.forEach(policy -> generationContext.getRuntimeHints()
                .reflection().registerType(policy, MemberCategory.INVOKE_DECLARED_CONSTRUCTORS));
    }

    /** The storage policies named by the {@code @Idempotent} methods of {@code beanClass} (or the ones they override). */
    static Set<Class<?>> storagePolicies(Class<?> beanClass) {
        Set<Class<?>> policies = new LinkedHashSet<>();
        try {
            ReflectionUtils.doWithMethods(beanClass, method -> {
                Idempotent idempotent = AnnotatedElementUtils.findMergedAnnotation(method, Idempotent.class);
                if (idempotent != null && idempotent.storagePolicy() != StoragePolicy.class) {
                    policies.add(idempotent.storagePolicy());
                }
            }, ReflectionUtils.USER_DECLARED_METHODS);
        } catch (IllegalStateException | LinkageError e) {
            return Set.of(); // a class whose methods cannot be read (an optional dependency missing) is none of ours
        }
        return policies;
    }
}
