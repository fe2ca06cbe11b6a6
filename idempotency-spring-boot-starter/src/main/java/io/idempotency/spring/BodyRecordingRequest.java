package io.idempotency.spring;

import jakarta.servlet.AsyncContext;
import jakarta.servlet.ReadListener;
import jakarta.servlet.RequestDispatcher;
import jakarta.servlet.ServletContext;
import jakarta.servlet.ServletException;
import jakarta.servlet.ServletInputStream;
import jakarta.servlet.ServletRequest;
import jakarta.servlet.ServletRequestWrapper;
import jakarta.servlet.ServletResponse;
import jakarta.servlet.http.Cookie;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletRequestWrapper;
import jakarta.servlet.http.HttpServletResponse;
import jakarta.servlet.http.HttpServletResponseWrapper;
import jakarta.servlet.http.Part;
import org.springframework.http.MediaType;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.Charset;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.Enumeration;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.function.BooleanSupplier;

/**
 * Keeps a copy of the request body as the application reads it, so the body can be fingerprinted after Spring MVC
 * has bound it to the handler's arguments, without consuming it first. The copy is capped: past the cap the
 * application still gets every byte, but {@link #body()} reports the overflow. Not thread-safe (one request).
 */
final class BodyRecordingRequest extends HttpServletRequestWrapper {

    /** Thrown by {@link #body()} when the body exceeds the cap. */
    static final class BodyTooLargeException extends Exception {
        BodyTooLargeException(long limit) {
            super("the request body is larger than " + limit + " bytes");
        }
    }

    /** Thrown by {@link #keepFormBody()} when a form sent without a declared length is larger than the cap. */
    static final class FormTooLargeException extends IllegalStateException {
        FormTooLargeException(long limit) {
            super("the request body is larger than " + limit + " bytes");
        }
    }

    /**
     * Most parameters a form read by {@link #keepFormBody()} may have, counted as the container counts them: as many
     * values, with its query's, as Tomcat takes by default ({@code server.tomcat.max-parameter-count}), or as many
     * names as Jetty does ({@code server.jetty.max-form-keys}).
     */
    static final int MAX_FORM_PARAMETERS = 1000;

    /**
     * Largest form {@link #keepFormBody()} reads, in bytes: as large as Jetty takes by default
     * ({@code server.jetty.max-http-form-post-size}; Tomcat's {@code max-http-form-post-size} is 2 MB).
     */
    static final int MAX_FORM_SIZE = 200_000;

    /**
     * Largest form Tomcat parses by default ({@code server.tomcat.max-http-form-post-size}): a form sent without a
     * declared length, which {@link #keepFormBody()} reads whatever its size, is refused above it on Tomcat, as Tomcat
     * refuses it, and above {@link #MAX_FORM_SIZE} on Jetty.
     */
    static final int MAX_TOMCAT_FORM_SIZE = 2 * 1024 * 1024;

    private final int limit;
    private final Copy copy = new Copy();
    private boolean overflow;
    private RecordingStream stream;
    private BufferedReader reader;

    private boolean parametersAsked; // the application asked for a parameter through this request
    private boolean partsAsked; // the application asked for the multipart body's parts through this request
    private Map<String, String[]> formKept; // the parameters, where the form's body was read here to keep it

    private BooleanSupplier holdingAnswer = () -> false;
    private int dispatchesMadeInside; // forwards and includes made through this request that have not returned yet
    private ServletContext guardedContextOf; // the container's servlet context, and the guarded one given for it
    private ServletContext guardedContext;
    private volatile boolean answeredInsteadOfAsync; // read by the threads of the application's async work
    private volatile boolean asyncStartedWhileAnswerHeld; // as holdingAnswer says, for those threads to read

    BodyRecordingRequest(HttpServletRequest request, int limit) {
        super(request);
        this.limit = limit;
    }

    /**
     * From now on, while {@code holdingAnswer} says the answer is held for the commit, a forward is refused and the
     * headers asking for a part of the answer are hidden from the application: {@code Range}, and {@code If-Range},
     * which only qualifies it. The fingerprint does not cover them, so a part would be stored and replayed to every
     * retry under the key, also to one asking for the whole; a server may ignore them (RFC 9110), which the
     * application does while its answer is held, and answers with the whole.
     */
    void holdAnswerWhile(BooleanSupplier holdingAnswer) {
        this.holdingAnswer = holdingAnswer;
    }

