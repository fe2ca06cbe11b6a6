package io.idempotency.spring;

import io.idempotency.core.StoredResponse;
import jakarta.servlet.ServletOutputStream;
import jakarta.servlet.ServletResponse;
import jakarta.servlet.WriteListener;
import jakarta.servlet.http.Cookie;
import jakarta.servlet.http.HttpServletResponse;
import jakarta.servlet.http.HttpServletResponseWrapper;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.io.UncheckedIOException;
import java.io.Writer;
import java.nio.charset.Charset;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.function.IntPredicate;
import java.util.function.Supplier;

/**
 * A response that passes everything through until {@link #capture()} is called, and from then on keeps status,
 * headers and body in memory, so that nothing reaches the client before the transaction holding the request's
 * effects has committed. It also intercepts {@code sendError} and {@code sendRedirect}, which would otherwise commit
 * the response at once. Not thread-safe (one request).
 */
final class DeferredResponse extends HttpServletResponseWrapper {

    private static final String CONTENT_TYPE = "Content-Type";
    private static final String SET_COOKIE = "Set-Cookie";
    private static final String TRANSFER_ENCODING = "Transfer-Encoding";
    private static final String CONTENT_LENGTH = "Content-Length";
    private static final int SC_PROCESSING = 102;
    private static final int SC_EARLY_HINTS = 103;

    private boolean capturing;
    private int status = SC_OK;
    private String errorMessage;
    private boolean errorSent; // sendError was called: as the container does, nothing more is written or set
    private boolean taken; // the captured answer was taken to be stored (toStoredResponse)
    private final Map<String, List<String>> headers = HeaderNames.newMap();
    /**
     * The headers the container's response had when the capture began (see {@link #capture()}); a map of its own only
     * when there were some, as most requests (every one that is not captured) have none.
     */
    private Map<String, List<String>> headersBefore = Map.of();
    private final List<Cookie> cookies = new ArrayList<>(); // never stored, like every Set-Cookie
    /** The container's {@code Set-Cookie} values a {@code setHeader} of it, or a reset, replaced while capturing. */
    private List<String> cookiesReplaced = List.of();
    private Supplier<Map<String, String>> trailerFields; // set while capturing; never stored
    private String characterEncoding; // set while capturing
    private String localeEncoding; // the container's for the locale set while capturing, unless one was set
    private String containerEncoding = StandardCharsets.ISO_8859_1.name(); // the container's when the capture began
    private Locale locale;
    /**
     * The body written while capturing, held while it may still be stored whole: see {@link #holds}. Its length counts
     * every byte written, held or not.
     */
    private ByteArrayOutputStream body = new ByteArrayOutputStream();
    private long bodyLength;
    private boolean bodyDropped; // the body outgrew the limit while its status was one that is stored
    /** The longest body held while its status is one that is stored, {@code idempotency.max-stored-body-size}. */
    private final long bodyLimit;
    /** Whether an answer with a status is stored: the endpoint's storage policy, once known. */
    private IntPredicate stored = status -> true;
    private ServletOutputStream outputStream; // the buffer's
    private PrintWriter writer; // the buffer's
    private boolean streamWritten; // bytes were written through the output stream while capturing
    private ServletOutputStream switchingStream; // what the application gets
    private PrintWriter switchingWriter; // what the application gets

    /**
     * @param bodyLimit the longest body held in memory while the answer's status is one that is stored
     *                  ({@code idempotency.max-stored-body-size}): such an answer longer than that cannot be stored
     *                  whole, and is refused as too large
     */
    DeferredResponse(HttpServletResponse response, long bodyLimit) {
        super(response);
        if (bodyLimit <= 0) {
            throw new IllegalArgumentException("the body limit must be positive: " + bodyLimit);
        }
        this.bodyLimit = bodyLimit;
    }

