package io.idempotency.spring;

import io.idempotency.core.StoragePolicy;
import io.idempotency.core.StoredResponse;
import jakarta.servlet.ReadListener;
import jakarta.servlet.ServletInputStream;
import jakarta.servlet.http.HttpServletRequestWrapper;
import jakarta.servlet.http.HttpServletResponseWrapper;
import org.junit.jupiter.api.Test;
import org.springframework.mock.web.MockHttpServletRequest;
import org.springframework.mock.web.MockHttpServletResponse;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The request and response wrappers on their own, for what an HTTP test cannot reach cheaply. */
class RequestAndResponseWrappersTest {

    private static final long MAX_STORED_BODY_SIZE = 1024 * 1024;

    @Test
    void aBodyLargerThan2GbPassesThroughWhole() throws Exception {
        long size = (1L << 31) + (4L << 20);
        BodyRecordingRequest request = new BodyRecordingRequest(new SizedBodyRequest(size), 1024);
        ServletInputStream in = request.getInputStream();
        byte[] buffer = new byte[1 << 20];
        long read = 0;
        int n;
        while ((n = in.read(buffer, 0, buffer.length)) != -1) {
            read += n;
        }
        assertThat(read).isEqualTo(size);
    }

    @Test
    void whatTheFingerprintReadAheadIsStillServedToTheHandler() throws Exception {
        MockHttpServletRequest mock = new MockHttpServletRequest("POST", "/x");
        mock.setContent("0123456789".getBytes(StandardCharsets.UTF_8));
        BodyRecordingRequest request = new BodyRecordingRequest(mock, 1024);
        ServletInputStream in = request.getInputStream();
        assertThat(in.read()).isEqualTo('0'); // the handler's argument started reading

        assertThat(new String(request.body(), StandardCharsets.UTF_8)).isEqualTo("0123456789");

        assertThat(new String(in.readAllBytes(), StandardCharsets.UTF_8)).isEqualTo("123456789");
        assertThat(in.read()).isEqualTo(-1);
        assertThat(in.isFinished()).isTrue();
    }

    @Test
    void eachRedirectReachesTheSameMethodOfTheWrapperBelowWhileNotCapturing() throws Exception {
        List<String> calls = new ArrayList<>();
        HttpServletResponseWrapper below = new HttpServletResponseWrapper(new MockHttpServletResponse()) {
            @Override
            public void sendRedirect(String location) throws IOException {
                calls.add("sendRedirect(location)"); // e.g. a security wrapper that writes its headers here
                super.sendRedirect(location);
            }
        };
        new DeferredResponse(below, MAX_STORED_BODY_SIZE).sendRedirect("/elsewhere");
        assertThat(calls).containsExactly("sendRedirect(location)");
    }

    @Test
    void aRedirectWhileCapturingIsKeptWithItsStatus() throws Exception {
        MockHttpServletResponse container = new MockHttpServletResponse();
        DeferredResponse response = new DeferredResponse(container, MAX_STORED_BODY_SIZE);
        response.capture(StoragePolicy.DEFAULT::isStorable);

        response.sendRedirect("/orders/1", 303);

        assertThat(container.isCommitted()).isFalse();
        assertThat(container.getRedirectedUrl()).isNull();
        assertThat(response.toStoredResponse(java.util.Set.of("location")).status()).isEqualTo(303);
        assertThat(response.getHeader("Location")).isEqualTo("/orders/1");
    }

    @Test
    void aResetWhileCapturingStartsTheAnswerOverFromAPlain200() throws Exception {
        MockHttpServletResponse container = new MockHttpServletResponse();
        DeferredResponse response = new DeferredResponse(container, MAX_STORED_BODY_SIZE);
        response.capture(StoragePolicy.DEFAULT::isStorable);
        response.setStatus(201);
        response.setHeader("Location", "/orders/1");
        response.getWriter().write("created");

        response.reset(); // as an exception handler does before it answers
        response.getWriter().write("again");

        StoredResponse stored = response.toStoredResponse(java.util.Set.of("location"));
        assertThat(stored.status()).as("the status set before the reset is gone, as the container forgets it")
                .isEqualTo(200);
        assertThat(response.getStatus()).isEqualTo(200);
        assertThat(stored.headers()).isEmpty();
        assertThat(stored.body()).isEqualTo("again".getBytes(StandardCharsets.ISO_8859_1));
        assertThat(container.isCommitted()).isFalse();
    }

