package io.idempotency.spring;

import io.idempotency.core.CommitFailedException;
import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.LeaseLostException;
import io.idempotency.core.ScopedKey;
import io.idempotency.core.StoredResponse;
import jakarta.servlet.FilterChain;
import jakarta.servlet.ServletException;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.web.filter.OncePerRequestFilter;
import org.springframework.web.servlet.DispatcherServlet;
import org.springframework.web.util.WebUtils;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.stream.Collectors;
import java.util.stream.Stream;

/**
 * Owns the end of every idempotent request. A filter cannot know before the chain runs whether the handler is
 * {@code @Idempotent}, so it prepares every request whose HTTP method some {@code @Idempotent} endpoint is idempotent
 * for (others, typically every GET, pass untouched): the body is recorded as it is read, and the response passes
 * through a {@link DeferredResponse}. When an {@code @Idempotent} handler claims its key, the advice
 * ({@link IdempotentMethodInterceptor}) switches the response to capture; after the chain returns, this filter
 * stores the answer and commits — or rolls back — and only then sends the answer. So no byte reaches the client
 * before the commit, and a failed commit becomes a 500, never a 2xx.
 *
 * <p>Runs after Spring Security's filter chain ({@link #ORDER}), so the principal is known when keys are scoped.
 */
public class IdempotencyFilter extends OncePerRequestFilter {

    /**
     * The filter's order: after Spring Security's filter chain ({@code SecurityProperties.DEFAULT_FILTER_ORDER},
     * -100), before everything registered at the default order.
     */
    public static final int ORDER = -100 + 10;

    private static final Logger log = LoggerFactory.getLogger(IdempotencyFilter.class);

    static final StoredResponse.Header[] CLOSE_CONNECTION = {new StoredResponse.Header("Connection", "close")};
    private static final StoredResponse.Header[] NO_HEADERS = {};

    private final ProblemResponses problems;
    private final int maxRequestBodySize;
    private final long maxStoredBodySize;
    private final Set<String> replayedHeaders;
    private final IdempotentMethods idempotentMethods;
    /**
     * Room kept under the container's limit on the header section: a replay sends {@code Idempotent-Replayed: true}
     * besides the stored headers (27 bytes), the container adds its own to every answer ({@code Date},
     * {@code Content-Length}, {@code Keep-Alive}, {@code Connection}: about 110 bytes), and filters outside this one
     * may write theirs as the answer is sent, after it was measured, on the first answer and on every replay: Spring
     * Security's default headers take about 170 bytes (about 240 with HSTS over HTTPS), CORS headers more. An answer
     * stored closer to the limit than this could fail the first time or on every replay, its effects kept.
     */
    static final int HEADER_SECTION_MARGIN = 1024;

    /**
     * The threads serving a request in this filter: what the shutdown of a war waits for ({@link RequestDrain}), but
     * for the thread that closes the application (a handler that does so would otherwise wait for itself).
     */
    private final Set<Thread> inProgress = ConcurrentHashMap.newKeySet();

    /** The largest header section the container sends over HTTP/1.1, once known (see {@link #limitHeaderSection}). */
    private volatile long maxHeaderSection = Long.MAX_VALUE;

    public IdempotencyFilter(ProblemResponses problems, int maxRequestBodySize, long maxStoredBodySize,
                             Set<String> replayedHeaders, IdempotentMethods idempotentMethods) {
        this.idempotentMethods = idempotentMethods;
        this.problems = problems;
        this.maxRequestBodySize = maxRequestBodySize;
        this.maxStoredBodySize = maxStoredBodySize;
        this.replayedHeaders = storedHeaderNames(replayedHeaders);
        List<String> unread = Stream.of("Content-Type", "Content-Encoding")
                .filter(name -> !this.replayedHeaders.contains(name.toLowerCase(Locale.ROOT))).toList();
        if (!unread.isEmpty()) {
            // allowed (an API whose answers are all one type may leave it out), but rarely meant: a list written to
            // add one header replaces the default whole
            log.warn("idempotency.replayed-headers does not list {}: replayed answers are sent without {}, and a"
                    + " client may not be able to read their bodies (a compressed one, say) as it read the first. Add"
                    + " {} to the list unless that is meant.", String.join(" and ", unread),
                    unread.size() == 1 ? "it" : "them", unread.size() == 1 ? "it" : "them");
        }
    }