    /**
     * From now on, keep everything in memory. The headers already set (by a filter after this one, an interceptor's
     * {@code preHandle}, Spring MVC's CORS processing) are seen by the handler as the container would show them: a
     * handler that sets one replaces it, as without the capture, rather than sending it a second time beside its own.
     * So are the status and the content type already set: the answer's unless the handler sets its own (Spring MVC
     * writes a body in a content type set before, rather than in one it negotiates).
     *
     * @param stored whether an answer with a status is stored (the endpoint's storage policy): a body that outgrows
     *               the limit while its status is one of those is no longer held (see {@link #holds})
     */
    void capture(IntPredicate stored) {
        this.stored = stored;
        if (capturing) {
            return;
        }
        HttpServletResponse container = (HttpServletResponse) getResponse();
        status = container.getStatus();
        String contentType = container.getContentType();
        if (contentType != null) {
            List<String> values = new ArrayList<>(1);
            values.add(contentType);
            headers.put(CONTENT_TYPE, values);
        }
        // e.g. a CharacterEncodingFilter forcing the response encoding, before the chain: the container would encode
        // text with it, so the captured writer does too
        String encoding = container.getCharacterEncoding();
        if (encoding != null) {
            containerEncoding = encoding;
        }
        for (String name : container.getHeaderNames()) {
            // the content type and length are the container's own state, and cookies stay where they are (never
            // stored, and held apart while capturing)
            if (!isContainerState(name) && !headersBefore.containsKey(name)) {
                List<String> values = new ArrayList<>(container.getHeaders(name));
                if (headersBefore.isEmpty()) {
                    headersBefore = HeaderNames.newMap();
                }
                headersBefore.put(name, List.copyOf(values));
                headers.put(name, values);
            }
        }
        capturing = true;
    }

    private static boolean isContainerState(String name) {
        return CONTENT_TYPE.equalsIgnoreCase(name) || CONTENT_LENGTH.equalsIgnoreCase(name)
                || "Set-Cookie".equalsIgnoreCase(name);
    }

    /**
     * Gives the container's response {@code name} with {@code values} in place of what it had: a header set before
     * the capture began and set again while capturing (or by a stored answer) is sent once, with its new values.
     */
    private static void replaceHeader(HttpServletResponse response, String name, List<String> values) {
        if (CONTENT_TYPE.equalsIgnoreCase(name)) {
            // one Content-Type, which replaces one set before the handler (Jetty adds a second on addHeader)
            for (String value : values) {
                response.setHeader(name, value);
            }
            return;
        }
        if (!response.getHeaders(name).isEmpty()) {
            response.setHeader(name, null); // removes it (Servlet 6.1)
        }
        for (String value : values) {
            response.addHeader(name, value);
        }
    }

    boolean isCapturing() {
        return capturing;
    }

    /**
     * True if the handler ended with {@code sendError} of an error status (400 and above): the body is rendered later,
     * by the container's error page. A {@code sendError} of a success or a redirect is an answer like any other.
     */
    boolean isErrorSent() {
        return errorSent && !isSuccessOrRedirect(status);
    }

    /**
     * A status {@code sendError} answers with that is no error: the client is told the request succeeded, so the
     * answer is the handler's like any other, its status and headers without a body (the error page the container
     * would render for it after the filter cannot be stored), stored if storable, committed, then sent. Rolled back as
     * an error, the client would be told of a success whose effects were not kept.
     */
    static boolean isSuccessOrRedirect(int status) {
        return status >= SC_OK && status < SC_BAD_REQUEST;
    }

    /**
     * The captured answer, keeping only the headers named in {@code replayed} (lower case) but those a
     * {@code Connection} header names ({@link IdempotencyFilter#storedHeaders}); the headers set before the capture
     * began are among them, as the answer carries them.
     */
    StoredResponse toStoredResponse(Set<String> replayed) {
        flushWriter();
        requireHeldBody();
        taken = true;
        List<StoredResponse.Header> all = new ArrayList<>();
        headers.forEach((name, values) -> {
            // only those that may be stored (and a Connection header, which names others that may not): any other
            // reaches the first answer only, whatever its name, also one no stored line could hold (the ":status"
            // pseudo-header of an upstream's HTTP/2 answer passed on)
            String lowerCase = HeaderNames.lowerCase(name);
            if (replayed.contains(lowerCase) || lowerCase.equals("connection")) {
                values.forEach(value -> all.add(new StoredResponse.Header(name, IdempotencyFilter.asSent(value))));
            }
        });
        return new StoredResponse(status, IdempotencyFilter.storedHeaders(all, replayed),
                hasNoBody(status) ? new byte[0] : body.toByteArray());
    }

    /**
     * The fewest bytes the header section of the captured answer takes over HTTP/1.1: its status line and a line
     * ({@code Name: value} and CRLF) for each header held, a character counted as one byte, and the empty line that
     * ends the section. The cookies, the {@code Content-Length} and {@code Date} the container adds, and a reason
     * phrase are left out: a section that takes more than a container's limit by this count cannot be sent.
     */
    long headerSectionLowerBound() {
        long bytes = "HTTP/1.1 200 \r\n\r\n".length();
        for (Map.Entry<String, List<String>> header : headers.entrySet()) {
            String name = header.getKey();
            if (!TRANSFER_ENCODING.equalsIgnoreCase(name) && !SET_COOKIE.equalsIgnoreCase(name)) {
                for (String value : header.getValue()) {
                    bytes += name.length() + ": \r\n".length() + value.length();
                }
            }
        }
        return bytes;
    }