    private boolean hidden(String name) {
        return ("range".equalsIgnoreCase(name) || "if-range".equalsIgnoreCase(name)) && holdingAnswer.getAsBoolean();
    }

    @Override
    public String getHeader(String name) {
        return hidden(name) ? null : super.getHeader(name);
    }

    @Override
    public Enumeration<String> getHeaders(String name) {
        return hidden(name) ? Collections.emptyEnumeration() : super.getHeaders(name);
    }

    @Override
    public long getDateHeader(String name) {
        return hidden(name) ? -1 : super.getDateHeader(name);
    }

    @Override
    public Enumeration<String> getHeaderNames() {
        if (!holdingAnswer.getAsBoolean()) {
            return super.getHeaderNames();
        }
        List<String> names = Collections.list(super.getHeaderNames());
        names.removeIf(this::hidden);
        return Collections.enumeration(names);
    }

    /**
     * The container's dispatcher, except that a forward (a view such as {@code "forward:/x"} or a JSP) is refused while
     * the answer is held for the commit: the container ends the response when a forward returns, so the answer the
     * filter sends after the commit would never reach the client, while the effects would be kept.
     */
    @Override
    public RequestDispatcher getRequestDispatcher(String path) {
        return guarded(super.getRequestDispatcher(path), path);
    }

    /**
     * The container's servlet context, whose dispatchers ({@code getRequestDispatcher}, {@code getNamedDispatcher},
     * and those of another context it gives) are this request's, guarded alike: a handler that forwards or includes
     * through {@code request.getServletContext()} dispatches this request all the same, and the container ends the
     * response when such a forward returns, and takes no status or header from such an included resource.
     */
    @Override
    public ServletContext getServletContext() {
        ServletContext context = super.getServletContext();
        if (context == null) {
            return null;
        }
        if (guardedContext == null || guardedContextOf != context) {
            guardedContext = guardedContext(context);
            guardedContextOf = context;
        }
        return guardedContext;
    }

    private ServletContext guardedContext(ServletContext context) {
        return (ServletContext) Proxy.newProxyInstance(ServletContext.class.getClassLoader(),
                new Class<?>[] {ServletContext.class}, (proxy, method, args) -> {
                    if (method.getName().equals("equals") && args != null && args.length == 1) {
                        return proxy == args[0] || context.equals(args[0]);
                    }
                    Object result;
                    try {
                        result = method.invoke(context, args);
                    } catch (InvocationTargetException e) {
                        throw e.getCause();
                    }
                    if (result instanceof RequestDispatcher dispatcher && !isAsyncStarted()) {
                        // not once async processing has started: the container's AsyncContext.dispatch() asks the
                        // request's context for a dispatcher, and Tomcat takes only its own
                        return guarded(dispatcher, String.valueOf(args[0]));
                    }
                    if (result instanceof ServletContext other) { // getContext(uri): this one, or another application's
                        return other == context ? proxy : guardedContext(other);
                    }
                    return result;
                });
    }

    private RequestDispatcher guarded(RequestDispatcher dispatcher, String path) {
        if (dispatcher == null) {
            return null;
        }
        return new RequestDispatcher() {
            @Override
            public void forward(ServletRequest request, ServletResponse response) throws ServletException,
                    IOException {
                if (holdingAnswer.getAsBoolean()) {
                    throw new IllegalStateException("The answer of an idempotent request cannot be forwarded to "
                            + path + ": the container ends the response when the forward returns, before the"
                            + " answer can be sent after the commit. Answer from the handler itself (a body, or a"
                            + " view that renders without forwarding).");
                }
                dispatchesMadeInside++;
                try {
                    dispatcher.forward(request, response);
                } finally {
                    dispatchesMadeInside--;
                }
            }

            @Override
            public void include(ServletRequest request, ServletResponse response) throws ServletException,
                    IOException {
                dispatchesMadeInside++;
                try {
                    dispatcher.include(request, holdingAnswer.getAsBoolean()
                            && response instanceof HttpServletResponse held ? new IncludedResponse(held) : response);
                } finally {
                    dispatchesMadeInside--;
                }
            }
        };
    }

