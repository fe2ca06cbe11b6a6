package io.idempotency.spring;

import jakarta.servlet.ServletOutputStream;
import jakarta.servlet.WriteListener;
import jakarta.servlet.http.Cookie;
import jakarta.servlet.http.HttpServletResponse;

import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Locale;

/**
 * The least a servlet container does with a response, for {@link DeferredResponseBenchmark}: status and headers kept in
 * a list, body bytes copied into a reused buffer (as a container copies them towards its socket) and counted.
 * Spring's {@code MockHttpServletResponse} would dominate the measurement (it writes a body byte by byte and keeps
 * it all). Not thread-safe.
 */
final class MinimalHttpServletResponse implements HttpServletResponse {

    private final byte[] socketBuffer;
    private final List<String[]> headers = new ArrayList<>(8);
    private int status = SC_OK;
    private long bytesWritten;
    private boolean committed;
    private String contentType;
    private String characterEncoding = StandardCharsets.ISO_8859_1.name();

    private final ServletOutputStream outputStream = new ServletOutputStream() {
        @Override
        public void write(int b) {
            socketBuffer[(int) (bytesWritten++ % socketBuffer.length)] = (byte) b;
        }

        @Override
        public void write(byte[] b, int off, int len) {
            int offset = off;
            int remaining = len;
            while (remaining > 0) {
                int chunk = Math.min(remaining, socketBuffer.length);
                System.arraycopy(b, offset, socketBuffer, 0, chunk);
                offset += chunk;
                remaining -= chunk;
            }
            bytesWritten += len;
        }

        @Override
        public boolean isReady() {
            return true;
        }

        @Override
        public void setWriteListener(WriteListener listener) {
            throw new UnsupportedOperationException();
        }
    };

    /** @param socketBuffer where body bytes are copied to (reused across responses, as a container reuses its own) */
    MinimalHttpServletResponse(byte[] socketBuffer) {
        this.socketBuffer = socketBuffer;
    }

    long bytesWritten() {
        return bytesWritten;
    }

    @Override
    public void addCookie(Cookie cookie) {
    }

    @Override
    public boolean containsHeader(String name) {
        return getHeader(name) != null;
    }

    @Override
    public String encodeURL(String url) {
        return url;
    }

    @Override
    public String encodeRedirectURL(String url) {
        return url;
    }

    @Override
    public void sendError(int sc, String msg) {
        status = sc;
        committed = true;
    }

    @Override
    public void sendError(int sc) {
        sendError(sc, null);
    }

    @Override
    public void sendRedirect(String location, int sc, boolean clearBuffer) {
        status = sc;
        setHeader("Location", location);
        committed = true;
    }

    @Override
    public void setDateHeader(String name, long date) {
        setHeader(name, Long.toString(date));
    }

    @Override
    public void addDateHeader(String name, long date) {
        addHeader(name, Long.toString(date));
    }

    @Override
    public void setHeader(String name, String value) {
        headers.removeIf(header -> header[0].equalsIgnoreCase(name));
        addHeader(name, value);
    }

    @Override
    public void addHeader(String name, String value) {
        if (name.equalsIgnoreCase("Content-Type")) {
            contentType = value;
        }
        headers.add(new String[]{name, value});
    }

    @Override
    public void setIntHeader(String name, int value) {
        setHeader(name, Integer.toString(value));
    }

    @Override
    public void addIntHeader(String name, int value) {
        addHeader(name, Integer.toString(value));
    }

    @Override
    public void setStatus(int sc) {
        status = sc;
    }

    @Override
    public int getStatus() {
        return status;
    }

    @Override
    public String getHeader(String name) {
        for (String[] header : headers) {
            if (header[0].equalsIgnoreCase(name)) {
                return header[1];
            }
        }
        return null;
    }

    @Override
    public Collection<String> getHeaders(String name) {
        List<String> values = new ArrayList<>();
        for (String[] header : headers) {
            if (header[0].equalsIgnoreCase(name)) {
                values.add(header[1]);
            }
        }
        return values;
    }

    @Override
    public Collection<String> getHeaderNames() {
        List<String> names = new ArrayList<>();
        for (String[] header : headers) {
            names.add(header[0]);
        }
        return names;
    }

    @Override
    public String getCharacterEncoding() {
        return characterEncoding;
    }

    @Override
    public String getContentType() {
        return contentType;
    }

    @Override
    public ServletOutputStream getOutputStream() {
        return outputStream;
    }

    @Override
    public PrintWriter getWriter() {
        return new PrintWriter(outputStream, false, StandardCharsets.UTF_8);
    }

    @Override
    public void setCharacterEncoding(String charset) {
        characterEncoding = charset;
    }

    @Override
    public void setContentLength(int len) {
        setIntHeader("Content-Length", len);
    }

    @Override
    public void setContentLengthLong(long len) {
        setHeader("Content-Length", Long.toString(len));
    }

    @Override
    public void setContentType(String type) {
        setHeader("Content-Type", type);
    }

    @Override
    public void setBufferSize(int size) {
    }

    @Override
    public int getBufferSize() {
        return socketBuffer.length;
    }

    @Override
    public void flushBuffer() {
        committed = true;
    }

    @Override
    public void resetBuffer() {
    }

    @Override
    public boolean isCommitted() {
        return committed;
    }

    @Override
    public void reset() {
        headers.clear();
        status = SC_OK;
    }

    @Override
    public void setLocale(Locale locale) {
    }

    @Override
    public Locale getLocale() {
        return Locale.ROOT;
    }
}