    /**
     * Sends the captured answer, every header included, to the client; but a {@code Transfer-Encoding} (a handler
     * passing on an upstream answer's headers), which would contradict the length the held body is sent with: the
     * container frames the body, and a client would read it as chunks it is not in (RFC 9112, section 6.3); nor a
     * {@code Content-Length} set as a header (Spring MVC's converters of text and bytes set one before writing): the
     * container is given the length of the body sent, and none for a status whose answer has no body, where a held
     * one would name the body left out (Jetty fails a 204 that names one after the commit, and sends a 205 with it, to
     * be read for bytes that never come). Header
     * values go to the container as a stored answer keeps them ({@link IdempotencyFilter#asSent}): containers differ
     * in what they make of control characters (Jetty sends a DEL as it is, Tomcat a space), and a replay must carry
     * what the first answer carried.
     */
    void sendCaptured() throws IOException {
        flushWriter();
        requireHeldBody();
        HttpServletResponse response = (HttpServletResponse) getResponse();
        for (String before : headersBefore.keySet()) {
            if (!headers.containsKey(before)) {
                response.setHeader(before, null); // removed while capturing (a reset)
            }
        }
        headers.forEach((name, values) -> {
            if (CONTENT_LENGTH.equalsIgnoreCase(name)) {
                return; // never held before the capture (the container's own state): it frames what is sent below
            }
            if (TRANSFER_ENCODING.equalsIgnoreCase(name)) {
                if (headersBefore.containsKey(name)) {
                    response.setHeader(name, null);
                }
            } else if (!SET_COOKIE.equalsIgnoreCase(name) && !values.equals(headersBefore.get(name))) {
                List<String> sent = new ArrayList<>(values.size());
                for (String value : values) {
                    sent.add(IdempotencyFilter.asSent(value));
                }
                replaceHeader(response, name, sent);
            }
        });
        sendCookieHeaders(response);
        cookies.forEach(response::addCookie);
        if (trailerFields != null) {
            response.setTrailerFields(trailerFields);
        }
        List<String> types = headers.get(CONTENT_TYPE);
        if (chosenEncoding() != null && (types == null || types.isEmpty() || charsetOf(types.get(0)) == null)) {
            // a held type that names the charset told the container already, as a replay tells it: set again, Jetty
            // would rebuild the header its own way (utf-16 for UTF-16, unquoted, after the other parameters), and
            // the first answer would carry another Content-Type than its replays
            response.setCharacterEncoding(chosenEncoding());
        }
        if (errorSent && !taken) {
            // not stored (rolled back): as the handler left it, with the container's error page
            if (errorMessage == null) {
                response.sendError(status);
            } else {
                response.sendError(status, errorMessage);
            }
            return;
        }
        response.setStatus(status);
        if (!hasNoBody(status)) {
            response.setContentLength(body.size());
            body.writeTo(response.getOutputStream());
        }
        response.flushBuffer();
    }

    /**
     * True for a status whose answer has no body (204, 205 and 304: RFC 9110, sections 15.3.5, 15.3.6 and 15.4.5),
     * whatever the handler wrote under it (an object returned under {@code @ResponseStatus(NO_CONTENT)}, say). Such a
     * body is neither stored nor sent, nor its length: over HTTP/1.1 the containers drop it from a 204, but Jetty
     * sends its length over HTTP/2, which a client refuses, and the answer, stored, would reach no HTTP/2 client, nor
     * any replay of it.
     */
    static boolean hasNoBody(int status) {
        return status == SC_NO_CONTENT || status == SC_RESET_CONTENT || status == SC_NOT_MODIFIED;
    }

    /**
     * Gives the container's response the {@code Set-Cookie} headers the handler set, beside the cookies it holds
     * already — set before the capture began (by a filter, an interceptor), or by the container itself while the
     * handler ran (the cookie of a session the handler started) — as the container keeps them when a header is added.
     * Those it held when the handler set the header with {@code setHeader}, or reset the response, go, as the
     * container would have removed them then.
     */
    private void sendCookieHeaders(HttpServletResponse response) {
        if (!cookiesReplaced.isEmpty()) {
            List<String> kept = new ArrayList<>(response.getHeaders(SET_COOKIE));
            cookiesReplaced.forEach(kept::remove);
            response.setHeader(SET_COOKIE, null); // removes them all (Servlet 6.1): those kept are added again
            kept.forEach(cookie -> response.addHeader(SET_COOKIE, cookie));
        }
        headers.getOrDefault(SET_COOKIE, List.of())
                .forEach(cookie -> response.addHeader(SET_COOKIE, IdempotencyFilter.asSent(cookie)));
    }

