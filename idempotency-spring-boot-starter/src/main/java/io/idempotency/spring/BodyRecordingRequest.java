package io.idempotency.spring;

import jakarta.servlet.ReadListener;
import jakarta.servlet.ServletInputStream;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletRequestWrapper;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.Charset;
import java.nio.charset.StandardCharsets;

/**
 * Keeps a copy of the request body as the application reads it, so the body can be fingerprinted after Spring MVC
 * has bound it to the handler's arguments, without consuming it first. The copy is capped: past the cap the
 * application still gets every byte, but {@link #body()} reports the overflow. Not thread-safe (one request).
 */
final class BodyRecordingRequest extends HttpServletRequestWrapper {

    /** Thrown by {@link #body()} when the body exceeds the cap. */
    static final class BodyTooLargeException extends Exception {
        BodyTooLargeException(long limit) {
            super("the request body is larger than " + limit + " bytes");
        }
    }

    private final int limit;
    private final ByteArrayOutputStream copy = new ByteArrayOutputStream();
    private boolean overflow;
    private RecordingStream stream;
    private BufferedReader reader;

    BodyRecordingRequest(HttpServletRequest request, int limit) {
        super(request);
        this.limit = limit;
    }

    @Override
    public ServletInputStream getInputStream() throws IOException {
        if (stream == null) {
            stream = new RecordingStream(super.getInputStream());
        }
        return stream;
    }

    @Override
    public BufferedReader getReader() throws IOException {
        if (reader == null) {
            String encoding = getCharacterEncoding();
            Charset charset = encoding == null ? StandardCharsets.ISO_8859_1 : Charset.forName(encoding);
            reader = new BufferedReader(new InputStreamReader(getInputStream(), charset));
        }
        return reader;
    }

    /**
     * The whole body: what the application read, plus the rest, which is read now.
     *
     * @throws BodyTooLargeException if the body is larger than the cap
     */
    byte[] body() throws IOException, BodyTooLargeException {
        long declared = getContentLengthLong();
        if (declared > limit) {
            throw new BodyTooLargeException(limit);
        }
        ServletInputStream in = getInputStream();
        if (!in.isFinished()) { // usually the handler's arguments have read it all already
            byte[] buffer = new byte[8192];
            while (!overflow && in.read(buffer) != -1) {
                // RecordingStream copies what passes
            }
        }
        if (overflow) {
            throw new BodyTooLargeException(limit);
        }
        return copy.toByteArray();
    }

    private void record(byte[] bytes, int offset, int length) {
        if (overflow || length <= 0) {
            return;
        }
        if (copy.size() + length > limit) {
            overflow = true;
            return;
        }
        copy.write(bytes, offset, length);
    }

    private final class RecordingStream extends ServletInputStream {

        private final ServletInputStream delegate;

        RecordingStream(ServletInputStream delegate) {
            this.delegate = delegate;
        }

        @Override
        public int read() throws IOException {
            int b = delegate.read();
            if (b >= 0 && !overflow) {
                if (copy.size() + 1 > limit) {
                    overflow = true;
                } else {
                    copy.write(b);
                }
            }
            return b;
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            int n = delegate.read(b, off, len);
            record(b, off, n);
            return n;
        }

        @Override
        public boolean isFinished() {
            return delegate.isFinished();
        }

        @Override
        public boolean isReady() {
            return delegate.isReady();
        }

        @Override
        public void setReadListener(ReadListener listener) {
            delegate.setReadListener(listener);
        }
    }
}
