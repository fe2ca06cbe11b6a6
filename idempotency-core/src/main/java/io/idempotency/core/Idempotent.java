package io.idempotency.core;

import java.lang.annotation.Documented;
import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * Makes a controller method idempotent: a request carrying an {@code Idempotency-Key} header changes the system
 * at most once, and every repetition gets the first answer back, byte for byte.
 *
 * <p>With the Spring Boot starter, the claim of the key, the method's database writes and the stored answer
 * commit in one transaction, after the answer has been rendered and before any byte of it is sent. The method
 * must therefore not start a transaction of its own that commits earlier ({@code REQUIRES_NEW} escapes the unit),
 * and must return synchronously (async return types are rejected at startup).
 */
@Target(ElementType.METHOD)
@Retention(RetentionPolicy.RUNTIME)
@Documented
public @interface Idempotent {

    /**
     * The scope that keys are unique in. Default: the HTTP method and route template, e.g.
     * {@code "POST /payments/{id}/refunds"}. Give two endpoints the same scope to make them share keys.
     */
    String scope() default "";

    /**
     * Whether a request without the key is refused (400, {@code idempotency-key-missing}). When false such a
     * request runs without idempotency, which helps clients adopt keys gradually.
     */
    boolean keyRequired() default true;
}
