package io.idempotency.spring;

import jakarta.validation.ConstraintViolation;
import jakarta.validation.ConstraintViolationException;
import jakarta.validation.ElementKind;
import jakarta.validation.Path;
import org.aopalliance.intercept.MethodInvocation;
import org.springframework.util.ClassUtils;
import org.springframework.validation.method.MethodValidationException;

import java.lang.reflect.Method;
import java.util.Arrays;
import java.util.Iterator;
import java.util.Set;

/**
 * Recognizes the refusal of an {@code @Idempotent} handler's own arguments by Spring's method-validation proxy
 * (class-level {@code @Validated}, where Spring MVC leaves the arguments to the proxy). Its advice runs inside the
 * {@code @Idempotent} advice — after the claim — and refuses the arguments before the handler's body runs: such a
 * refusal means the handler did nothing.
 *
 * <p>Only a refusal of the invoked method's arguments on the invoked object counts: not a refused return value
 * (the body ran), nor a refusal of another bean's arguments that the handler called (it may have done something
 * first). A refusal of a call the handler made to itself through its proxy looks the same as the refusal of its own
 * arguments; the advice, which sees that call pass, does not ask here then.
 */
final class RefusedArguments {

    private static final boolean BEAN_VALIDATION_PRESENT = ClassUtils.isPresent(
            "jakarta.validation.ConstraintViolationException", RefusedArguments.class.getClassLoader());

    private RefusedArguments() {
    }

    /** Whether {@code failure} is the method-validation proxy refusing the arguments of {@code invocation}. */
    static boolean of(MethodInvocation invocation, Throwable failure) {
        if (failure instanceof MethodValidationException refused) { // the proxy adapting its violations
            return !refused.isForReturnValue() && refused.getTarget() == invocation.getThis()
                    && refused.getMethod().equals(invocation.getMethod());
        }
        return BEAN_VALIDATION_PRESENT && BeanValidation.refusedArguments(invocation, failure);
    }

    /** Touches Bean Validation's types only when they are on the class path. */
    private static final class BeanValidation {

        static boolean refusedArguments(MethodInvocation invocation, Throwable failure) {
            if (!(failure instanceof ConstraintViolationException refused)) {
                return false;
            }
            Set<ConstraintViolation<?>> violations = refused.getConstraintViolations();
            if (violations == null || violations.isEmpty()) {
                return false;
            }
            for (ConstraintViolation<?> violation : violations) {
                if (violation.getRootBean() != invocation.getThis() || violation.getExecutableParameters() == null
                        || !ofMethod(violation.getPropertyPath(), invocation.getMethod())) {
                    return false;
                }
            }
            return true;
        }

        /** Whether a violation's path starts at {@code method}: its name and parameter types. */
        private static boolean ofMethod(Path path, Method method) {
            Iterator<Path.Node> nodes = path.iterator();
            if (!nodes.hasNext()) {
                return false;
            }
            Path.Node first = nodes.next();
            if (first.getKind() != ElementKind.METHOD) {
                return false;
            }
            Path.MethodNode node = first.as(Path.MethodNode.class);
            return node.getName().equals(method.getName())
                    && node.getParameterTypes().equals(Arrays.asList(method.getParameterTypes()));
        }
    }
}