    /** The container's cookies now: a {@code setHeader} of {@code Set-Cookie}, or a reset, replaces them. */
    private List<String> containerCookies() {
        return List.copyOf(((HttpServletResponse) getResponse()).getHeaders(SET_COOKIE));
    }

    /** Sends {@code answer} instead of whatever was captured (a replay or a problem). */
    void send(StoredResponse answer, StoredResponse.Header... extraHeaders) throws IOException {
        HttpServletResponse response = (HttpServletResponse) getResponse();
        response.setStatus(answer.status());
        // a stored header replaces what was set before the handler would have run, as it did in the first answer
        Map<String, List<String>> answerHeaders = HeaderNames.newMap();
        for (StoredResponse.Header header : answer.headers()) {
            answerHeaders.computeIfAbsent(header.name(), name -> new ArrayList<>(1)).add(header.value());
        }
        answerHeaders.forEach((name, values) -> replaceHeader(response, name, values));
        for (StoredResponse.Header header : extraHeaders) {
            response.setHeader(header.name(), header.value());
        }
        if (!hasNoBody(answer.status())) {
            response.setContentLength(answer.bodyLength());
            response.getOutputStream().write(answer.body());
        }
        response.flushBuffer();
    }

    // ---------------------------------------------------------------- status

    @Override
    public void setStatus(int sc) {
        if (!capturing) {
            super.setStatus(sc);
        } else if (!errorSent) {
            status = sc;
        }
    }

    @Override
    public int getStatus() {
        return capturing ? status : super.getStatus();
    }

    @Override
    public void sendError(int sc, String msg) throws IOException {
        if (!capturing) {
            super.sendError(sc, msg);
            return;
        }
        requireNotSent("sendError()");
        if (sc == SC_EARLY_HINTS || sc == SC_PROCESSING) {
            // Tomcat's way to send 103 Early Hints, and Jetty's to send those or 102 Processing: an interim answer,
            // not an error, and the handler goes on to answer. It is bytes on the wire before the commit, and
            // optional: it is not sent
            return;
        }
        status = sc;
        errorMessage = msg;
        errorSent = true;
        clearBody();
    }

    @Override
    public void sendError(int sc) throws IOException {
        sendError(sc, null);
    }

    @Override
    public void sendRedirect(String location) throws IOException {
        if (!capturing) {
            super.sendRedirect(location); // the same overload below: wrappers there may only know this one
        } else {
            captureRedirect(location, SC_FOUND, true);
        }
    }

    @Override
    public void sendRedirect(String location, boolean clearBuffer) throws IOException {
        if (!capturing) {
            super.sendRedirect(location, clearBuffer);
        } else {
            captureRedirect(location, SC_FOUND, clearBuffer);
        }
    }

    @Override
    public void sendRedirect(String location, int sc) throws IOException {
        if (!capturing) {
            super.sendRedirect(location, sc);
        } else {
            captureRedirect(location, sc, true);
        }
    }

    @Override
    public void sendRedirect(String location, int sc, boolean clearBuffer) throws IOException {
        if (!capturing) {
            super.sendRedirect(location, sc, clearBuffer);
        } else {
            captureRedirect(location, sc, clearBuffer);
        }
    }

    /**
     * The URL as given while capturing: the container would write the session's id into it for a client that sent no
     * session cookie (URL rewriting, {@code ;jsessionid=…}), into a {@code Location} or a link in the body, and the
     * answer is stored and replayed to every retry under the key, on an endpoint open to anonymous requests to any
     * client that sends the key. The session is the first client's alone: it still gets it in its cookie.
     */
    @Override
    public String encodeURL(String url) {
        return capturing ? url : super.encodeURL(url);
    }

    /** The URL as given while capturing, as {@link #encodeURL}. */
    @Override
    public String encodeRedirectURL(String url) {
        return capturing ? url : super.encodeRedirectURL(url);
    }

    private void captureRedirect(String location, int sc, boolean clearBuffer) {
        requireNotSent("sendRedirect()");
        status = sc;
        setHeader("Location", location);
        if (clearBuffer) {
            flushWriter();
            clearBody();
        }
    }

    // ---------------------------------------------------------------- headers

