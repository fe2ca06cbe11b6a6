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
 * A URL-rewriting filter before the idempotency filter: {@code /rewritten/x} is forwarded to {@code /x}. The
 * idempotency filter then wraps the forward, which is where the answer is sent.
 */
@Configuration(proxyBeanMethods = false)
public class RewriteFilterConfiguration {

    @Bean
    FilterRegistrationBean<OncePerRequestFilter> rewriteFilter() {
        FilterRegistrationBean<OncePerRequestFilter> registration = new FilterRegistrationBean<>(new OncePerRequestFilter() {
            @Override
            protected void doFilterInternal(HttpServletRequest request, HttpServletResponse response, FilterChain chain)
                    throws ServletException, IOException {
                request.getRequestDispatcher(request.getRequestURI().substring("/rewritten".length()))
                        .forward(request, response);
            }
        });
        registration.addUrlPatterns("/rewritten/*");
        registration.setOrder(IdempotencyFilter.ORDER - 5);
        return registration;
    }
}