    /** The kinds of failure after an answer decided without the handler that have been warned of (see doFilter). */
    private final Set<String> answeredThenFailed = java.util.concurrent.ConcurrentHashMap.newKeySet();

    /**
     * Tells the filter the largest header section the container sends over HTTP/1.1 (Tomcat's and Jetty's
     * {@code max-http-response-header-size}): a storable answer whose headers take more is rolled back rather than
     * stored, as the container would refuse to send it, and every replay of it. So is one given over HTTP/2, which a
     * retry over HTTP/1.1 could never get. Told more than once, it keeps the smallest.
     */
    synchronized void limitHeaderSection(long bytes) {
        this.maxHeaderSection = Math.min(this.maxHeaderSection, bytes);
    }

    /** The lower-case names of the headers stored with an answer: {@code replayedHeaders} but those never stored. */
    static Set<String> storedHeaderNames(Collection<String> replayedHeaders) {
        return replayedHeaders.stream()
                .map(name -> name.toLowerCase(Locale.ROOT))
                .filter(name -> !NEVER_STORED.contains(name))
                .collect(Collectors.toUnmodifiableSet());
    }

    /**
     * Those of {@code headers} that are stored with an answer, in their order: the ones named in {@code stored} (as
     * {@link #storedHeaderNames} gives them), but none that a {@code Connection} header among {@code headers} names.
     * Those are connection options (RFC 9110, section 7.6.1), hop-by-hop like the ones always left out: a handler
     * passing on an upstream answer with {@code Connection: close, X-Trace} says that its {@code X-Trace} was about
     * that connection, not the answer.
     */
    static List<StoredResponse.Header> storedHeaders(List<StoredResponse.Header> headers, Set<String> stored) {
        Set<String> connectionOptions = new HashSet<>();
        for (StoredResponse.Header header : headers) {
            if (header.name().equalsIgnoreCase("Connection")) {
                for (String option : header.value().split(",")) {
                    connectionOptions.add(option.strip().toLowerCase(Locale.ROOT));
                }
            }
        }
        List<StoredResponse.Header> kept = new ArrayList<>();
        for (StoredResponse.Header header : headers) {
            String name = HeaderNames.lowerCase(header.name());
            if (stored.contains(name) && !connectionOptions.contains(name)) {
                kept.add(new StoredResponse.Header(header.name(), asSent(header.value())));
            }
        }
        return kept;
    }

    /**
     * {@code value} as the container sends it, and as a stored answer keeps it: each control character but the tab
     * (a line break, a NUL, DEL) a space, as RFC 9110 (section 5.5) has a recipient take them and as Tomcat writes
     * them; the first answer is given to the container so too, as other containers write some of them as they are.
     * Kept as given, a line break could not be stored (stored headers are lines) and a NUL not either (no
     * PostgreSQL text holds one): the request would fail after its handler ran, and so would every retry. Half of a
     * surrogate pair (a value cut inside a character) is kept as U+FFFD: no text column holds it either, and the
     * driver would store a {@code ?} in its place, which a replay from the database would send where the container
     * refused the first answer's character, as it refuses U+FFFD. Spaces and tabs at either end (one that was a
     * control character among them) are left out: an HTTP/1.1 client drops them as it reads the value (RFC 9112,
     * section 5.1), and HTTP/2 forbids them (RFC 9113, section 8.2.1), where Jetty resets the stream of an answer that
     * has one, the first and every replay.
     */
    static String asSent(String value) {
        StringBuilder sent = null;
        for (int i = 0; i < value.length(); i++) {
            char c = value.charAt(i);
            char replacement;
            if ((c < 0x20 && c != '\t') || c == 0x7F) {
                replacement = ' ';
            } else if (Character.isHighSurrogate(c) && i + 1 < value.length()
                    && Character.isLowSurrogate(value.charAt(i + 1))) {
                i++; // a whole character
                continue;
            } else if (Character.isSurrogate(c)) {
                replacement = '\uFFFD';
            } else {
                continue;
            }
            if (sent == null) {
                sent = new StringBuilder(value);
            }
            sent.setCharAt(i, replacement);
        }
        String inside = sent == null ? value : sent.toString();
        int start = 0;
        int end = inside.length();
        while (start < end && (inside.charAt(start) == ' ' || inside.charAt(start) == '\t')) {
            start++;
        }
        while (end > start && (inside.charAt(end - 1) == ' ' || inside.charAt(end - 1) == '\t')) {
            end--;
        }
        return inside.substring(start, end);
    }