    /**
     * Held with the headers: given to the container at once, the trailer fields would end whatever it sends, the
     * library's 500 after a failed commit too, carrying what the handler made of effects that were rolled back. The
     * container is still asked now whether it can send them (not over HTTP/1.0): it refuses them to the handler, which
     * can answer without them, rather than after the commit, when the answer would be lost.
     */
    @Override
    public void setTrailerFields(Supplier<Map<String, String>> supplier) {
        if (!capturing) {
            super.setTrailerFields(supplier);
        } else if (!errorSent) {
            Supplier<Map<String, String>> before = super.getTrailerFields();
            super.setTrailerFields(supplier); // throws IllegalStateException when they cannot be sent
            super.setTrailerFields(before);
            trailerFields = supplier;
        }
    }

    @Override
    public Supplier<Map<String, String>> getTrailerFields() {
        return capturing ? trailerFields : super.getTrailerFields();
    }

    @Override
    public void setHeader(String name, String value) {
        if (!capturing) {
            super.setHeader(name, value);
        } else if (errorSent) {
            return; // as the container does after sendError: the answer's headers are settled
        } else if (CONTENT_TYPE.equalsIgnoreCase(name)) {
            setContentType(value); // keeps the writer's encoding in step with the header
        } else {
            if (SET_COOKIE.equalsIgnoreCase(name)) {
                // as the container does, it replaces every cookie set so far: those it holds, and those held here
                cookiesReplaced = containerCookies();
                cookies.clear();
            }
            if (value == null) {
                headers.remove(name);
            } else {
                List<String> values = new ArrayList<>(1);
                values.add(value);
                headers.put(name, values);
            }
        }
    }

    @Override
    public void addHeader(String name, String value) {
        if (!capturing) {
            super.addHeader(name, value);
        } else if (value == null || errorSent) {
            return; // as the container does
        } else if (CONTENT_TYPE.equalsIgnoreCase(name)) {
            setContentType(value); // one Content-Type, as the container keeps it
        } else {
            headers.computeIfAbsent(name, n -> new ArrayList<>(1)).add(value);
        }
    }

    /** The container would add it to the response at once: held like every other header. */
    @Override
    public void addCookie(Cookie cookie) {
        if (!capturing) {
            super.addCookie(cookie);
        } else if (!errorSent) {
            cookies.add(cookie);
        }
    }

    @Override
    public void setIntHeader(String name, int value) {
        setHeader(name, Integer.toString(value));
    }

    @Override
    public void addIntHeader(String name, int value) {
        addHeader(name, Integer.toString(value));
    }

    @Override
    public void setDateHeader(String name, long date) {
        if (!capturing) {
            super.setDateHeader(name, date);
        } else {
            setHeader(name, httpDate(date));
        }
    }

    @Override
    public void addDateHeader(String name, long date) {
        if (!capturing) {
            super.addDateHeader(name, date);
        } else {
            addHeader(name, httpDate(date));
        }
    }

    @Override
    public boolean containsHeader(String name) {
        return capturing ? headers.containsKey(name) : super.containsHeader(name);
    }

    @Override
    public String getHeader(String name) {
        if (!capturing) {
            return super.getHeader(name);
        }
        List<String> values = headers.get(name);
        return values == null || values.isEmpty() ? null : values.get(0);
    }

    @Override
    public Collection<String> getHeaders(String name) {
        if (!capturing) {
            return super.getHeaders(name);
        }
        return List.copyOf(headers.getOrDefault(name, Collections.emptyList()));
    }

    @Override
    public Collection<String> getHeaderNames() {
        return capturing ? List.copyOf(headers.keySet()) : super.getHeaderNames();
    }

    @Override
    public void setContentType(String type) {
        if (!capturing) {
            super.setContentType(type);
            return;
        }
        if (errorSent) {
            return;
        }
        if (type == null) {
            headers.remove(CONTENT_TYPE);
            return;
        }
        String charset = charsetOf(type);
        if (writer != null) {
            // text is already being encoded: as in the container, the writer's encoding stays and the header says so
            type = withoutCharset(type) + ";charset=" + getCharacterEncoding();
        } else if (charset != null) {
            characterEncoding = charset;
        } else if (chosenEncoding() != null) {
            type = type + ";charset=" + chosenEncoding(); // as the container would send it
        }
        List<String> values = new ArrayList<>(1);
        values.add(type);
        headers.put(CONTENT_TYPE, values);
    }

    @Override
    public String getContentType() {
        if (!capturing) {
            return super.getContentType();
        }
        String type = getHeader(CONTENT_TYPE);
        String encoding = chosenEncoding();
        if (type != null && encoding != null && charsetOf(type) == null) {
            return type + ";charset=" + encoding;
        }
        return type;
    }

    @Override
    public void setCharacterEncoding(String charset) {
        if (!capturing) {
            super.setCharacterEncoding(charset);
            return;
        }
        if (writer != null || errorSent) {
            return; // too late: text is already being encoded, or the answer was sent (the container ignores it too)
        }
        characterEncoding = charset;
        if (charset == null) {
            localeEncoding = null; // the container forgets the locale's too
        }
        withCharset(charset);
    }

