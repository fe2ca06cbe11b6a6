package io.idempotency.spring;

import jakarta.validation.ConstraintViolation;
import jakarta.validation.ConstraintViolationException;
import jakarta.validation.Validation;
import jakarta.validation.ValidatorFactory;
import jakarta.validation.constraints.Max;
import jakarta.validation.constraints.NotNull;
import org.aopalliance.intercept.MethodInvocation;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.springframework.validation.beanvalidation.MethodValidationAdapter;
import org.springframework.validation.method.MethodValidationException;

import java.lang.reflect.AccessibleObject;
import java.lang.reflect.Method;
import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Which refusals by Bean Validation prove that a handler did not run: only its own arguments refused, on the object
 * it was invoked on.
 */
class RefusedArgumentsTest {

    private static final ValidatorFactory VALIDATION = Validation.buildDefaultValidatorFactory();

    public static class Handler {
        public String charge(@Max(10) int quantity) {
            return null;
        }

        public String refund(@Max(10) int quantity) {
            return null;
        }

        public String charge(@Max(10) long quantity) {
            return null;
        }

        public @NotNull String answer() {
            return null;
        }
    }

    private final Handler handler = new Handler();
    private final Method charge = method("charge", int.class);

    @AfterAll
    static void close() {
        VALIDATION.close();
    }

    @Test
    void theInvokedMethodsArgumentsRefusedOnTheInvokedObjectMeanTheHandlerDidNotRun() {
        assertThat(RefusedArguments.of(invocation(handler, charge), argumentsRefused(handler, charge, 11))).isTrue();
    }

    @Test
    void anotherObjectsOrAnotherMethodsRefusalDoesNot() {
        // the handler may have called them after doing something
        assertThat(RefusedArguments.of(invocation(handler, charge), argumentsRefused(new Handler(), charge, 11)))
                .isFalse();
        assertThat(RefusedArguments.of(invocation(handler, charge),
                argumentsRefused(handler, method("refund", int.class), 11))).isFalse();
        // an overload of the handler: its name alone does not make it the invoked method
        assertThat(RefusedArguments.of(invocation(handler, charge),
                argumentsRefused(handler, method("charge", long.class), 11L))).isFalse();
    }

    @Test
    void aRefusedReturnValueDoesNot() {
        // the body ran
        Method answer = method("answer");
        Set<ConstraintViolation<Handler>> violations = VALIDATION.getValidator().forExecutables()
                .validateReturnValue(handler, answer, null);
        assertThat(violations).isNotEmpty();

        assertThat(RefusedArguments.of(invocation(handler, answer), new ConstraintViolationException(violations)))
                .isFalse();
    }

    @Test
    void theAdaptedExceptionIsJudgedAlike() {
        MethodValidationAdapter adapter = new MethodValidationAdapter(VALIDATION);
        Method answer = method("answer");

        MethodValidationException arguments = new MethodValidationException(
                adapter.validateArguments(handler, charge, null, new Object[] {11}, new Class<?>[0]));
        MethodValidationException otherObject = new MethodValidationException(
                adapter.validateArguments(new Handler(), charge, null, new Object[] {11}, new Class<?>[0]));
        MethodValidationException returnValue = new MethodValidationException(
                adapter.validateReturnValue(handler, answer, null, null, new Class<?>[0]));
        MethodValidationException otherMethod = new MethodValidationException(adapter.validateArguments(handler,
                method("refund", int.class), null, new Object[] {11}, new Class<?>[0]));

        assertThat(RefusedArguments.of(invocation(handler, charge), arguments)).isTrue();
        assertThat(RefusedArguments.of(invocation(handler, charge), otherObject)).isFalse();
        assertThat(RefusedArguments.of(invocation(handler, charge), otherMethod)).isFalse();
        assertThat(RefusedArguments.of(invocation(handler, answer), returnValue)).isFalse();
    }

    @Test
    void otherFailuresDoNot() {
        assertThat(RefusedArguments.of(invocation(handler, charge), new ConstraintViolationException(Set.of())))
                .isFalse();
        assertThat(RefusedArguments.of(invocation(handler, charge), new ConstraintViolationException("no set", null)))
                .isFalse();
        assertThat(RefusedArguments.of(invocation(handler, charge), new IllegalArgumentException("quantity")))
                .isFalse();
    }

    private static ConstraintViolationException argumentsRefused(Object target, Method method, Object... arguments) {
        Set<ConstraintViolation<Object>> violations = VALIDATION.getValidator().forExecutables()
                .validateParameters(target, method, arguments);
        assertThat(violations).isNotEmpty();
        return new ConstraintViolationException(violations);
    }

    private static Method method(String name, Class<?>... parameterTypes) {
        try {
            return Handler.class.getMethod(name, parameterTypes);
        } catch (NoSuchMethodException e) {
            throw new AssertionError(e);
        }
    }

    private static MethodInvocation invocation(Object target, Method method) {
        return new MethodInvocation() {
            @Override
            public Method getMethod() {
                return method;
            }

            @Override
            public Object[] getArguments() {
                return new Object[0];
            }

            @Override
            public Object proceed() {
                throw new UnsupportedOperationException();
            }

            @Override
            public Object getThis() {
                return target;
            }

            @Override
            public AccessibleObject getStaticPart() {
                return method;
            }
        };
    }
}