    /**
     * Whether a forward or an include made through this request (by a handler, a view) is running: what runs now is
     * in a dispatch of its own, whatever its kind, not in the one this request wraps.
     */
    boolean inDispatchMadeInside() {
        return dispatchesMadeInside > 0;
    }

    /**
     * The held answer as an included resource gets it: what it does to the status and headers (its content type and
     * length, its locale and encoding, a cookie, {@code sendError}, {@code sendRedirect}, a reset) is ignored, as the
     * container ignores it, for an include adds to the body only. The container's own include wrapper sits below the
     * held answer, which would otherwise take them as its own, store and replay them: a page a handler includes that
     * answers 404 would make its request's answer a 404.
     */
    private static final class IncludedResponse extends HttpServletResponseWrapper {

        IncludedResponse(HttpServletResponse response) {
            super(response);
        }

        @Override
        public void setStatus(int sc) {
        }

        @Override
        public void sendError(int sc, String msg) {
        }

        @Override
        public void sendError(int sc) {
        }

        @Override
        public void sendRedirect(String location) {
        }

        @Override
        public void sendRedirect(String location, boolean clearBuffer) {
        }

        @Override
        public void sendRedirect(String location, int sc) {
        }

        @Override
        public void sendRedirect(String location, int sc, boolean clearBuffer) {
        }

        @Override
        public void setHeader(String name, String value) {
        }

        @Override
        public void addHeader(String name, String value) {
        }

        @Override
        public void setIntHeader(String name, int value) {
        }

        @Override
        public void addIntHeader(String name, int value) {
        }

        @Override
        public void setDateHeader(String name, long date) {
        }

        @Override
        public void addDateHeader(String name, long date) {
        }

        @Override
        public void addCookie(Cookie cookie) {
        }

        @Override
        public void setContentType(String type) {
        }

        @Override
        public void setCharacterEncoding(String charset) {
        }

        @Override
        public void setCharacterEncoding(Charset charset) {
        }

        @Override
        public void setLocale(Locale locale) {
        }

        @Override
        public void setContentLength(int len) {
        }

        @Override
        public void setContentLengthLong(long len) {
        }

        @Override
        public void reset() {
        }
    }