    /**
     * Never stored, whatever the configuration: headers that carry credentials or session state of one client; the
     * hop-by-hop ones (RFC 9110, section 7.6.1), which describe the connection the first answer went out on and
     * would tell a replay's client about a connection it does not have (close it, upgrade it, expect trailers); and
     * those the container makes for each message it sends: the framing of the body it writes ({@code Content-Length},
     * which the replay sets from the body it sends, and which a stale stored value would contradict) and the time the
     * message was sent ({@code Date}, RFC 9110, section 6.6.1: a replay is sent now, not when the first answer was);
     * and {@code Age} (RFC 9111, section 5.1), which a cache computes as it sends an answer: one passed on from
     * upstream told how long a cache there had held it when the first answer was sent, and stored it would tell every
     * replay, dated now by its origin, the same.
     */
    static final Set<String> NEVER_STORED = Set.of("set-cookie", "set-cookie2", "authorization",
            "proxy-authorization", "proxy-authenticate", "www-authenticate", "cookie", "authentication-info",
            "proxy-authentication-info",
            "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
            "content-length", "date", "age");

    /** Requests that cannot reach an idempotent endpoint (typically every GET) are not wrapped at all. */
    @Override
    protected boolean shouldNotFilter(HttpServletRequest request) {
        return !idempotentMethods.mayApplyTo(request.getMethod());
    }

    @Override
    protected void doFilterInternal(HttpServletRequest request, HttpServletResponse response, FilterChain chain)
            throws ServletException, IOException {
        Thread thread = Thread.currentThread();
        inProgress.add(thread);
        try {
            filter(request, response, chain);
        } finally {
            inProgress.remove(thread);
        }
    }

    /** How many requests this filter is serving now on threads other than {@code thread}. */
    int requestsInProgressBesides(Thread thread) {
        int count = inProgress.size();
        return inProgress.contains(thread) ? count - 1 : count;
    }

    private void filter(HttpServletRequest request, HttpServletResponse response, FilterChain chain)
            throws ServletException, IOException {
        BodyRecordingRequest recordingRequest = new BodyRecordingRequest(request, maxRequestBodySize);
        DeferredResponse deferredResponse = new DeferredResponse(response, maxStoredBodySize);
        IdempotentExchange exchange = new IdempotentExchange(recordingRequest, deferredResponse);
        recordingRequest.holdAnswerWhile(deferredResponse::isCapturing);
        request.setAttribute(IdempotentExchange.ATTRIBUTE, exchange);
        try {
            try {
                chain.doFilter(recordingRequest, deferredResponse);
            } catch (IOException | ServletException | RuntimeException e) {
                if (exchange.answer() != null) {
                    // the handler did not run: what failed rendered its null (a body advice that cannot take one, an
                    // interceptor's postHandle) and would answer every retry under the key with this error instead of
                    // the decided answer, which stands whatever the rest of the request did
                    // the same on every replay or refusal, which any client can send at will: warned of once per
                    // kind of failure, then at DEBUG; its message (which may quote the request) only in the trace
                    String kind = e.getClass().getName();
                    if (answeredThenFailed.size() < 64 && answeredThenFailed.add(kind)) {
                        log.warn("Idempotent request {} {} was answered without running its handler, and then failed"
                                + " ({}); sending the decided answer. Later such failures are logged at DEBUG",
                                request.getMethod(), loggedPath(request), kind, e);
                    } else {
                        log.debug("Idempotent request {} {} was answered without running its handler, and then failed"
                                + " ({}); sending the decided answer", request.getMethod(), loggedPath(request), kind,
                                e);
                    }
                } else if (exchange.execution() != null && request.isAsyncStarted()) {
                    // the handler started async processing and then failed: passed on, the failure would reach the
                    // container with async processing started, and Tomcat then ends neither (the request stays open,
                    // and holds up the server's graceful shutdown). Answered below, as a handler that went async is
                    log.warn("Idempotent request {} {} started async processing and then failed: {}",
                            request.getMethod(), loggedPath(request), e.toString(), e);
                } else {
                    throw e;
                }
            }
            finish(exchange, request);
        } finally {
            try {
                exchange.abandon(); // no transaction outlives the request, whatever happened above
                request.removeAttribute(IdempotentExchange.ATTRIBUTE);
            } finally {
                exchange.closeResources();
            }
        }
    }

