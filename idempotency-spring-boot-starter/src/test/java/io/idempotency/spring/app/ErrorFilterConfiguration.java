package io.idempotency.spring.app;

import io.idempotency.spring.IdempotencyFilter;
import jakarta.servlet.FilterChain;
import jakarta.servlet.ServletException;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import org.springframework.boot.web.servlet.FilterRegistrationBean;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.web.filter.OncePerRequestFilter;

import java.io.IOException;

/**
 * An error filter of the application's after the idempotency filter (where a filter bean without an order runs): it
 * answers an exception that leaves the dispatcher, as such filters do, with 400 when a refused argument caused it;
 * and it fails itself once the chain has returned, as a filter with a bug of its own would. Each only for requests
 * that ask for it ({@code X-Filter-Answers-Errors}, {@code X-Filter-Fails}), so that other tests meet the exceptions
 * as they are.
 */
@Configuration(proxyBeanMethods = false)
public class ErrorFilterConfiguration {

    @Bean
    FilterRegistrationBean<OncePerRequestFilter> errorFilter() {
        FilterRegistrationBean<OncePerRequestFilter> registration = new FilterRegistrationBean<>(new OncePerRequestFilter() {
            @Override
            protected void doFilterInternal(HttpServletRequest request, HttpServletResponse response, FilterChain chain)
                    throws ServletException, IOException {
                try {
                    chain.doFilter(request, response);
                } catch (ServletException | RuntimeException e) {
                    Throwable cause = e;
                    while (cause.getCause() != null) {
                        cause = cause.getCause();
                    }
                    if (request.getHeader("X-Filter-Answers-Errors") == null
                            || !(cause instanceof IllegalArgumentException)) {
                        throw e;
                    }
                    response.resetBuffer();
                    response.setStatus(HttpServletResponse.SC_BAD_REQUEST);
                    response.setContentType("application/json");
                    response.getWriter().write("{\"error\":\"refused by the error filter\"}");
                    return;
                }
                if (request.getHeader("X-Filter-Fails") != null) {
                    throw new IllegalStateException("the error filter failed after the chain");
                }
            }
        });
        registration.addUrlPatterns("/views/*");
        registration.setOrder(IdempotencyFilter.ORDER + 1);
        return registration;
    }
}
