package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import org.junit.jupiter.api.Test;
import org.springframework.aop.framework.ProxyFactory;
import org.springframework.mock.web.MockHttpServletRequest;
import org.springframework.web.context.request.RequestContextHolder;
import org.springframework.web.context.request.ServletRequestAttributes;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The advisor of a context that serves no requests refuses calls made where no request is served; AspectJ's auto-proxy
 * creator applies a parent context's advisors to the beans of its web children too, whose {@code @Idempotent} handlers
 * run while a request is served: those calls go through, to the child's own advice.
 */
class OutsideRequestsAdvisorTest {

    static class Handler {
        @Idempotent
        public String charge() {
            return "charged";
        }

        public String plain() {
            return "plain";
        }
    }

    private static Handler advised() {
        ProxyFactory factory = new ProxyFactory(new Handler());
        factory.setProxyTargetClass(true);
        factory.addAdvisor(new OutsideRequestsAdvisor());
        return (Handler) factory.getProxy();
    }

    @Test
    void aCallWhereNoRequestIsServedIsRefused() {
        assertThatThrownBy(() -> advised().charge()).isInstanceOf(IllegalStateException.class)
                .hasMessageContaining("Handler.charge()").hasMessageContaining("called outside any HTTP request");
        assertThat(advised().plain()).isEqualTo("plain");
    }

    @Test
    void aCallWhileARequestIsServedGoesThrough() {
        RequestContextHolder.setRequestAttributes(new ServletRequestAttributes(new MockHttpServletRequest()));
        try {
            assertThat(advised().charge()).isEqualTo("charged");
        } finally {
            RequestContextHolder.resetRequestAttributes();
        }
    }
}
