package io.idempotency.spring;

import jakarta.servlet.ServletOutputStream;
import jakarta.servlet.WriteListener;
import jakarta.servlet.http.Cookie;
import jakarta.servlet.http.HttpServletResponse;
import jakarta.servlet.http.HttpServletResponseWrapper;

import java.io.IOException;
import java.io.PrintWriter;
import java.io.Writer;
import java.nio.ByteBuffer;
import java.nio.charset.Charset;
import java.util.Locale;
import java.util.Map;
import java.util.function.Supplier;

/**
 * The response the async context of a request the library may answer itself hands out (see
 * {@link GuardedAsyncContext}), for the application's async work to keep. Once the library has answered the request,
 * nothing the work does through it, or through a stream or writer it took from it before, reaches the container any
 * more ({@link IllegalStateException}): the container may serve another request with the objects behind it by then
 * (Jetty, over HTTP/2, writes what a stale response is given into the answer of the connection's next stream; an
 * HTTP/1.x connection is closed with the answer). Until then everything is the container's own — unless
 * {@code requireUnanswered} refuses it earlier (the container's own response, whose output would reach the client
 * ahead of the library's answer).
 */
final class GuardedAsyncResponse extends HttpServletResponseWrapper {

    private final Runnable requireUnanswered;
    private ServletOutputStream stream;
    private PrintWriter writer;

    /** @param requireUnanswered throws {@link IllegalStateException} when nothing may be passed on any more */
    GuardedAsyncResponse(HttpServletResponse response, Runnable requireUnanswered) {
        super(response);
        this.requireUnanswered = requireUnanswered;
    }

    private HttpServletResponse unanswered() {
        requireUnanswered.run();
        return (HttpServletResponse) getResponse();
    }

    @Override
    public ServletOutputStream getOutputStream() throws IOException {
        ServletOutputStream container = unanswered().getOutputStream();
        if (stream == null) {
            stream = new ServletOutputStream() {
                @Override
                public void write(int b) throws IOException {
                    requireUnanswered.run();
                    container.write(b);
                }

                @Override
                public void write(byte[] b, int off, int len) throws IOException {
                    requireUnanswered.run();
                    container.write(b, off, len);
                }

                @Override
                public void write(ByteBuffer buffer) throws IOException {
                    requireUnanswered.run();
                    container.write(buffer);
                }

                @Override
                public void flush() throws IOException {
                    requireUnanswered.run();
                    container.flush();
                }

                @Override
                public void close() throws IOException {
                    requireUnanswered.run();
                    container.close();
                }

                @Override
                public boolean isReady() {
                    requireUnanswered.run();
                    return container.isReady();
                }

                @Override
                public void setWriteListener(WriteListener listener) {
                    requireUnanswered.run();
                    container.setWriteListener(listener);
                }
            };
        }
        return stream;
    }

    @Override
    public PrintWriter getWriter() throws IOException {
        PrintWriter container = unanswered().getWriter();
        if (writer == null) {
            writer = new PrintWriter(new Writer() {
                @Override
                public void write(char[] chars, int off, int len) {
                    requireUnanswered.run();
                    container.write(chars, off, len);
                }

                @Override
                public void write(String text, int off, int len) {
                    requireUnanswered.run();
                    container.write(text, off, len);
                }

                @Override
                public void flush() {
                    requireUnanswered.run();
                    container.flush();
                }

                @Override
                public void close() {
                    requireUnanswered.run();
                    container.close();
                }
            }) {
                @Override
                public boolean checkError() {
                    return super.checkError() || container.checkError();
                }
            };
        }
        return writer;
    }

    @Override
    public void addCookie(Cookie cookie) {
        unanswered().addCookie(cookie);
    }

    @Override
    public void sendError(int sc, String msg) throws IOException {
        unanswered().sendError(sc, msg);
    }

    @Override
    public void sendError(int sc) throws IOException {
        unanswered().sendError(sc);
    }

    @Override
    public void sendRedirect(String location) throws IOException {
        unanswered().sendRedirect(location);
    }

    @Override
    public void sendRedirect(String location, int sc) throws IOException {
        unanswered().sendRedirect(location, sc);
    }

    @Override
    public void sendRedirect(String location, boolean clearBuffer) throws IOException {
        unanswered().sendRedirect(location, clearBuffer);
    }

    @Override
    public void sendRedirect(String location, int sc, boolean clearBuffer) throws IOException {
        unanswered().sendRedirect(location, sc, clearBuffer);
    }

    @Override
    public void setDateHeader(String name, long date) {
        unanswered().setDateHeader(name, date);
    }

    @Override
    public void addDateHeader(String name, long date) {
        unanswered().addDateHeader(name, date);
    }

    @Override
    public void setHeader(String name, String value) {
        unanswered().setHeader(name, value);
    }

    @Override
    public void addHeader(String name, String value) {
        unanswered().addHeader(name, value);
    }

    @Override
    public void setIntHeader(String name, int value) {
        unanswered().setIntHeader(name, value);
    }

    @Override
    public void addIntHeader(String name, int value) {
        unanswered().addIntHeader(name, value);
    }

    @Override
    public void setStatus(int sc) {
        unanswered().setStatus(sc);
    }

    @Override
    public void setTrailerFields(Supplier<Map<String, String>> supplier) {
        unanswered().setTrailerFields(supplier);
    }

    @Override
    public void setCharacterEncoding(String charset) {
        unanswered().setCharacterEncoding(charset);
    }

    @Override
    public void setCharacterEncoding(Charset charset) {
        unanswered().setCharacterEncoding(charset);
    }

    @Override
    public void setContentLength(int len) {
        unanswered().setContentLength(len);
    }

    @Override
    public void setContentLengthLong(long len) {
        unanswered().setContentLengthLong(len);
    }

    @Override
    public void setContentType(String type) {
        unanswered().setContentType(type);
    }

    @Override
    public void setBufferSize(int size) {
        unanswered().setBufferSize(size);
    }

    @Override
    public void flushBuffer() throws IOException {
        unanswered().flushBuffer();
    }

    @Override
    public void reset() {
        unanswered().reset();
    }

    @Override
    public void resetBuffer() {
        unanswered().resetBuffer();
    }

    @Override
    public void setLocale(Locale locale) {
        unanswered().setLocale(locale);
    }
}