    /** Names {@code charset} (none: {@code null}) in the Content-Type header, if there is one. */
    private void withCharset(String charset) {
        List<String> types = headers.get(CONTENT_TYPE);
        if (types != null && !types.isEmpty()) {
            String type = withoutCharset(types.get(0));
            types.set(0, charset == null ? type : type + ";charset=" + charset);
        }
    }

    private static String withoutCharset(String type) {
        return type.replaceAll("(?i);\\s*charset=[^;]*", "");
    }

    @Override
    public void setCharacterEncoding(Charset charset) {
        if (!capturing) {
            super.setCharacterEncoding(charset);
        } else {
            setCharacterEncoding(charset == null ? null : charset.name());
        }
    }

    @Override
    public void setLocale(Locale locale) {
        if (!capturing) {
            super.setLocale(locale);
        } else if (locale != null && !errorSent) {
            this.locale = locale;
            setHeader("Content-Language", locale.toLanguageTag());
            if (writer == null && characterEncoding == null) {
                // as the container does: text takes the charset its locale-encoding mapping gives the locale (in
                // Spring Boot, UTF-8 for English), unless the handler chose one
                String mapped = containerEncodingFor(locale);
                if (mapped != null) {
                    localeEncoding = mapped;
                    withCharset(mapped);
                }
            }
        }
    }

    /**
     * The charset the container maps {@code locale} to, or {@code null} when it maps it to none. The servlet API
     * offers no other way to read the container's locale-encoding mapping than to set the locale; the locale is
     * unset again at once. (A locale set on the container's response before the capture began is unset with it; the
     * handler's locale, held here, is what the answer carries.)
     */
    private String containerEncodingFor(Locale locale) {
        ServletResponse container = getResponse();
        String before = container.getCharacterEncoding();
        container.setLocale(locale);
        String mapped = container.getCharacterEncoding();
        container.setLocale(null);
        return mapped == null || mapped.equalsIgnoreCase(before) ? null : mapped;
    }

    /**
     * The charset the container writes text of {@code contentType} (which names none) in when the handler chose none,
     * or {@code null} when it is the one it had when the capture began. Jetty writes JSON in UTF-8 without naming it,
     * other text in ISO-8859-1. As for the locale ({@link #containerEncodingFor(Locale)}), the container is asked by
     * setting the type, which is then set back, with the encoding it had.
     */
    private String containerEncodingFor(String contentType) {
        ServletResponse container = getResponse();
        String typeBefore = container.getContentType();
        String before = container.getCharacterEncoding();
        container.setContentType(contentType);
        String taken = container.getCharacterEncoding();
        container.setContentType(typeBefore); // null clears the encoding too
        if (before != null && !before.equalsIgnoreCase(container.getCharacterEncoding())) {
            container.setCharacterEncoding(before);
        }
        return taken == null || taken.equalsIgnoreCase(containerEncoding) ? null : taken;
    }

    @Override
    public Locale getLocale() {
        return capturing && locale != null ? locale : super.getLocale();
    }

    @Override
    public String getCharacterEncoding() {
        if (!capturing) {
            return super.getCharacterEncoding();
        }
        return chosenEncoding() != null ? chosenEncoding() : containerEncoding;
    }

    /** The encoding chosen while capturing: set by the handler, else mapped from its locale; null when neither. */
    private String chosenEncoding() {
        return characterEncoding != null ? characterEncoding : localeEncoding;
    }

    @Override
    public void setContentLength(int len) {
        if (!capturing) {
            super.setContentLength(len);
        }
    }

    @Override
    public void setContentLengthLong(long len) {
        if (!capturing) {
            super.setContentLengthLong(len);
        }
    }

    // ---------------------------------------------------------------- body

