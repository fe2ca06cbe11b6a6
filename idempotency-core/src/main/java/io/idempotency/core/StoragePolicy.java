package io.idempotency.core;

/**
 * Decides which answers are kept and replayed, and which roll the request back so that a retry runs again.
 * Thread-safe implementations only.
 */
@FunctionalInterface
public interface StoragePolicy {

    /**
     * The default, after Stripe: answers the handler produced with 2xx or 4xx are final and stored, and so are
     * redirects (a 303 See Other is how a POST says "done, see the result there": rolled back, its effect would be
     * lost behind an answer that says it happened). 5xx, 304 Not Modified and 412 Precondition Failed (answers to the
     * conditional headers, which are not part of the request's fingerprint: a retry with the current {@code If-Match}
     * would be replayed the refusal of the stale one), 428 Precondition Required (which asks for the request again
     * with such a header), 401 Unauthorized and 407 Proxy Authentication Required (answers
     * to the credentials the request carried, which are not part of it either: they ask for the request again with
     * others, and the challenge HTTP requires of them, {@code WWW-Authenticate} or {@code Proxy-Authenticate}, is never
     * stored, so a replay could not carry it), and the 4xx answers that mean "try again" (408 Request Timeout, 409
     * Conflict, 425 Too Early, 429 Too Many Requests) are not: the transaction rolls back and the key is released.
     */
    StoragePolicy DEFAULT = status -> (status >= 200 && status < 400 && status != 304)
            || (status >= 400 && status < 500 && status != 401 && status != 407 && status != 412 && status != 428
            && status != 408 && status != 409 && status != 425 && status != 429);

    /** True if an answer with this status commits and is replayed to later requests with the same key. */
    boolean isStorable(int status);
}
