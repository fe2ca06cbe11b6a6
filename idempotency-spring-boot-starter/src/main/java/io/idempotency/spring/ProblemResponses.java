package io.idempotency.spring;

import io.idempotency.core.StoredResponse;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;

/**
 * The RFC 9457 {@code application/problem+json} answers of the library, each with a type of its own. They are never
 * stored: they describe the request, not an outcome of the handler. Thread-safe.
 */
public final class ProblemResponses {

    /** Default base of the problem type URIs. */
    public static final String DEFAULT_TYPE_BASE = "https://idempotency-starter.github.io/problems/";

    /** The problems the library answers with: type name, default status and title. */
    public enum Problem {
        KEY_MISSING("idempotency-key-missing", 400, "Idempotency key missing"),
        KEY_MALFORMED("idempotency-key-malformed", 400, "Idempotency key malformed"),
        KEY_MISMATCH("idempotency-key-mismatch", 422, "Idempotency key reused for a different request"),
        REQUEST_IN_PROGRESS("idempotency-request-in-progress", 409, "Request with this idempotency key in progress"),
        LEASE_LOST("idempotency-lease-lost", 409, "The request's lease was taken over before it finished"),
        REQUEST_TOO_LARGE("idempotency-request-too-large", 413, "Request body too large for an idempotent endpoint"),
        BODY_INVALID("idempotency-body-invalid", 400, "Request body cannot be fingerprinted"),
        BODY_UNSUPPORTED("idempotency-body-unsupported", 415, "Request body type not supported on an idempotent endpoint"),
        RESPONSE_TOO_LARGE("idempotency-response-too-large", 500, "The answer is too large to be stored for replay"),
        COMMIT_FAILED("idempotency-commit-failed", 500, "The request could not be committed"),
        STORE_UNAVAILABLE("idempotency-store-unavailable", 503, "The idempotency record could not be read or written");

        private final String typeName;
        private final int status;
        private final String title;

        Problem(String typeName, int status, String title) {
            this.typeName = typeName;
            this.status = status;
            this.title = title;
        }

        public String typeName() {
            return typeName;
        }

        public int status() {
            return status;
        }

        public String title() {
            return title;
        }
    }

    private final String typeBase;
    private final int mismatchStatus;

    /** Problems with their default statuses (a reused key with a different request: 422). */
    public ProblemResponses(String typeBase) {
        this(typeBase, Problem.KEY_MISMATCH.status());
    }

    /**
     * @param mismatchStatus the status of {@link Problem#KEY_MISMATCH}, a 4xx other than 408, 409, 425 and 429
     *                       (those mean "retry later", which a reused key never is) and 401, 405, 407 and 426
     *                       (HTTP requires a header of those that the refusal does not carry)
     */
    public ProblemResponses(String typeBase, int mismatchStatus) {
        if (!isValidMismatchStatus(mismatchStatus)) {
            throw new IllegalArgumentException("the status of a reused key with a different request must be a 4xx"
                    + " other than 401, 405, 407, 408, 409, 425, 426 and 429, not " + mismatchStatus);
        }
        this.typeBase = typeBase;
        this.mismatchStatus = mismatchStatus;
    }

    /**
     * Whether {@code status} may answer a reused key with a different request: a 4xx that does not tell the client to
     * retry (408, 409, 425, 429), nor need a header the refusal does not carry (401 {@code WWW-Authenticate}, 405
     * {@code Allow}, 407 {@code Proxy-Authenticate}, 426 {@code Upgrade}), which a client's HTTP stack would take for
     * a broken answer, or for a request for credentials.
     */
    static boolean isValidMismatchStatus(int status) {
        return status >= 400 && status <= 499 && !Set.of(401, 405, 407, 408, 409, 425, 426, 429).contains(status);
    }

    /** The status this instance answers {@code problem} with. */
    public int status(Problem problem) {
        return problem == Problem.KEY_MISMATCH ? mismatchStatus : problem.status();
    }

    /** The problem answer; {@code extraHeaders} are added after Content-Type (e.g. Retry-After). */
    public StoredResponse render(Problem problem, String detail, String instance, StoredResponse.Header... extraHeaders) {
        int status = status(problem);
        String json = "{\"type\":" + quote(typeBase + problem.typeName())
                + ",\"title\":" + quote(problem.title())
                + ",\"status\":" + status
                + ",\"detail\":" + quote(detail)
                + (instance == null ? "" : ",\"instance\":" + quote(instance))
                + "}";
        List<StoredResponse.Header> headers = new ArrayList<>();
        headers.add(new StoredResponse.Header("Content-Type", "application/problem+json"));
        headers.addAll(List.of(extraHeaders));
        return new StoredResponse(status, headers, json.getBytes(StandardCharsets.UTF_8));
    }

    private static String quote(String text) {
        StringBuilder json = new StringBuilder(text.length() + 2).append('"');
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            switch (c) {
                case '"' -> json.append("\\\"");
                case '\\' -> json.append("\\\\");
                case '\n' -> json.append("\\n");
                case '\r' -> json.append("\\r");
                case '\t' -> json.append("\\t");
                default -> {
                    if (c < 0x20) {
                        json.append(String.format("\\u%04x", (int) c));
                    } else {
                        json.append(c);
                    }
                }
            }
        }
        return json.append('"').toString();
    }
}