    private void finish(IdempotentExchange exchange, HttpServletRequest request) throws IOException {
        DeferredResponse response = exchange.response();
        if (exchange.answer() != null) {
            response.send(exchange.answer(), exchange.answerHeaders());
            return;
        }
        IdempotencyEngine.Execution execution = exchange.execution();
        if (execution == null) {
            if (response.isCapturing()) {
                // an attempt ran and ended (rolled back), and the next one was never claimed: its claim failed with
                // an exception the application's exception handling answered (a retry of Spring's @Retryable whose
                // stale-claim resolver threw). That answer is the client's; nothing is left to commit
                if (response.holdsTheWholeBody()) {
                    response.sendCaptured();
                } else {
                    sendTooLarge(request, response, null);
                }
            }
            return; // otherwise not an idempotent request: everything has passed through already
        }
        if (request.isAsyncStarted()) {
            // an async answer the startup checks did not recognise: it would be written after the transaction had
            // to end, into the capture, and the client would get an empty 200 for effects that were rolled back
            exchange.request().answeredInsteadOfAsync();
            abandonForTheAnswer(exchange, request);
            log.error("Idempotent request {} {} started async processing, which @Idempotent does not support;"
                    + " rolled back{}", request.getMethod(), loggedPath(request), claimLeftProcessing(execution));
            // and the connection ends with it: the async work may outlive the request, and what it kept of the
            // connection must meet no later request on it (HTTP/2 has no such header, and a stream per request)
            try {
                response.send(answeredAsynchronously(problems, execution, request.getRequestURI()),
                        request.getProtocol().startsWith("HTTP/1.") ? CLOSE_CONNECTION : NO_HEADERS);
            } finally {
                // also when the answer cannot be sent (the client went away): the guarded async context ignores the
                // application's own complete() since the answer was decided, so no one else would end it
                completeAsync(request);
            }
            return;
        }
        if (!response.holdsTheWholeBody()) {
            // written past the cap under a status that is stored: dropped as it came, as an answer too large to be
            // stored is not held in memory whole, and so too large to be sent as well, whatever became of it since
            abandonForTheAnswer(exchange, request);
            sendTooLarge(request, response, execution);
            return;
        }
        if (exchange.handlerFailed() || response.isErrorSent() || renderingFailed(request)) {
            abandonForTheAnswer(exchange, request);
            response.sendCaptured();
            return;
        }
        if (response.getStatus() >= 400 && response.getStatus() < 500 && execution.isRollbackOnly()) {
            // the handler refused the request after a failure it caught had left its transaction able only to roll
            // back (a @Transactional method it called threw): nothing of it can be kept, so the refusal is sent as
            // one its exception handler made — not stored, a retry runs again — not replaced by a failed commit
            abandonForTheAnswer(exchange, request);
            response.sendCaptured();
            return;
        }
        if (response.bodyLength() > maxStoredBodySize && exchange.storagePolicy().isStorable(response.getStatus())) {
            // held whole, as its status was one that is not stored until the handler set this one
            abandonForTheAnswer(exchange, request);
            sendTooLarge(request, response, execution);
            return;
        }
        if (exchange.storagePolicy().isStorable(response.getStatus())
                && response.headerSectionLowerBound() > maxHeaderSection - HEADER_SECTION_MARGIN) {
            // the container refuses to send a header section above its limit, after the commit: the effects would be
            // kept, and this answer or every replay of it (which carries one header more) would never reach the client.
            // Whatever the protocol of this request: a server serving HTTP/2 serves HTTP/1.1 on the same port, and a
            // retry may come over it
            abandonForTheAnswer(exchange, request);
            log.error("Idempotent request {} {} answered headers of at least {} bytes, more than the server sends ({})"
                    + " less {} bytes for the headers it and a replay add; rolled back{}", request.getMethod(),
                    loggedPath(request), response.headerSectionLowerBound(), maxHeaderSection,
                    HEADER_SECTION_MARGIN, claimLeftProcessing(execution));
            response.send(problems.render(ProblemResponses.Problem.RESPONSE_TOO_LARGE,
                    "The answer's headers are too large for this server to send it and its replays, so the request"
                            + " was rolled back and nothing of it was kept." + afterRollback(execution),
                    request.getRequestURI()));
            return;
        }
        StoredResponse captured = response.toStoredResponse(replayedHeaders);
        try {
            execution.finish(captured, exchange.storagePolicy());
        } catch (LeaseLostException e) {
            // what it did (a third party's answer) is discarded: the claim it names is the one the new holder resolves
            log.warn("Idempotent request {} {} ({}) finished after its lease was taken over; its result was discarded",
                    request.getMethod(), loggedPath(request), claim(execution));
            response.send(problems.render(ProblemResponses.Problem.LEASE_LOST,
                    "This request took longer than its lease and another attempt took the key over, so its result"
                            + " was not recorded. Retry with the same key: the retry gets the result the new holder"
                            + " records, and 409 while that holder is still deciding it.",
                    request.getRequestURI()), new StoredResponse.Header("Retry-After", "1"));
            return;
        } catch (CommitFailedException e) {
            if (e.abortedBeforeTheAnswer() && response.getStatus() >= 400 && response.getStatus() < 500) {
                // the handler refused the request after a failed statement of its own it caught: PostgreSQL aborted
                // the transaction, which Spring does not know, and the answer's write failed on it. As for a
                // transaction marked rollback-only, the refusal is sent, not stored, and a retry runs again
                response.sendCaptured();
                return;
            }
            // a lost connection (or a failed commit whose record could not be read back) leaves the commit's
            // outcome unknown: the line must not say it failed
            log.warn("Idempotent request {} {} ({}) {}; answering 500", request.getMethod(), loggedPath(request),
                    claim(execution), e.outcomeUnknown()
                            ? "could not confirm its commit (whether it committed is unknown)"
                            : "failed to commit", e);
            response.send(problems.render(ProblemResponses.Problem.COMMIT_FAILED, e.outcomeUnknown()
                    ? "Whether the request's effects were committed could not be confirmed (the connection to the"
                            + " database was lost while they were being committed, say), so whether they were kept is"
                            + " unknown. Retry with the same key: if they were kept, the retry is answered with this"
                            + " request's answer;" + otherwise(execution)
                    : "The request's effects could not be committed, so none were kept." + afterRollback(execution),
                    request.getRequestURI()));
            return;
        }
        response.sendCaptured();
    }

