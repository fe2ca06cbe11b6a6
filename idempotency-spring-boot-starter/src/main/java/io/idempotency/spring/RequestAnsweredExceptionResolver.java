package io.idempotency.spring;

import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import org.springframework.core.Ordered;
import org.springframework.web.servlet.HandlerExceptionResolver;
import org.springframework.web.servlet.ModelAndView;

/**
 * Resolves a {@link RequestAnsweredException} before the application's exception handlers see it: it is no failure,
 * and the filter sends the answer the advice decided on. Renders nothing.
 */
final class RequestAnsweredExceptionResolver implements HandlerExceptionResolver, Ordered {

    @Override
    public ModelAndView resolveException(HttpServletRequest request, HttpServletResponse response, Object handler,
                                         Exception ex) {
        return ex instanceof RequestAnsweredException ? new ModelAndView() : null;
    }

    @Override
    public int getOrder() {
        return Ordered.HIGHEST_PRECEDENCE;
    }
}
