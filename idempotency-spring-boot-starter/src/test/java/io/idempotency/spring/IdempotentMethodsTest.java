package io.idempotency.spring;

import org.junit.jupiter.api.Test;

import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;

/** The HTTP methods the filter wraps: the application context's, and those a child context adds, in either order. */
class IdempotentMethodsTest {

    @Test
    void everyMethodIsWrappedUntilTheMethodsAreLearnt() {
        IdempotentMethods methods = new IdempotentMethods();
        assertThat(methods.mayApplyTo("GET")).isTrue();
        methods.learn(Set.of("POST"));
        assertThat(methods.mayApplyTo("POST")).isTrue();
        assertThat(methods.mayApplyTo("GET")).isFalse();
    }

    @Test
    void aChildContextsMethodsAreAddedAfterTheApplications() {
        IdempotentMethods methods = new IdempotentMethods();
        methods.learn(Set.of("POST"));
        methods.learnAlso(Set.of("PUT"));
        assertThat(methods.mayApplyTo("POST")).isTrue();
        assertThat(methods.mayApplyTo("PUT")).isTrue();
        assertThat(methods.mayApplyTo("DELETE")).isFalse();
    }

    @Test
    void aChildContextsMethodsToldBeforeTheApplicationsAreKept() {
        IdempotentMethods methods = new IdempotentMethods();
        methods.learnAlso(Set.of("PUT"));
        methods.learn(Set.of("POST"));
        assertThat(methods.mayApplyTo("PUT")).as("told before").isTrue();
        assertThat(methods.mayApplyTo("POST")).isTrue();
        assertThat(methods.mayApplyTo("DELETE")).isFalse();
    }
}