    /**
     * Always this wrapper's own stream, even before {@link #capture()}: Spring MVC resolves an {@code OutputStream}
     * or {@code Writer} handler argument before the advice switches capture on, and bytes written through it must
     * still wait for the commit. Each write goes to the client while not capturing and to the buffer once capturing;
     * the container's own stream is only asked for when something passes through.
     */
    @Override
    public ServletOutputStream getOutputStream() {
        if (switchingStream == null) {
            switchingStream = new ServletOutputStream() {
                @Override
                public void write(int b) throws IOException {
                    if (capturing) {
                        capturedThroughTheStream().write(b);
                    } else {
                        DeferredResponse.super.getOutputStream().write(b);
                    }
                }

                @Override
                public void write(byte[] b, int off, int len) throws IOException {
                    if (capturing) {
                        capturedThroughTheStream().write(b, off, len);
                    } else {
                        DeferredResponse.super.getOutputStream().write(b, off, len);
                    }
                }

                @Override
                public void flush() throws IOException {
                    if (!capturing) {
                        DeferredResponse.super.getOutputStream().flush();
                    }
                }

                @Override
                public void close() throws IOException {
                    if (!capturing) {
                        DeferredResponse.super.getOutputStream().close();
                    }
                }

                @Override
                public boolean isReady() {
                    try {
                        return capturing || DeferredResponse.super.getOutputStream().isReady();
                    } catch (IOException e) {
                        throw new UncheckedIOException(e);
                    }
                }

                @Override
                public void setWriteListener(WriteListener listener) {
                    if (capturing) {
                        throw new UnsupportedOperationException("an idempotent response is written synchronously");
                    }
                    try {
                        DeferredResponse.super.getOutputStream().setWriteListener(listener);
                    } catch (IOException e) {
                        throw new UncheckedIOException(e);
                    }
                }
            };
        }
        return switchingStream;
    }

    /**
     * The buffer's stream, for writes made through the output stream while capturing: refused once the writer has been
     * written through, as the container refuses the output stream once the writer is in use (the Servlet
     * specification allows one of them until a reset). Taken both, the writer's text would be held in its encoder
     * while the stream's bytes went ahead, and the answer stored and sent with its parts out of order.
     */
    private ServletOutputStream capturedThroughTheStream() {
        if (writer != null) {
            throw new IllegalStateException("getWriter() has already been called for this response");
        }
        streamWritten = true;
        return captured();
    }

    /**
     * Keeps what the handler wrote while capturing, in memory: all of it while the answer may still be stored whole.
     * Once the body outgrows the limit while its status is one that is stored, the answer can only be refused as too
     * large (unless the handler resets it, or sets a status that is not stored, which would then find its body gone:
     * it is refused too), so its bytes are dropped and only counted: a handler that streams a large answer does not
     * fill the heap before it is refused. A body whose status is not stored is held whole whatever its length, as it
     * is sent as it is. Counts {@code len} more bytes written, and tells whether to hold them.
     */
    private boolean holds(int len) {
        bodyLength += len;
        if (!bodyDropped && bodyLength > bodyLimit && stored.test(status)) {
            bodyDropped = true;
            body = new ByteArrayOutputStream(0); // what was held goes now
        }
        return !bodyDropped;
    }

    /** Forgets the body written so far (a reset, a redirect or an error that discards it). */
    private void clearBody() {
        if (bodyDropped) {
            body = new ByteArrayOutputStream();
            bodyDropped = false;
        } else {
            body.reset();
        }
        bodyLength = 0;
    }

    /** The length of the body written while capturing, whether or not it was held. */
    long bodyLength() {
        flushWriter();
        return bodyLength;
    }

    /**
     * Whether the body written while capturing is held whole: it is not once it outgrew the limit while its status
     * was one that is stored (see {@link #holds}). Such an answer can be neither stored nor sent.
     */
    boolean holdsTheWholeBody() {
        flushWriter();
        return !bodyDropped;
    }

    private void requireHeldBody() {
        if (bodyDropped) {
            throw new IllegalStateException("the captured body (" + bodyLength + " bytes) was longer than the limit ("
                    + bodyLimit + " bytes) and is not held");
        }
    }

    /** The buffer's stream, for writes made while capturing. */
    private ServletOutputStream captured() {
        if (outputStream == null) {
            outputStream = new ServletOutputStream() {
                @Override
                public void write(int b) {
                    if (!errorSent && holds(1)) {
                        body.write(b);
                    }
                }

                @Override
                public void write(byte[] b, int off, int len) {
                    Objects.checkFromIndexSize(off, len, b.length);
                    if (!errorSent && holds(len)) {
                        body.write(b, off, len);
                    }
                }

                @Override
                public boolean isReady() {
                    return true;
                }

                @Override
                public void setWriteListener(WriteListener listener) {
                    throw new UnsupportedOperationException("an idempotent response is written synchronously");
                }
            };
        }
        return outputStream;
    }

