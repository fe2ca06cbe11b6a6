package io.idempotency.spring;

import jakarta.servlet.AsyncContext;
import jakarta.servlet.ReadListener;
import jakarta.servlet.ServletException;
import jakarta.servlet.ServletInputStream;
import jakarta.servlet.ServletRequest;
import jakarta.servlet.ServletResponse;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletRequestWrapper;
import jakarta.servlet.http.HttpUpgradeHandler;
import jakarta.servlet.http.Part;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.Reader;
import java.nio.ByteBuffer;
import java.util.Collection;
import java.util.Enumeration;
import java.util.Map;

/**
 * The request the async context of a request the library may answer itself hands out (see
 * {@link GuardedAsyncContext}), for the application's async work to keep. Once the library has answered the request,
 * the work can no longer read through it what the container reads for the request it serves next with the objects
 * behind it (Jetty, over HTTP/2, reads the body of the connection's next stream; an HTTP/1.x connection is closed
 * with the answer): its body, through a stream or reader it took before too, its parameters and parts
 * ({@link IllegalStateException}). Until then everything is the container's own.
 */
final class GuardedAsyncRequest extends HttpServletRequestWrapper {

    private final AsyncContext asyncContext;
    private final Runnable requireUnanswered;
    private ServletInputStream stream;
    private BufferedReader reader;

    /** @param asyncContext the guarded async context that hands this request out, which it hands out in turn */
    GuardedAsyncRequest(HttpServletRequest request, AsyncContext asyncContext, Runnable requireUnanswered) {
        super(request);
        this.asyncContext = asyncContext;
        this.requireUnanswered = requireUnanswered;
    }

    private HttpServletRequest unanswered() {
        requireUnanswered.run();
        return (HttpServletRequest) getRequest();
    }

    @Override
    public ServletInputStream getInputStream() throws IOException {
        ServletInputStream container = unanswered().getInputStream();
        if (stream == null) {
            stream = new ServletInputStream() {
                @Override
                public int read() throws IOException {
                    requireUnanswered.run();
                    return container.read();
                }

                @Override
                public int read(byte[] b, int off, int len) throws IOException {
                    requireUnanswered.run();
                    return container.read(b, off, len);
                }

                @Override
                public int read(ByteBuffer buffer) throws IOException {
                    requireUnanswered.run();
                    return container.read(buffer);
                }

                @Override
                public int readLine(byte[] b, int off, int len) throws IOException {
                    requireUnanswered.run();
                    return container.readLine(b, off, len);
                }

                @Override
                public byte[] readAllBytes() throws IOException {
                    requireUnanswered.run();
                    return container.readAllBytes();
                }

                @Override
                public byte[] readNBytes(int len) throws IOException {
                    requireUnanswered.run();
                    return container.readNBytes(len);
                }

                @Override
                public int readNBytes(byte[] b, int off, int len) throws IOException {
                    requireUnanswered.run();
                    return container.readNBytes(b, off, len);
                }

                @Override
                public long skip(long n) throws IOException {
                    requireUnanswered.run();
                    return container.skip(n);
                }

                @Override
                public int available() throws IOException {
                    requireUnanswered.run();
                    return container.available();
                }

                @Override
                public void close() throws IOException {
                    requireUnanswered.run();
                    container.close();
                }

                @Override
                public boolean isFinished() {
                    requireUnanswered.run();
                    return container.isFinished();
                }

                @Override
                public boolean isReady() {
                    requireUnanswered.run();
                    return container.isReady();
                }

                @Override
                public void setReadListener(ReadListener listener) {
                    requireUnanswered.run();
                    container.setReadListener(listener);
                }
            };
        }
        return stream;
    }

    @Override
    public BufferedReader getReader() throws IOException {
        BufferedReader container = unanswered().getReader();
        if (reader == null) {
            reader = new BufferedReader(new Reader() {
                @Override
                public int read(char[] chars, int off, int len) throws IOException {
                    requireUnanswered.run();
                    return container.read(chars, off, len);
                }

                @Override
                public boolean ready() throws IOException {
                    requireUnanswered.run();
                    return container.ready();
                }

                @Override
                public void close() throws IOException {
                    requireUnanswered.run();
                    container.close();
                }
            }, 1); // holds nothing ahead that the container's reader would not
        }
        return reader;
    }

    @Override
    public String getParameter(String name) {
        return unanswered().getParameter(name);
    }

    @Override
    public Map<String, String[]> getParameterMap() {
        return unanswered().getParameterMap();
    }

    @Override
    public Enumeration<String> getParameterNames() {
        return unanswered().getParameterNames();
    }

    @Override
    public String[] getParameterValues(String name) {
        return unanswered().getParameterValues(name);
    }

    @Override
    public Collection<Part> getParts() throws IOException, ServletException {
        return unanswered().getParts();
    }

    @Override
    public Part getPart(String name) throws IOException, ServletException {
        return unanswered().getPart(name);
    }

    @Override
    public <T extends HttpUpgradeHandler> T upgrade(Class<T> handlerClass) throws IOException, ServletException {
        return unanswered().upgrade(handlerClass);
    }

    /** The guarded context, not the container's (which a request handed out unwrapped would give). */
    @Override
    public AsyncContext getAsyncContext() {
        return asyncContext;
    }

    @Override
    public AsyncContext startAsync() {
        return unanswered().startAsync();
    }

    @Override
    public AsyncContext startAsync(ServletRequest request, ServletResponse response) {
        return unanswered().startAsync(request, response);
    }
}
