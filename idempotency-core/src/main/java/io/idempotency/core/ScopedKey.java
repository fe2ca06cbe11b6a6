package io.idempotency.core;

import java.util.Objects;

/**
 * The identity of an idempotency record: who asked ({@code caller}), for which operation ({@code scope}),
 * with which client-supplied key. All three are part of the unique index, so one caller can never see
 * another caller's record.
 *
 * @param caller namespace of the caller (principal, tenant, API key id); {@code ""} when anonymous; never null
 * @param scope  the operation, e.g. {@code "POST /payments"}; never null or empty
 * @param key    the idempotency key as parsed from the request; 1–255 characters
 */
public record ScopedKey(String caller, String scope, String key) {

    /** Longest caller, scope and key the stores accept (characters). */
    public static final int MAX_LENGTH = 255;

    public ScopedKey {
        Objects.requireNonNull(caller, "caller");
        Objects.requireNonNull(scope, "scope");
        Objects.requireNonNull(key, "key");
        if (scope.isEmpty()) {
            throw new IllegalArgumentException("scope must not be empty");
        }
        if (key.isEmpty()) {
            throw new IllegalArgumentException("key must not be empty");
        }
        if (caller.length() > MAX_LENGTH || scope.length() > MAX_LENGTH || key.length() > MAX_LENGTH) {
            throw new IllegalArgumentException("caller, scope and key are limited to " + MAX_LENGTH + " characters");
        }
    }
}
