package io.idempotency.jpa.app;

import jakarta.servlet.Filter;
import jakarta.servlet.http.HttpServletRequest;
import org.springframework.boot.web.servlet.FilterRegistrationBean;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.core.Ordered;
import org.springframework.transaction.support.TransactionSynchronizationManager;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The outermost filter: after each request, records anything still bound to the container's thread — an
 * EntityManager, a connection, a transaction — which the next request on that thread would inherit.
 */
@Configuration(proxyBeanMethods = false)
public class ThreadBoundResources {

    /** What was left bound, one line per request. */
    public static final List<String> LEFT_BOUND = new CopyOnWriteArrayList<>();
    /** Requests whose filter chain has not unwound yet (the client may have its answer before that). */
    public static final AtomicInteger UNFINISHED = new AtomicInteger();

    @Bean
    FilterRegistrationBean<Filter> threadBoundResourcesFilter() {
        FilterRegistrationBean<Filter> registration = new FilterRegistrationBean<>((request, response, chain) -> {
            UNFINISHED.incrementAndGet();
            try {
                chain.doFilter(request, response);
            } finally {
                if (!TransactionSynchronizationManager.getResourceMap().isEmpty()
                        || TransactionSynchronizationManager.isSynchronizationActive()
                        || TransactionSynchronizationManager.isActualTransactionActive()) {
                    LEFT_BOUND.add(((HttpServletRequest) request).getRequestURI() + ": "
                            + TransactionSynchronizationManager.getResourceMap());
                }
                UNFINISHED.decrementAndGet();
            }
        });
        registration.setOrder(Ordered.HIGHEST_PRECEDENCE);
        return registration;
    }
}