    /**
     * Reads a form body that no one has read yet, parameters or bytes, into the copy, and takes its parameters from
     * there, before the library reads them: asked for them, the container would parse the form from its own stream,
     * and a handler that reads the form as sent (a provider's callback whose signature covers its bytes) would find
     * nothing left. Only a form the container parses (a POST of the type, in any case — on Jetty, which parses PUT
     * forms too, a PUT as well — with a declared length within the cap and the size the containers take by default,
     * or sent in chunks without one); its parameters are then
     * the query's, as the container reads them, followed by the form's, read in the charset the container reads it in
     * and with the parts without a name as it takes them (see {@link #isOnJetty()}): the same form, read here or by
     * the container (a larger one, or one whose parameters the application asked for first), is the same request.
     * A form sent in chunks is read whatever its size, its length being known only once it is read: it is refused
     * above the cap, as one that declares a larger length is, and above the size the container takes.
     *
     * @throws FormTooLargeException if a form sent without a declared length is larger than the cap
     * @throws IllegalStateException if the form cannot be read or parsed, as the container refuses it
     */
    void keepFormBody() {
        if (formKept != null || parametersAsked || stream != null || reader != null || !containerParsesTheForm()) {
            return;
        }
        long length = getContentLengthLong();
        if (length == 0 || length > limit || length > MAX_FORM_SIZE) {
            return; // left to the container, which refuses a form larger than it takes
        }
        boolean onJetty = isOnJetty();
        Charset named = null;
        if (onJetty) {
            // Jetty reads the form in the charset its type names, which it finds otherwise than Spring's MediaType
            // where the type names one more than once (Jetty takes the first, MediaType the last) or does not parse
            // (an empty one, which Jetty takes as none, or one unknown here): such a form is left to Jetty, which
            // reads it alike, or refuses it alike, whether it declares its length or comes in chunks
            try {
                if (charsetParameters(getContentType()) > 1) {
                    return;
                }
                named = MediaType.parseMediaType(getContentType()).getCharset();
            } catch (IllegalArgumentException e) {
                return;
            }
        }
        byte[] form;
        try {
            RecordingStream in = (RecordingStream) getInputStream();
            in.drain();
            form = copy.toByteArray();
        } catch (IOException e) {
            throw new IllegalStateException("the form could not be read", e);
        }
        if (overflow) {
            throw new FormTooLargeException(limit);
        }
        if (form.length > (onJetty ? MAX_FORM_SIZE : MAX_TOMCAT_FORM_SIZE)) {
            throw new IllegalStateException("the form is larger than the container takes");
        }
        Charset charset;
        try {
            // without one its type names, Jetty reads a form in UTF-8, whatever the request's character encoding
            // (which Tomcat reads it in: Spring's encoding filter, or the application, may have set another)
            charset = named != null ? named : onJetty ? StandardCharsets.UTF_8 : charset();
        } catch (IllegalArgumentException e) {
            throw new IllegalStateException("the form's charset is not supported", e);
        }
        Map<String, List<String>> parameters = new LinkedHashMap<>();
        super.getParameterMap().forEach((name, values) -> parameters.put(name, new ArrayList<>(List.of(values))));
        // counted as the container counts them: Tomcat the values, the query's too; Jetty the form's names
        int count = onJetty ? 0 : parameters.values().stream().mapToInt(List::size).sum();
        Set<String> names = new HashSet<>();
        String[] pairs = new String(form, StandardCharsets.ISO_8859_1).split("&", -1);
        for (int i = 0; i < pairs.length; i++) {
            String pair = pairs[i];
            int equals = pair.indexOf('=');
            if (equals == 0 || pair.isEmpty()) {
                // a part without a name: read as the container reads it, or the same form would be another request
                // (or refused) when it comes in chunks, and the container parses it
                if (!onJetty && equals == 0) {
                    throw new IllegalStateException("a value without a name in the form");
                }
                if (!onJetty || pair.isEmpty() && i == pairs.length - 1) {
                    continue;
                }
            }
            String name = decode(equals < 0 ? pair : pair.substring(0, equals), charset);
            String value = equals < 0 ? "" : decode(pair.substring(equals + 1), charset);
            parameters.computeIfAbsent(name, n -> new ArrayList<>()).add(value);
            if (onJetty ? names.add(name) && names.size() > MAX_FORM_PARAMETERS : ++count > MAX_FORM_PARAMETERS) {
                throw new IllegalStateException("more than " + MAX_FORM_PARAMETERS + " parameters");
            }
        }
        Map<String, String[]> kept = new LinkedHashMap<>();
        parameters.forEach((name, values) -> kept.put(name, values.toArray(new String[0])));
        formKept = Collections.unmodifiableMap(kept);
    }

    /**
     * Whether the container is Jetty, which parses a form otherwise than Tomcat: in the charset its Content-Type names,
     * where Tomcat takes the request's encoding (which Spring Boot sets to UTF-8 whatever the form names); and with the
     * parts that have no name as parameters named "" (an empty part before an {@code &} with the value "", the one
     * after the last being nothing, and {@code =x} with the value {@code x}), where Tomcat skips an empty part and
     * refuses a form with a value that has no name. Elsewhere the library reads forms as Tomcat does, refusing such a
     * form rather than guessing.
     */
    private boolean isOnJetty() {
        ServletRequest container = getRequest();
        while (container instanceof ServletRequestWrapper wrapper) {
            container = wrapper.getRequest();
        }
        return container.getClass().getName().startsWith("org.eclipse.jetty.");
    }