    /** @param execution the request's execution, null when none is left (its next attempt was never claimed) */
    private void sendTooLarge(HttpServletRequest request, DeferredResponse response,
                              IdempotencyEngine.Execution execution) throws IOException {
        log.error("Idempotent request {} {} answered {} bytes, more than idempotency.max-stored-body-size ({});"
                + " rolled back{}", request.getMethod(), loggedPath(request), response.bodyLength(),
                maxStoredBodySize, execution == null ? "" : claimLeftProcessing(execution));
        response.send(problems.render(ProblemResponses.Problem.RESPONSE_TOO_LARGE,
                "The answer is larger than the largest answer this service stores for replay, so the request"
                        + " was rolled back and nothing of it was kept."
                        + (execution == null ? "" : afterRollback(execution)),
                request.getRequestURI()));
    }

    /**
     * The answer to a request whose handler answered asynchronously (it started async processing, or returned a value
     * Spring MVC would complete on another thread): its effects were rolled back, as they could not be committed with
     * its answer.
     */
    static StoredResponse answeredAsynchronously(ProblemResponses problems, IdempotencyEngine.Execution execution,
                                                 String instance) {
        return problems.render(ProblemResponses.Problem.COMMIT_FAILED,
                "The handler answered asynchronously, which an idempotent endpoint cannot do: its effects could not be"
                        + " committed with its answer, so none were kept." + afterRollback(execution), instance);
    }

    /**
     * Ends the async processing of a request answered without it: nothing written on its behalf can reach the client
     * any more (the answer is held), and left open the request, and the connection its answer closes, would last
     * until the async timeout (never, for an emitter without one). The application may have completed it itself.
     */
    private static void completeAsync(HttpServletRequest request) {
        try {
            request.getAsyncContext().complete();
        } catch (IllegalStateException completedAlready) {
            log.debug("The async processing of {} {} had ended already", request.getMethod(), loggedPath(request));
        }
    }