    /**
     * Always this wrapper's own writer, for the reason given at {@link #getOutputStream()}. While capturing, text is
     * encoded with the character encoding in effect at the first write.
     */
    @Override
    public PrintWriter getWriter() {
        if (switchingWriter == null) {
            switchingWriter = new PrintWriter(new Writer() {
                @Override
                public void write(char[] chars, int off, int len) throws IOException {
                    target().write(chars, off, len);
                }

                @Override
                public void write(String text, int off, int len) throws IOException {
                    target().write(text, off, len);
                }

                @Override
                public void flush() throws IOException {
                    target().flush();
                }

                @Override
                public void close() throws IOException {
                    if (capturing) {
                        capturedWriter().flush();
                    } else {
                        DeferredResponse.super.getWriter().close();
                    }
                }

                private Writer target() throws IOException {
                    return capturing ? capturedWriter() : DeferredResponse.super.getWriter();
                }
            }) {
                /**
                 * Passed through, also the container's writer's error: a write that failed there (the client went
                 * away) sets a flag of that writer and throws nothing, so this one would never learn of it, and a
                 * handler that writes until its writer reports an error would write on for ever.
                 */
                @Override
                public boolean checkError() {
                    if (super.checkError()) {
                        return true;
                    }
                    if (capturing) {
                        return false;
                    }
                    try {
                        return DeferredResponse.super.getWriter().checkError();
                    } catch (IllegalStateException e) {
                        return false; // the response is written through its stream: no writer wrote to the client
                    } catch (IOException e) {
                        return true;
                    }
                }
            };
        }
        return switchingWriter;
    }

    private PrintWriter capturedWriter() {
        if (writer == null) {
            if (streamWritten) {
                // as the container refuses it (see capturedThroughTheStream)
                throw new IllegalStateException("getOutputStream() has already been called for this response");
            }
            if (chosenEncoding() == null && getHeader(CONTENT_TYPE) != null) {
                // the container may take a charset for the type itself (Jetty writes JSON in UTF-8)
                characterEncoding = containerEncodingFor(getHeader(CONTENT_TYPE));
            }
            // as the container does: the writer's encoding becomes the response's, and the Content-Type says so
            setCharacterEncoding(getCharacterEncoding());
            writer = new PrintWriter(new OutputStreamWriter(captured(), Charset.forName(getCharacterEncoding())));
        }
        return writer;
    }

    @Override
    public void flushBuffer() throws IOException {
        if (!capturing) {
            super.flushBuffer();
        } else {
            flushWriter();
        }
    }

    @Override
    public boolean isCommitted() {
        return capturing ? errorSent : super.isCommitted();
    }

    @Override
    public void resetBuffer() {
        if (!capturing) {
            super.resetBuffer();
        } else {
            requireNotSent("resetBuffer()");
            flushWriter();
            clearBody();
        }
    }

    @Override
    public void reset() {
        if (!capturing) {
            super.reset();
        } else {
            requireNotSent("reset()");
            flushWriter();
            clearBody();
            headers.clear();
            cookies.clear();
            cookiesReplaced = containerCookies(); // the container's reset takes the cookies it holds too
            trailerFields = null;
            status = SC_OK;
            characterEncoding = null;
            localeEncoding = null;
            locale = null;
            writer = null; // a writer made after the reset encodes with the encoding set after it
            streamWritten = false; // after a reset the answer may be written through either
        }
    }

    /**
     * Refuses {@code call} once {@code sendError} has settled the answer, as Tomcat refuses it then (the response
     * counts as committed, see {@link #isCommitted()}; Jetty keeps the error and ignores the call). Taken instead, a
     * redirect, a second {@code sendError} or a reset after the {@code sendError} of an error would give the held
     * answer a status of success with nothing else of it (a 302 without its {@code Location}, an empty 200), stored
     * and committed with the effects of a request the handler refused, where without the library the client is told
     * of an error.
     */
    private void requireNotSent(String call) {
        if (errorSent) {
            throw new IllegalStateException("Cannot call " + call + " after the response has been committed");
        }
    }

    private void flushWriter() {
        if (writer != null) {
            writer.flush();
        }
    }

    private static String charsetOf(String contentType) {
        int index = contentType.toLowerCase(Locale.ROOT).indexOf("charset=");
        if (index < 0) {
            return null;
        }
        String charset = contentType.substring(index + "charset=".length());
        int end = charset.indexOf(';');
        return (end < 0 ? charset : charset.substring(0, end)).trim().replace("\"", "");
    }

    /** IMF-fixdate (RFC 9110), e.g. {@code Sun, 06 Nov 1994 08:49:37 GMT}. */
    private static final java.time.format.DateTimeFormatter HTTP_DATE =
            java.time.format.DateTimeFormatter.ofPattern("EEE, dd MMM yyyy HH:mm:ss 'GMT'", Locale.US)
                    .withZone(java.time.ZoneOffset.UTC);

    private static String httpDate(long epochMillis) {
        return HTTP_DATE.format(java.time.Instant.ofEpochMilli(epochMillis));
    }
}
