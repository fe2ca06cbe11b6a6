package io.idempotency.spring;

import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import org.springframework.core.Ordered;
import org.springframework.web.servlet.HandlerExceptionResolver;
import org.springframework.web.servlet.ModelAndView;

/**
 * Resolves a {@link RequestAnsweredException} before the application's exception handlers see it: it is no failure,
 * and the filter sends the answer the advice decided on. Renders nothing. Every other exception is noted on the
 * request ({@link #EXCEPTION_ATTRIBUTE}) and left to the application's exception handlers.
 */
final class RequestAnsweredExceptionResolver implements HandlerExceptionResolver, Ordered {

    /**
     * The exception Spring MVC's handling of the request ended with, whether an exception handler resolved it or
     * not: the answer is then not the outcome of the handler. One that none resolves leaves the servlet, and a filter
     * between the {@link IdempotencyFilter} and the servlet may answer it without passing it on (Spring Security's
     * chain, when it is ordered after the filter, answering a {@code @PostAuthorize} refusal with an access-denied
     * handler of its own). One raised after the exception handlers, which they never see (a view that failed to
     * render), is noted here too, by {@link AnsweredRequestInterceptor}.
     */
    static final String EXCEPTION_ATTRIBUTE = RequestAnsweredExceptionResolver.class.getName() + ".EXCEPTION";

    @Override
    public ModelAndView resolveException(HttpServletRequest request, HttpServletResponse response, Object handler,
                                         Exception ex) {
        if (ex instanceof RequestAnsweredException) {
            return new ModelAndView();
        }
        request.setAttribute(EXCEPTION_ATTRIBUTE, ex);
        return null;
    }

    @Override
    public int getOrder() {
        return Ordered.HIGHEST_PRECEDENCE;
    }
}
