package io.idempotency.benchmarks.harness;

import java.io.BufferedInputStream;
import java.io.Closeable;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.Locale;

/**
 * One persistent HTTP/1.1 connection (keep-alive) of the load generator, as thin as possible so that the client costs
 * little CPU on a machine it shares with the server and the database: requests are written as prepared bytes, answers
 * are read with Content-Length or chunked framing. Not thread-safe (one worker).
 */
final class HttpConnection implements Closeable {

    /** An answer: status, whether it carried {@code Idempotent-Replayed}, body length. */
    record Response(int status, boolean replayed, byte[] body) {
    }

    private final String host;
    private final int port;
    private Socket socket;
    private InputStream in;
    private OutputStream out;
    private final StringBuilder line = new StringBuilder(128);

    HttpConnection(String host, int port) {
        this.host = host;
        this.port = port;
    }

    /**
     * POSTs {@code body} to {@code path}. {@code extraHeaders} are complete header lines, each ending in CRLF. A
     * connection the server closed while idle is reopened once (nothing was sent on it, so nothing ran twice).
     */
    Response post(String path, String extraHeaders, byte[] body) throws IOException {
        byte[] head = ("POST " + path + " HTTP/1.1\r\nHost: " + host + ":" + port
                + "\r\nContent-Type: application/json\r\nContent-Length: " + body.length + "\r\n" + extraHeaders
                + "\r\n").getBytes(StandardCharsets.ISO_8859_1);
        boolean reused = socket != null;
        try {
            return exchange(head, body);
        } catch (ClosedWhileIdle e) {
            if (!reused) {
                throw e;
            }
            close();
            return exchange(head, body);
        }
    }

    private Response exchange(byte[] head, byte[] body) throws IOException {
        if (socket == null) {
            open();
        }
        byte[] request = new byte[head.length + body.length];
        System.arraycopy(head, 0, request, 0, head.length);
        System.arraycopy(body, 0, request, head.length, body.length);
        try {
            out.write(request);
            out.flush();
        } catch (IOException e) {
            throw new ClosedWhileIdle(e.getMessage());
        }
        String statusLine = readLine(true);
        int status = Integer.parseInt(statusLine.substring(9, 12));
        long contentLength = -1;
        boolean chunked = false;
        boolean replayed = false;
        boolean close = false;
        for (String header = readLine(false); !header.isEmpty(); header = readLine(false)) {
            int colon = header.indexOf(':');
            String name = header.substring(0, colon).trim().toLowerCase(Locale.ROOT);
            String value = header.substring(colon + 1).trim();
            switch (name) {
                case "content-length" -> contentLength = Long.parseLong(value);
                case "transfer-encoding" -> chunked = value.toLowerCase(Locale.ROOT).contains("chunked");
                case "idempotent-replayed" -> replayed = true;
                case "connection" -> close = value.equalsIgnoreCase("close");
                default -> {
                }
            }
        }
        byte[] responseBody;
        if (chunked) {
            responseBody = readChunked();
        } else if (contentLength >= 0) {
            responseBody = in.readNBytes((int) contentLength);
            if (responseBody.length != contentLength) {
                throw new EOFException("the answer ended early");
            }
        } else {
            responseBody = in.readAllBytes();
            close = true;
        }
        if (close) {
            close();
        }
        return new Response(status, replayed, responseBody);
    }

    private byte[] readChunked() throws IOException {
        java.io.ByteArrayOutputStream body = new java.io.ByteArrayOutputStream();
        while (true) {
            String sizeLine = readLine(false);
            int semicolon = sizeLine.indexOf(';');
            int size = Integer.parseInt((semicolon < 0 ? sizeLine : sizeLine.substring(0, semicolon)).trim(), 16);
            if (size == 0) {
                while (!readLine(false).isEmpty()) {
                    // trailers
                }
                return body.toByteArray();
            }
            byte[] chunk = in.readNBytes(size);
            if (chunk.length != size) {
                throw new EOFException("the answer ended early");
            }
            body.writeBytes(chunk);
            readLine(false);
        }
    }

    /** Reads one CRLF-terminated line; EOF before the status line's first byte is {@link ClosedWhileIdle}. */
    private String readLine(boolean first) throws IOException {
        line.setLength(0);
        while (true) {
            int b = in.read();
            if (b < 0) {
                if (first && line.isEmpty()) {
                    throw new ClosedWhileIdle("the server closed the connection");
                }
                throw new EOFException("the answer ended early");
            }
            if (b == '\n') {
                int length = line.length();
                if (length > 0 && line.charAt(length - 1) == '\r') {
                    line.setLength(length - 1);
                }
                return line.toString();
            }
            line.append((char) b);
        }
    }

    /** The server had closed the connection before the request reached it: safe to send again. */
    private static final class ClosedWhileIdle extends IOException {
        ClosedWhileIdle(String message) {
            super(message);
        }
    }

    private void open() throws IOException {
        socket = new Socket();
        socket.setTcpNoDelay(true);
        socket.connect(new InetSocketAddress(host, port), 5_000);
        socket.setSoTimeout(60_000);
        in = new BufferedInputStream(socket.getInputStream(), 16 * 1024);
        out = socket.getOutputStream();
    }

    @Override
    public void close() {
        if (socket != null) {
            try {
                socket.close();
            } catch (IOException ignored) {
                // closing anyway
            }
            socket = null;
        }
    }
}
