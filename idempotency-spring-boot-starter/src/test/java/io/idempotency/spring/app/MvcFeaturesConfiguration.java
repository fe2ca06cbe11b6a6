package io.idempotency.spring.app;

import io.idempotency.spring.IdempotencyFilter;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.boot.web.servlet.FilterRegistrationBean;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.core.MethodParameter;
import org.springframework.http.MediaType;
import org.springframework.http.converter.HttpMessageConverter;
import org.springframework.http.server.ServerHttpRequest;
import org.springframework.http.server.ServerHttpResponse;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.web.bind.annotation.ControllerAdvice;
import org.springframework.web.filter.ShallowEtagHeaderFilter;
import org.springframework.web.servlet.HandlerInterceptor;
import org.springframework.web.servlet.ModelAndView;
import org.springframework.web.servlet.config.annotation.InterceptorRegistry;
import org.springframework.web.servlet.config.annotation.WebMvcConfigurer;
import org.springframework.web.servlet.mvc.method.annotation.ResponseBodyAdvice;

import java.util.Map;

/**
 * What Spring MVC adds around {@link MvcFeaturesController}: a body advice that wraps (or fails), an interceptor
 * that refuses, adds a header and writes an audit row, and {@link ShallowEtagHeaderFilter} before and after the
 * idempotency filter.
 */
@Configuration(proxyBeanMethods = false)
public class MvcFeaturesConfiguration implements WebMvcConfigurer {

    private final JdbcClient jdbc;
    private final ObjectProvider<OrderService> service;

    public MvcFeaturesConfiguration(JdbcClient jdbc, ObjectProvider<OrderService> service) {
        this.jdbc = jdbc;
        this.service = service;
    }

    @Override
    public void addInterceptors(InterceptorRegistry registry) {
        registry.addInterceptor(new HandlerInterceptor() {
            @Override
            public boolean preHandle(HttpServletRequest request, HttpServletResponse response, Object handler)
                    throws Exception {
                if (request.getHeader("X-Refuse") != null) {
                    response.setStatus(403);
                    response.setContentType("text/plain");
                    response.getWriter().write("refused by interceptor");
                    return false;
                }
                return true;
            }

            @Override
            public void postHandle(HttpServletRequest request, HttpServletResponse response, Object handler,
                                   ModelAndView modelAndView) {
                response.setHeader("X-Post-Handle", "seen");
            }

            @Override
            public void afterCompletion(HttpServletRequest request, HttpServletResponse response, Object handler,
                                        Exception ex) {
                String audit = request.getHeader("X-Audit");
                if (audit != null) {
                    jdbc.sql("insert into orders (note) values (?)").param(audit).update();
                }
                if (request.getHeader("X-Audit-Fails") != null) {
                    jdbc.sql("insert into no_such_audit_table (note) values ('x')").update();
                }
            }
        }).addPathPatterns("/mvc/intercepted", "/mvc/intercepted/unavailable", "/mvc/unguarded/intercepted");
        // calls an @Idempotent service method once the handler's attempt has ended
        registry.addInterceptor(new HandlerInterceptor() {
            @Override
            public void postHandle(HttpServletRequest request, HttpServletResponse response, Object handler,
                                   ModelAndView modelAndView) {
                service.getObject().insert(request.getHeader("X-Post-Note"));
            }
        }).addPathPatterns("/mvc/post-handled");
    }

    @Bean
    FilterRegistrationBean<ShallowEtagHeaderFilter> etagBeforeIdempotency() {
        FilterRegistrationBean<ShallowEtagHeaderFilter> registration =
                new FilterRegistrationBean<>(new ShallowEtagHeaderFilter());
        registration.addUrlPatterns("/mvc/wrapped", "/mvc/unguarded/wrapped");
        registration.setOrder(IdempotencyFilter.ORDER - 1);
        return registration;
    }

    @Bean
    FilterRegistrationBean<ShallowEtagHeaderFilter> etagAfterIdempotency() {
        FilterRegistrationBean<ShallowEtagHeaderFilter> registration =
                new FilterRegistrationBean<>(new ShallowEtagHeaderFilter());
        registration.addUrlPatterns("/mvc/large", "/mvc/unguarded/large");
        registration.setOrder(IdempotencyFilter.ORDER + 1);
        return registration;
    }

    /** Wraps every answer of {@link MvcFeaturesController}; fails on the paths ending in {@code advice-fails}. */
    @ControllerAdvice(assignableTypes = MvcFeaturesController.class)
    public static class WrappingBodyAdvice implements ResponseBodyAdvice<Object> {

        @Override
        public boolean supports(MethodParameter returnType, Class<? extends HttpMessageConverter<?>> converterType) {
            return true;
        }

        @Override
        public Object beforeBodyWrite(Object body, MethodParameter returnType, MediaType selectedContentType,
                                      Class<? extends HttpMessageConverter<?>> selectedConverterType,
                                      ServerHttpRequest request, ServerHttpResponse response) {
            String path = request.getURI().getPath();
            if (path.endsWith("/advice-fails")) {
                throw new IllegalStateException("the advice refused the body");
            }
            if (path.endsWith("/wrapped")) {
                response.getHeaders().set("X-Wrapped", "yes");
                return Map.of("data", body, "wrapped", true);
            }
            return body;
        }
    }
}