    @Test
    void anErrorSentWhileCapturingCommitsTheResponseAndFixesItsStatus() throws Exception {
        MockHttpServletResponse container = new MockHttpServletResponse();
        DeferredResponse response = new DeferredResponse(container, MAX_STORED_BODY_SIZE);
        response.capture(StoragePolicy.DEFAULT::isStorable);
        assertThat(response.isCommitted()).isFalse();

        response.sendError(404);

        // as the container's answer would be: nothing may be written or reset after it
        assertThat(response.isCommitted()).isTrue();
        assertThat(container.isCommitted()).as("held until the request's transaction ends").isFalse();
        response.setStatus(200); // ignored, as the container ignores it once the error is sent
        assertThat(response.getStatus()).isEqualTo(404);
        assertThat(response.toStoredResponse(java.util.Set.of()).status()).isEqualTo(404);
    }

    @Test
    void theStoredContentTypeSaysHowTheBytesWereEncoded() throws Exception {
        DeferredResponse response = new DeferredResponse(new MockHttpServletResponse(), MAX_STORED_BODY_SIZE);
        response.capture(StoragePolicy.DEFAULT::isStorable);
        response.setContentType("text/plain");
        response.getWriter().write("caf\u00e9");
        response.setContentType("text/plain;charset=UTF-8"); // too late: the writer encodes ISO-8859-1 already
        response.setCharacterEncoding("UTF-16");
        response.getWriter().flush();

        var stored = response.toStoredResponse(java.util.Set.of("content-type"));
        assertThat(stored.headers()).extracting(h -> h.value().toLowerCase(java.util.Locale.ROOT).replace(" ", ""))
                .containsExactly("text/plain;charset=iso-8859-1");
        assertThat(stored.body()).isEqualTo("caf\u00e9".getBytes(StandardCharsets.ISO_8859_1));

        response.reset();
        response.setCharacterEncoding("UTF-8");
        response.setContentType("text/plain");
        response.getWriter().write("\u20ac");
        response.setCharacterEncoding((String) null);
        response.getWriter().flush();
        stored = response.toStoredResponse(java.util.Set.of("content-type"));
        assertThat(stored.body()).as("a writer made after reset() uses the new encoding")
                .isEqualTo("\u20ac".getBytes(StandardCharsets.UTF_8));
        assertThat(stored.headers()).extracting(h -> h.value().toLowerCase(java.util.Locale.ROOT).replace(" ", ""))
                .containsExactly("text/plain;charset=utf-8");
    }

    @Test
    void textIsEncodedWithTheEncodingTheContainerHadBeforeTheCapture() throws Exception {
        MockHttpServletResponse container = new MockHttpServletResponse();
        container.setCharacterEncoding("UTF-8"); // what a CharacterEncodingFilter forcing the response encoding does
        DeferredResponse response = new DeferredResponse(container, MAX_STORED_BODY_SIZE);
        response.capture(StoragePolicy.DEFAULT::isStorable);
        response.setContentType("text/plain");
        response.getWriter().write("caf\u00e9 \u20ac");

        var stored = response.toStoredResponse(java.util.Set.of("content-type"));
        assertThat(stored.body()).isEqualTo("caf\u00e9 \u20ac".getBytes(StandardCharsets.UTF_8));
        assertThat(stored.headers()).extracting(h -> h.value().toLowerCase(java.util.Locale.ROOT).replace(" ", ""))
                .containsExactly("text/plain;charset=utf-8");
    }

    @Test
    void aWriterMakesTheEncodingItUsesPartOfTheStoredContentType() throws Exception {
        DeferredResponse response = new DeferredResponse(new MockHttpServletResponse(), MAX_STORED_BODY_SIZE);
        response.capture(StoragePolicy.DEFAULT::isStorable);
        response.setContentType("text/plain");
        response.getWriter().write("caf\u00e9");

        var stored = response.toStoredResponse(java.util.Set.of("content-type"));
        assertThat(stored.body()).isEqualTo("caf\u00e9".getBytes(StandardCharsets.ISO_8859_1));
        assertThat(stored.headers()).as("as the container sends it, so that a replay elsewhere decodes it alike")
                .extracting(h -> h.value().toLowerCase(java.util.Locale.ROOT).replace(" ", ""))
                .containsExactly("text/plain;charset=iso-8859-1");
    }