    /**
     * Rolls back a request whose answer is sent, not stored: its captured answer (its exception handler's, a
     * {@code sendError}), or the problem that says why it was not stored (too large, async). A rollback that fails —
     * the connection was lost, often why the request failed — kept nothing either (the database ends the transaction
     * with its session): it is logged, and the answer is sent all the same, instead of an error page in its place.
     */
    private static void abandonForTheAnswer(IdempotentExchange exchange, HttpServletRequest request) {
        try {
            exchange.abandon();
        } catch (Exception e) { // also a checked exception a store in Kotlin passes on undeclared
            log.warn("Idempotent request {} {} could not be rolled back (nothing of it was committed); sending its"
                    + " answer", request.getMethod(), loggedPath(request), e);
        }
    }

    /**
     * Whether Spring MVC handled an exception raised after the handler returned (writing its answer: no converter for
     * the Accept header, a serialization failure; an interceptor's {@code postHandle}), or met one that none of its
     * exception handlers resolved, or that came after them (a view that failed to render), and that a filter after
     * this one answered (a {@code @PostAuthorize} refusal answered by Spring Security's chain ordered after this
     * filter, an error filter of the application's): the answer is the exception handler's or the filter's, not the
     * outcome of the handler, whatever its status.
     * <p>
     * An {@code IOException} in the servlet error attribute, with neither of the others, is the container's note that
     * the client went away: Tomcat sets one on a request whose HTTP/2 stream the client reset (so that a read listener
     * learns of it), while the handler runs on. That is the client's failure, not the answer's: the handler's outcome
     * stands and is committed, and the client's retry is answered with it, as over HTTP/1.1, where a client that
     * closed its connection is only noticed when the answer is written. An exception Spring MVC handled, an
     * {@code IOException} among them, is noted in the other two.
     */
    private static boolean renderingFailed(HttpServletRequest request) {
        Object error = request.getAttribute(WebUtils.ERROR_EXCEPTION_ATTRIBUTE);
        return request.getAttribute(DispatcherServlet.EXCEPTION_ATTRIBUTE) != null
                || (error != null && !(error instanceof IOException))
                || request.getAttribute(RequestAnsweredExceptionResolver.EXCEPTION_ATTRIBUTE) != null;
    }

    /**
     * The claim of {@code execution}, as the table holds it, for a line the operator may have to follow up (in the
     * table, or with a third party). Its identity only: neither the request nor the key derived for the third party.
     */
    /**
     * The request's path as the library's log lines name it: as the container gives it (undecoded), on one line
     * whatever it holds, as {@link ScopedKey#printable} writes a key. A container that takes raw UTF-8 in the path
     * (Jetty) passes on what a path parameter carries, NEL or a right-to-left override among it.
     */
    static String loggedPath(HttpServletRequest request) {
        return ScopedKey.printable(request.getRequestURI());
    }

    private static String claim(IdempotencyEngine.Execution execution) {
        return "the claim of " + execution.key().describe();
    }

    /**
     * For a line that says an intent-first request was rolled back: its committed claim, which stays
     * {@code PROCESSING} for its resolver (the external call may have been made), so that an operator can match the
     * line with the resolver's; nothing in one-transaction mode, where no claim is left.
     */
    static String claimLeftProcessing(IdempotencyEngine.Execution execution) {
        return execution.mode() == IdempotencyMode.INTENT_FIRST
                ? "; " + claim(execution) + " stays PROCESSING for its resolver" : "";
    }

    /** What a retry meets when a commit whose outcome is unknown did not happen. */
    private static String otherwise(IdempotencyEngine.Execution execution) {
        return execution.mode() == IdempotencyMode.INTENT_FIRST
                ? " if not, it is answered 409 until the claim's lease runs out and its outcome is resolved, because"
                        + " an external call may have been made."
                : " if not, it runs again.";
    }

    /**
     * What a client may do after its request was rolled back. In intent-first mode the claim was committed before the
     * handler's external call, which may have happened: the claim stays for the resolver, as after any unknown outcome.
     */
    private static String afterRollback(IdempotencyEngine.Execution execution) {
        return execution.mode() == IdempotencyMode.INTENT_FIRST
                ? " The key stays claimed until the claim's lease runs out and its outcome is resolved, because an"
                        + " external call may have been made: a retry with the same key is answered 409 until then."
                : " It is safe to retry with the same key.";
    }
}
