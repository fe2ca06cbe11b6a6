package io.idempotency.spring.app;

import io.idempotency.core.Idempotent;
import io.idempotency.spring.IdempotencyFilter;
import jakarta.servlet.FilterChain;
import jakarta.servlet.ReadListener;
import jakarta.servlet.ServletException;
import jakarta.servlet.ServletInputStream;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletRequestWrapper;
import jakarta.servlet.http.HttpServletResponse;
import org.springframework.boot.web.servlet.FilterRegistrationBean;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.http.HttpStatus;
import org.springframework.jdbc.core.simple.JdbcClient;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestHeader;
import org.springframework.web.bind.annotation.RequestMapping;
import org.springframework.web.bind.annotation.ResponseStatus;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.filter.OncePerRequestFilter;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.Collections;
import java.util.Enumeration;
import java.util.Map;
import java.util.zip.GZIPInputStream;

/**
 * Request bodies sent with {@code Content-Encoding: gzip}, decompressed for the handler by a filter of the application
 * ordered before the idempotency filter ({@code /compressed/before/…}) or after it ({@code /compressed/after/…}), or by
 * the handler itself ({@code /compressed/self}).
 */
@Configuration(proxyBeanMethods = false)
public class CompressedRequestsConfiguration {

    @Bean
    FilterRegistrationBean<OncePerRequestFilter> decompressBeforeIdempotency() {
        FilterRegistrationBean<OncePerRequestFilter> registration = new FilterRegistrationBean<>(new Decompressing());
        registration.addUrlPatterns("/compressed/before/*");
        registration.setOrder(IdempotencyFilter.ORDER - 1);
        return registration;
    }

    @Bean
    FilterRegistrationBean<OncePerRequestFilter> decompressAfterIdempotency() {
        FilterRegistrationBean<OncePerRequestFilter> registration = new FilterRegistrationBean<>(new Decompressing());
        registration.addUrlPatterns("/compressed/after/*");
        registration.setOrder(IdempotencyFilter.ORDER + 1);
        return registration;
    }

    /**
     * Hands the handler the decompressed body of a gzip request; leaves the request's headers as they are, but for the
     * length, which was the compressed body's.
     */
    static final class Decompressing extends OncePerRequestFilter {

        @Override
        protected void doFilterInternal(HttpServletRequest request, HttpServletResponse response, FilterChain chain)
                throws ServletException, IOException {
            String coding = request.getHeader("Content-Encoding");
            boolean gzip = "gzip".equalsIgnoreCase(coding);
            if (!gzip && !"deflate".equalsIgnoreCase(coding)) {
                chain.doFilter(request, response);
                return;
            }
            chain.doFilter(new HttpServletRequestWrapper(request) {
                private ServletInputStream stream;

                @Override
                public ServletInputStream getInputStream() throws IOException {
                    if (stream == null) {
                        stream = new Decompressed(gzip ? new GZIPInputStream(super.getInputStream())
                                : inflating(super.getInputStream().readAllBytes()));
                    }
                    return stream;
                }

                @Override
                public int getContentLength() {
                    return -1;
                }

                @Override
                public long getContentLengthLong() {
                    return -1;
                }

                // the length sent is the compressed one: a converter reading that many bytes would cut the body short
                @Override
                public String getHeader(String name) {
                    return isContentLength(name) ? null : super.getHeader(name);
                }

                @Override
                public Enumeration<String> getHeaders(String name) {
                    return isContentLength(name) ? Collections.emptyEnumeration() : super.getHeaders(name);
                }

                @Override
                public Enumeration<String> getHeaderNames() {
                    return Collections.enumeration(Collections.list(super.getHeaderNames()).stream()
                            .filter(name -> !isContentLength(name)).toList());
                }

                @Override
                public int getIntHeader(String name) {
                    return isContentLength(name) ? -1 : super.getIntHeader(name);
                }
            }, response);
        }
    }

    private static boolean isContentLength(String name) {
        return "Content-Length".equalsIgnoreCase(name);
    }

    /** HTTP's deflate as lenient decoders read it: zlib-wrapped as specified, or the raw deflate some clients send. */
    static InputStream inflating(byte[] body) {
        boolean zlib = body.length >= 2 && (body[0] & 0x0f) == 8 && (((body[0] & 0xff) << 8) | (body[1] & 0xff)) % 31 == 0;
        return new java.util.zip.InflaterInputStream(new java.io.ByteArrayInputStream(body),
                new java.util.zip.Inflater(!zlib));
    }

    private static final class Decompressed extends ServletInputStream {

        private final InputStream in;
        private boolean finished;

        Decompressed(InputStream in) {
            this.in = in;
        }

        @Override
        public int read() throws IOException {
            int b = in.read();
            finished = b < 0;
            return b;
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            int n = in.read(b, off, len);
            finished = n < 0;
            return n;
        }

        @Override
        public boolean isFinished() {
            return finished;
        }

        @Override
        public boolean isReady() {
            return true;
        }

        @Override
        public void setReadListener(ReadListener listener) {
            throw new UnsupportedOperationException();
        }
    }

    @RestController
    @RequestMapping("/compressed")
    public static class CompressedRequestsController {

        private final JdbcClient jdbc;

        public CompressedRequestsController(JdbcClient jdbc) {
            this.jdbc = jdbc;
        }

        @PostMapping({"/before/orders", "/after/orders"})
        @Idempotent
        @ResponseStatus(HttpStatus.CREATED)
        public Map<String, Object> order(@RequestBody OrderController.OrderRequest request) {
            return Map.of("id", insert(request.note()));
        }

        @PostMapping({"/before/text", "/after/text"})
        @Idempotent
        @ResponseStatus(HttpStatus.CREATED)
        public Map<String, Object> text(@RequestBody String note) {
            return Map.of("id", insert(note));
        }

        /** Decompresses its body itself. */
        @PostMapping("/self")
        @Idempotent
        @ResponseStatus(HttpStatus.CREATED)
        public Map<String, Object> self(InputStream body,
                                        @RequestHeader(name = "Content-Encoding", required = false) String coding)
                throws IOException {
            InputStream in = "gzip".equalsIgnoreCase(coding) ? new GZIPInputStream(body) : body;
            return Map.of("id", insert(new String(in.readAllBytes(), StandardCharsets.UTF_8)));
        }

        private long insert(String note) {
            return jdbc.sql("insert into orders (note) values (?) returning id").param(note).query(Long.class).single();
        }
    }
}