    @Test
    void anAnswerTooLongToBeStoredIsCountedNotHeld() throws Exception {
        // 3 GiB: an answer held whole in memory would not even fit one array
        DeferredResponse response = new DeferredResponse(new MockHttpServletResponse(), MAX_STORED_BODY_SIZE);
        response.capture(StoragePolicy.DEFAULT::isStorable);
        byte[] chunk = new byte[1024 * 1024];
        for (int i = 0; i < 3 * 1024; i++) {
            response.getOutputStream().write(chunk);
        }
        response.getOutputStream().write('x');

        assertThat(response.bodyLength()).isEqualTo(3L * 1024 * 1024 * 1024 + 1);
        assertThat(response.holdsTheWholeBody()).isFalse();
        assertThatThrownBy(() -> response.toStoredResponse(java.util.Set.of()))
                .isInstanceOf(IllegalStateException.class).hasMessageContaining("is not held");
    }

    @Test
    void anAnswerWhoseStatusIsNotStoredIsHeldWholePastTheLimit() throws Exception {
        // it is sent as the handler wrote it, whatever its length
        MockHttpServletResponse container = new MockHttpServletResponse();
        DeferredResponse response = new DeferredResponse(container, MAX_STORED_BODY_SIZE);
        response.capture(StoragePolicy.DEFAULT::isStorable);
        response.setStatus(503);
        response.getOutputStream().write(new byte[(int) MAX_STORED_BODY_SIZE + 1]);

        assertThat(response.holdsTheWholeBody()).isTrue();
        response.sendCaptured();
        assertThat(container.getStatus()).isEqualTo(503);
        assertThat(container.getContentAsByteArray()).hasSize((int) MAX_STORED_BODY_SIZE + 1);
    }

    @Test
    void aBodyDroppedPastTheLimitIsGoneForAStatusSetAfterItAndBackAfterAReset() throws Exception {
        DeferredResponse response = new DeferredResponse(new MockHttpServletResponse(), MAX_STORED_BODY_SIZE);
        response.capture(StoragePolicy.DEFAULT::isStorable);
        response.getOutputStream().write(new byte[(int) MAX_STORED_BODY_SIZE + 1]);
        response.setStatus(503);
        assertThat(response.holdsTheWholeBody()).as("dropped while its status was one that is stored").isFalse();

        response.resetBuffer();
        response.setStatus(201);
        response.getOutputStream().write("{\"id\":1}".getBytes(StandardCharsets.ISO_8859_1));

        assertThat(response.holdsTheWholeBody()).isTrue();
        assertThat(response.bodyLength()).isEqualTo(8);
        assertThat(response.toStoredResponse(java.util.Set.of()).body())
                .isEqualTo("{\"id\":1}".getBytes(StandardCharsets.ISO_8859_1));
    }

    /** A request whose body is {@code size} bytes, made up on the fly. */
    private static final class SizedBodyRequest extends HttpServletRequestWrapper {
        private final long size;

        SizedBodyRequest(long size) {
            super(new MockHttpServletRequest("POST", "/upload"));
            this.size = size;
        }

        @Override
        public long getContentLengthLong() {
            return size;
        }

        @Override
        public ServletInputStream getInputStream() {
            return new ServletInputStream() {
                private long left = size;

                @Override
                public int read() {
                    if (left == 0) {
                        return -1;
                    }
                    left--;
                    return 'x';
                }

                @Override
                public int read(byte[] b, int off, int len) {
                    if (left == 0) {
                        return -1;
                    }
                    int n = (int) Math.min(len, left);
                    left -= n;
                    return n; // the bytes' values do not matter here
                }

                @Override
                public boolean isFinished() {
                    return left == 0;
                }

                @Override
                public boolean isReady() {
                    return true;
                }

                @Override
                public void setReadListener(ReadListener listener) {
                    throw new UnsupportedOperationException();
                }
            };
        }
    }
}