    /**
     * How many parameters of a Content-Type name its charset, in any case: the parameters are split at the semicolons
     * outside quoted strings.
     */
    private static int charsetParameters(String contentType) {
        int count = 0;
        boolean quoted = false;
        int from = contentType.indexOf(';') + 1;
        if (from == 0) {
            return 0;
        }
        for (int i = from; i <= contentType.length(); i++) {
            char c = i < contentType.length() ? contentType.charAt(i) : ';';
            if (quoted && c == '\\') {
                i++;
            } else if (c == '"') {
                quoted = !quoted;
            } else if (c == ';' && !quoted) {
                int equals = contentType.indexOf('=', from);
                if (equals >= 0 && equals < i
                        && contentType.substring(from, equals).trim().equalsIgnoreCase("charset")) {
                    count++;
                }
                from = i + 1;
            }
        }
        return count;
    }

    /** Whether {@link #keepFormBody()} read the form: its parameters are all parsed, none left in the body. */
    boolean isFormKept() {
        return formKept != null;
    }

    /**
     * Whether the containers parse a body of this type as a form: media types are case-insensitive, and Tomcat, as
     * Jetty, compares the type in any case.
     */
    private static boolean isParsedForm(String contentType) {
        if (contentType == null) {
            return false;
        }
        int semicolon = contentType.indexOf(';');
        String type = (semicolon < 0 ? contentType : contentType.substring(0, semicolon)).trim();
        return type.equalsIgnoreCase("application/x-www-form-urlencoded");
    }

