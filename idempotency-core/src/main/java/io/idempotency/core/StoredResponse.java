package io.idempotency.core;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Objects;

/**
 * The answer kept for replay: status, the allow-listed headers in their original order, and the body bytes.
 * Immutable; the body array is copied on the way in and out.
 */
public final class StoredResponse {

    /** One response header; names keep the case the handler used. */
    public record Header(String name, String value) {
        public Header {
            Objects.requireNonNull(name, "name");
            Objects.requireNonNull(value, "value");
            if (name.isEmpty() || name.indexOf(':') >= 0 || hasLineBreak(name) || hasLineBreak(value)) {
                throw new IllegalArgumentException("header name is empty or contains a colon, or name or value"
                        + " contains a line break: " + name);
            }
        }

        private static boolean hasLineBreak(String text) {
            return text.indexOf('\n') >= 0 || text.indexOf('\r') >= 0;
        }
    }

    private final int status;
    private final List<Header> headers;
    private final byte[] body;

    public StoredResponse(int status, List<Header> headers, byte[] body) {
        if (status < 100 || status > 599) {
            throw new IllegalArgumentException("not an HTTP status: " + status);
        }
        this.status = status;
        this.headers = List.copyOf(headers);
        this.body = body == null ? new byte[0] : body.clone();
    }

    public int status() {
        return status;
    }

    public List<Header> headers() {
        return headers;
    }

    /** A copy of the body bytes. */
    public byte[] body() {
        return body.clone();
    }

    public int bodyLength() {
        return body.length;
    }

    /**
     * Headers as text, one {@code Name: value} line each: readable by operators in SQL, and unambiguous
     * because header values cannot contain line breaks.
     */
    public String headersAsText() {
        StringBuilder text = new StringBuilder();
        for (Header header : headers) {
            text.append(header.name()).append(": ").append(header.value()).append('\n');
        }
        return text.toString();
    }

    /** Parses what {@link #headersAsText()} wrote; {@code null} or empty text gives no headers. */
    public static List<Header> headersFromText(String text) {
        if (text == null || text.isEmpty()) {
            return Collections.emptyList();
        }
        List<Header> headers = new ArrayList<>();
        for (String line : text.split("\n")) {
            if (line.isEmpty()) {
                continue;
            }
            int colon = line.indexOf(": ");
            if (colon <= 0) {
                throw new IllegalArgumentException("stored header line is not 'Name: value': " + line);
            }
            headers.add(new Header(line.substring(0, colon), line.substring(colon + 2)));
        }
        return headers;
    }

    @Override
    public boolean equals(Object other) {
        return other instanceof StoredResponse that
                && status == that.status && headers.equals(that.headers) && Arrays.equals(body, that.body);
    }

    @Override
    public int hashCode() {
        return 31 * (31 * status + headers.hashCode()) + Arrays.hashCode(body);
    }

    @Override
    public String toString() {
        return "StoredResponse[status=" + status + ", headers=" + headers + ", body=" + body.length + " bytes]";
    }
}
