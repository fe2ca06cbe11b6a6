package io.idempotency.spring;

import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import org.springframework.web.servlet.HandlerInterceptor;
import org.springframework.web.servlet.ModelAndView;
import org.springframework.web.servlet.View;

/**
 * Renders no view for a request the {@code @Idempotent} advice answered itself (a replay or a refusal). The handler
 * did not run, so a controller that answers with views returns no view name, and Spring MVC would render the view it
 * derives from the request's path: a forward, which ends the response before the filter can send the answer, or a
 * template that does not exist, whose failure escapes the filter. Either way the client would not get the answer.
 * <p>
 * It also notes on the request an exception that Spring MVC's handling ended with after its exception handlers
 * (a view that failed to render), which none of them saw
 * ({@link RequestAnsweredExceptionResolver#EXCEPTION_ATTRIBUTE}): the answer is then not the outcome of the handler,
 * even when a filter between the {@link IdempotencyFilter} and the dispatcher answers the exception without passing
 * it on.
 */
final class AnsweredRequestInterceptor implements HandlerInterceptor {

    /** Writes nothing: the filter sends the answer after the chain. */
    private static final View NOTHING = (model, request, response) -> { };

    @Override
    public void postHandle(HttpServletRequest request, HttpServletResponse response, Object handler,
                           ModelAndView modelAndView) {
        if (modelAndView != null
                && request.getAttribute(IdempotentExchange.ATTRIBUTE) instanceof IdempotentExchange exchange
                && exchange.answer() != null) {
            modelAndView.setView(NOTHING);
        }
    }

    @Override
    public void afterCompletion(HttpServletRequest request, HttpServletResponse response, Object handler,
                                Exception ex) {
        if (ex != null && request.getAttribute(RequestAnsweredExceptionResolver.EXCEPTION_ATTRIBUTE) == null) {
            request.setAttribute(RequestAnsweredExceptionResolver.EXCEPTION_ATTRIBUTE, ex);
        }
    }
}