    /** A form's %-escaped text (its bytes read as ISO-8859-1), decoded strictly in {@code charset}. */
    private static String decode(String escaped, Charset charset) {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream(escaped.length());
        for (int i = 0; i < escaped.length(); i++) {
            char c = escaped.charAt(i);
            if (c == '+') {
                bytes.write(' ');
            } else if (c == '%') {
                int high = i + 2 < escaped.length() ? Character.digit(escaped.charAt(i + 1), 16) : -1;
                int low = high < 0 ? -1 : Character.digit(escaped.charAt(i + 2), 16);
                if (low < 0) {
                    throw new IllegalStateException("a broken %-escape in the form");
                }
                bytes.write(high * 16 + low);
                i += 2;
            } else {
                bytes.write(c);
            }
        }
        try {
            return charset.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(bytes.toByteArray())).toString();
        } catch (CharacterCodingException e) {
            throw new IllegalStateException("the form is not valid " + charset.name(), e);
        }
    }

    @Override
    public String getParameter(String name) {
        if (formKept == null) {
            parametersAsked = true;
            return super.getParameter(name);
        }
        String[] values = formKept.get(name);
        return values == null ? null : values[0];
    }

    @Override
    public Map<String, String[]> getParameterMap() {
        if (formKept == null) {
            parametersAsked = true;
            return super.getParameterMap();
        }
        return formKept;
    }

    @Override
    public Enumeration<String> getParameterNames() {
        if (formKept == null) {
            parametersAsked = true;
            return super.getParameterNames();
        }
        return Collections.enumeration(formKept.keySet());
    }

    @Override
    public String[] getParameterValues(String name) {
        if (formKept == null) {
            parametersAsked = true;
            return super.getParameterValues(name);
        }
        String[] values = formKept.get(name);
        return values == null ? null : values.clone();
    }

    /**
     * The library has answered this request, whose handler started async processing, and ends it: the application's
     * async work, which may outlive the request, can no longer end it or anything else (see
     * {@link GuardedAsyncContext}).
     */
    void answeredInsteadOfAsync() {
        answeredInsteadOfAsync = true;
    }

    private AsyncContext guarded(AsyncContext started) {
        if (holdingAnswer.getAsBoolean()) { // on the handler's thread, which sees the answer held
            asyncStartedWhileAnswerHeld = true;
        }
        return new GuardedAsyncContext(started, () -> answeredInsteadOfAsync, () -> asyncStartedWhileAnswerHeld);
    }

    @Override
    public AsyncContext startAsync() {
        return guarded(super.startAsync());
    }

    @Override
    public AsyncContext startAsync(ServletRequest request, ServletResponse response) {
        return guarded(super.startAsync(request, response));
    }

    @Override
    public AsyncContext getAsyncContext() {
        AsyncContext started = super.getAsyncContext();
        return started == null ? null : guarded(started);
    }

    /**
     * Whether the container parses this request's body as a form when asked for its parameters: a POST of the type
     * (in any case), and on Jetty a PUT too.
     */
    private boolean containerParsesTheForm() {
        return isParsedForm(getContentType())
                && ("POST".equals(getMethod()) || "PUT".equals(getMethod()) && isOnJetty());
    }

    /**
     * Whether the request declares a body (a length, or chunks) that no one has read to its end — the application,
     * the library, or the container parsing a form — so that bytes of it may still wait in the connection.
     */
    boolean bodyLeftUnread() {
        if (getContentLengthLong() <= 0 && getHeader("Transfer-Encoding") == null || formKept != null || partsAsked
                || parametersAsked && containerParsesTheForm()) {
            return false; // read whole, by the library or by the container (which says so in no stream of its own)
        }
        if (stream != null) {
            return !stream.inputEnded();
        }
        // not read through this request: maybe by a filter before the library's (Spring's FormContentFilter, a
        // caching filter), from the container's stream
        try {
            return !super.getInputStream().isFinished();
        } catch (IOException | IllegalStateException e) {
            return false; // read as text, through the container's reader: not known to be unread
        }
    }

    @Override
    public Collection<Part> getParts() throws IOException, ServletException {
        partsAsked = true;
        return super.getParts();
    }

    @Override
    public Part getPart(String name) throws IOException, ServletException {
        partsAsked = true;
        return super.getPart(name);
    }

    @Override
    public ServletInputStream getInputStream() throws IOException {
        if (stream == null) {
            stream = new RecordingStream(super.getInputStream());
        }
        return stream;
    }

    @Override
    public BufferedReader getReader() throws IOException {
        if (reader == null) {
            reader = new BufferedReader(new InputStreamReader(getInputStream(), charset()));
        }
        return reader;
    }

    /**
     * The charset the body is text in: the request's character encoding, else ISO-8859-1 (the servlet default).
     *
     * @throws IllegalArgumentException if the encoding names no charset this JVM has
     */
    private Charset charset() {
        String encoding = getCharacterEncoding();
        return encoding == null ? StandardCharsets.ISO_8859_1 : Charset.forName(encoding);
    }

    /**
     * The whole body: what the application read, plus the rest, which is read now — and kept, so that the
     * application, reading on later (an {@code InputStream} or {@code Reader} argument), still gets every byte.
     *
     * @throws BodyTooLargeException if the body is larger than the cap
     */
    byte[] body() throws IOException, BodyTooLargeException {
        checkDeclaredLength();
        RecordingStream in = (RecordingStream) getInputStream();
        in.drain();
        if (overflow) {
            throw new BodyTooLargeException(limit);
        }
        return copy.toByteArray();
    }

    /**
     * {@link #body()} as the handler reads it once the application has undone the content codings its
     * {@code Content-Encoding} declares (see {@link ContentCodings}); decoded, it is capped as well.
     *
     * @throws BodyTooLargeException if the body, or the body decoded, is larger than the cap
     * @throws ContentCodings.UndecodableBodyException if a body in gzip coding does not decompress
     */
    ContentCodings.Decoded decodedBody() throws IOException, BodyTooLargeException,
            ContentCodings.UndecodableBodyException {
        byte[] body = body();
        List<String> codings = Collections.list(getHeaders("Content-Encoding"));
        return codings.isEmpty() ? new ContentCodings.Decoded(body, false)
                : ContentCodings.decode(body, codings, limit);
    }

    /** @throws BodyTooLargeException if the request declares a body larger than the cap */
    void checkDeclaredLength() throws BodyTooLargeException {
        checkLength(getContentLengthLong());
    }

    /** @throws BodyTooLargeException if {@code length} is above the cap */
    void checkLength(long length) throws BodyTooLargeException {
        if (length > limit) {
            throw new BodyTooLargeException(limit);
        }
    }

    private void record(byte[] bytes, int offset, int length) {
        if (overflow || length <= 0) {
            return;
        }
        if (copy.size() + length > limit) {
            overflow = true;
            return;
        }
        copy.write(bytes, offset, length);
    }

    /**
     * The application's view of the body. Bytes come from the container's stream and are copied as they pass; once
     * {@link #drain()} has read ahead, the application is served from the copy until it catches up.
     */
    private final class RecordingStream extends ServletInputStream {

        private final ServletInputStream delegate;
        private long delivered; // bytes handed to the application (a body may pass 2 GB)
        private boolean drained;
        private boolean nonBlocking; // a read listener was set

        RecordingStream(ServletInputStream delegate) {
            this.delegate = delegate;
        }

        /** Reads the rest of the body into the copy, without handing it to the application yet. */
        void drain() throws IOException {
            if (drained || delegate.isFinished()) { // usually the handler's arguments have read it all already
                drained = true;
                return;
            }
            byte[] buffer = new byte[8192];
            int n;
            while (!overflow && (n = delegate.read(buffer)) != -1) {
                record(buffer, 0, n);
            }
            drained = true;
        }

        private boolean aheadOfApplication() {
            return delivered < copy.size();
        }

        /**
         * Whether the container's input has been read to its end (into the copy, or by the application). Not merely
         * {@link #drain drained}: a drain stops at the cap, and the rest of a larger body is still unread.
         */
        boolean inputEnded() {
            return delegate.isFinished();
        }

        @Override
        public int read() throws IOException {
            if (aheadOfApplication()) {
                return copy.byteAt((int) delivered++);
            }
            if (drained) {
                return -1;
            }
            int b = delegate.read();
            if (b >= 0) {
                delivered++;
                if (!overflow) {
                    if (copy.size() + 1 > limit) {
                        overflow = true;
                    } else {
                        copy.write(b);
                    }
                }
            }
            return b;
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            if (aheadOfApplication()) {
                int n = (int) Math.min(len, copy.size() - delivered);
                copy.copyTo((int) delivered, b, off, n);
                delivered += n;
                return n;
            }
            if (drained) {
                return len == 0 ? 0 : -1;
            }
            int n = delegate.read(b, off, len);
            if (n > 0) {
                delivered += n;
                record(b, off, n);
            }
            return n;
        }

        /**
         * Reads as {@code ServletInputStream}'s default does, without its {@link #isReady()} check in blocking mode:
         * there the container's stream may say it is not ready (Jetty does until bytes have arrived) where a read just
         * waits for them, and a handler reading its body this way, on any endpoint whose request the filter wraps,
         * would get an {@code IllegalStateException} where the container's own stream reads. Only a non-blocking read
         * is refused when nothing is ready.
         */
        @Override
        public int read(ByteBuffer buffer) throws IOException {
            Objects.requireNonNull(buffer);
            if (nonBlocking && !isReady()) {
                throw new IllegalStateException("read(ByteBuffer) called while isReady() is false");
            }
            if (buffer.remaining() == 0) {
                return 0;
            }
            byte[] bytes = new byte[buffer.remaining()];
            int n = read(bytes, 0, bytes.length);
            if (n == -1) {
                return -1;
            }
            int position = buffer.position();
            buffer.put(bytes, 0, n);
            buffer.position(position);
            buffer.limit(position + n); // the bytes read, between the position at the call and the limit (Servlet 6.1)
            return n;
        }

        /**
         * What can be read without blocking, as the container's stream says: readers decide on it, such as the JDK's
         * {@code GZIPInputStream}, which looks for a further gzip member only when more bytes are available.
         */
        @Override
        public int available() throws IOException {
            if (aheadOfApplication()) {
                return (int) Math.min(Integer.MAX_VALUE, copy.size() - delivered);
            }
            return drained ? 0 : delegate.available();
        }

        @Override
        public boolean isFinished() {
            return !aheadOfApplication() && (drained || delegate.isFinished());
        }

        @Override
        public boolean isReady() {
            return aheadOfApplication() || drained || delegate.isReady();
        }

        @Override
        public void setReadListener(ReadListener listener) {
            delegate.setReadListener(listener);
            nonBlocking = true;
        }
    }

    /** The copy, readable at any position without copying it whole. */
    private static final class Copy extends ByteArrayOutputStream {

        int byteAt(int index) {
            return buf[index] & 0xff;
        }

        void copyTo(int from, byte[] target, int offset, int length) {
            System.arraycopy(buf, from, target, offset, length);
        }
    }
}
