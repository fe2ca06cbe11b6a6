package io.idempotency.core;

import java.util.Objects;

/**
 * The identity of an idempotency record: who asked ({@code caller}), for which operation ({@code scope}),
 * with which client-supplied key. All three are part of the unique index, so one caller can never see
 * another caller's record. No part may hold a NUL character or half of a surrogate pair ({@link #storable}), which no
 * text column holds as it is.
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
        // PostgreSQL refuses a NUL; the driver sends half a surrogate pair as '?', which would make two callers,
        // scopes or keys one
        String unstorable = !storable(key) ? "key" : !storable(caller) ? "caller" : !storable(scope) ? "scope" : null;
        if (unstorable != null) {
            throw new IllegalArgumentException(unstorable + " must not contain a NUL character or half of a surrogate"
                    + " pair");
        }
    }

    /** Whether {@code text} has neither a NUL character nor half of a surrogate pair: whether text columns hold it. */
    public static boolean storable(String text) {
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (Character.isHighSurrogate(c) && i + 1 < text.length() && Character.isLowSurrogate(text.charAt(i + 1))) {
                i++;
            } else if (c == '\0' || Character.isSurrogate(c)) {
                return false;
            }
        }
        return true;
    }
}
