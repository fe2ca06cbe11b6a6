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
 * <p>With the Spring Boot starter, in the default mode ({@link IdempotencyMode#ONE_TRANSACTION}), the claim of the key,
 * the method's database writes and the stored answer commit in one transaction, after the answer has been rendered and
 * before any byte of it is sent ({@link IdempotencyMode#INTENT_FIRST} commits the claim first; see {@link #mode()}).
 * The method must therefore not start a transaction of its own that commits earlier ({@code REQUIRES_NEW} escapes the
 * unit), and must return synchronously (async return types are rejected at startup).
 *
 * <p>Expressions ({@link #key()}, {@link #fingerprint()}) are Spring Expression Language, evaluated after the
 * arguments are bound, with these variables: the method's parameters by name (e.g. {@code #callback.transactionId}),
 * {@code #body} (the JSON body as maps, lists, strings, {@code BigDecimal}s and booleans, or, when it is neither JSON
 * nor a form, the body text, read as a {@code String} argument reads it: in the charset its {@code Content-Type} names,
 * else the request's character encoding, else UTF-8; a body that is no text there is refused), {@code #path} (the
 * route's path variables, a controller method's or those of the functional route whose handler function calls the
 * method), {@code #headers} (each header's value, case-insensitive) and {@code #params} (each query or form
 * parameter's value: a form's fields are read here, not through {@code #body}, which the container has parsed into
 * parameters); a header or parameter sent more than once is all its values, joined by commas, as a {@code String}
 * argument reads it ({@code amount=5&amount=6} is {@code "5,6"}).
 */
@Target(ElementType.METHOD)
@Retention(RetentionPolicy.RUNTIME)
@Documented
public @interface Idempotent {

    /**
     * The scope that keys are unique in. Default: the HTTP method and route template, e.g.
     * {@code "POST /payments/{id}/refunds"}. Give two endpoints the same scope to make them share keys. Two handler
     * methods on the same HTTP method and route template (told apart by a header or a media type) would share the
     * default, so the starter refuses to start until each names its scope. Handlers told apart by their API version
     * alone ({@code @PostMapping(version = …)}) share it: the version a request names is part of its fingerprint.
     * A scope is stored as it is: one longer than 255 characters, or holding a NUL character or half of a surrogate
     * pair, which no text column holds, would fail every request, so the starter refuses to start with it.
     */
    String scope() default "";

    /**
     * Whether a request without a key is refused (400, {@code idempotency-key-missing}). When false such a
     * request runs without idempotency, which helps clients adopt keys gradually.
     */
    boolean keyRequired() default true;

    /**
     * An expression giving the key from the request itself, for callers that send no header — e.g.
     * {@code "#body.transactionId"} for a payment provider's callback. When set, the header is not read. Such an
     * endpoint fingerprints only the HTTP method, the concrete path and what {@link #fingerprint()} names, because
     * providers re-send callbacks with fresh nonces and signatures: without {@link #fingerprint()}, another body
     * under the key is answered with the first one's answer, not refused.
     */
    String key() default "";

    /**
     * Expressions naming what identifies "the same request", e.g. {@code {"#body.amount", "#body.currency"}}.
     * The values named take the place of the query and body: the HTTP method, the concrete path and the API version
     * the request names (if the application versions its API) are always part of the fingerprint. When empty: the
     * whole request (method, path, query and body) for header keys, only the method and the path for {@link #key()}
     * expressions. The values are compared as canonical JSON: body members, maps, collections, arrays, numbers,
     * strings and booleans by their content, a JSON tree (Jackson's {@code JsonNode}) as the body's members, an
     * {@code Optional} as the value it holds (an empty one as null), any other object by its {@code toString()} — so
     * name the fields that identify the request, not an object whose {@code toString()} leaves some out or names the
     * instance.
     */
    String[] fingerprint() default {};

    /**
     * The HTTP methods this endpoint is idempotent for; requests with other methods run normally. Empty: the
     * configured {@code idempotency.methods} (POST and PATCH by default).
     */
    String[] methods() default {};

    /**
     * Which answers are stored and replayed. Default ({@code StoragePolicy.class}): the application's
     * {@link StoragePolicy} bean, itself {@link StoragePolicy#DEFAULT} unless replaced. Any other class needs a
     * public no-argument constructor.
     */
    Class<? extends StoragePolicy> storagePolicy() default StoragePolicy.class;

    /**
     * {@link IdempotencyMode#ONE_TRANSACTION} (default) when every effect lives in the application's database;
     * {@link IdempotencyMode#INTENT_FIRST} when the handler calls a third party (a payment gateway) whose effect no
     * database transaction can roll back.
     */
    IdempotencyMode mode() default IdempotencyMode.ONE_TRANSACTION;

    /**
     * The lease of an {@link IdempotencyMode#INTENT_FIRST} claim, e.g. {@code "30s"} or {@code "PT2M"}: how long a
     * claim whose holder stopped renewing it (a crash, a hang) blocks retries before it is resolved. Property
     * placeholders are resolved ({@code "${charges.lease:30s}"}). Empty: the configured {@code idempotency.lease}.
     * Only for {@link IdempotencyMode#INTENT_FIRST}: given with another mode, it stops the application's start.
     */
    String lease() default "";
}
