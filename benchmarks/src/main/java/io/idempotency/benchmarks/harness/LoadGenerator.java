package io.idempotency.benchmarks.harness;

import io.idempotency.benchmarks.instrument.BenchStats;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.BrokenBarrierException;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ThreadLocalRandom;

/**
 * Drives the application under test over HTTP/1.1 keep-alive connections: {@code connections} workers, each with its
 * own connection, send requests back to back for a round's duration (closed loop); a storm round sends groups of
 * {@code stormSize} concurrent requests sharing one key, one group after the other. Every answer is checked (status,
 * {@code Idempotent-Replayed}), every latency kept.
 */
final class LoadGenerator implements AutoCloseable {

    /** What a steady round sends. */
    enum Kind {
        /** {@code POST /plain}, no key. */
        PLAIN("/plain"),
        /** {@code POST /idempotent} with a fresh key: a first execution. */
        FIRST("/idempotent"),
        /** {@code POST /idempotent} with the key and body of a completed first execution: a replay. */
        REPLAY("/idempotent");

        final String path;

        Kind(String path) {
            this.path = path;
        }
    }

    /** The outcome of one round. */
    record Round(String scenario, long requests, long errors, long elapsedNanos, long[] latencies, long bodyBytes,
                 long executed, long replayed, List<String> stormKeys, String firstError) {

        double throughput() {
            return requests * 1e9 / elapsedNanos;
        }
    }

    private static final int MAX_ERRORS_PER_ROUND = 1_000;

    private final String host;
    private final int port;
    private final HttpConnection[] connections;
    private final HttpConnection[] stormConnections;
    private final ExecutorService workers;
    private final ConcurrentLinkedQueue<String> completedKeys = new ConcurrentLinkedQueue<>();
    private volatile String[] replayKeys = new String[0];

    LoadGenerator(String host, int port, int connections, int stormSize) {
        this.host = host;
        this.port = port;
        this.connections = new HttpConnection[connections];
        this.stormConnections = new HttpConnection[stormSize];
        for (int i = 0; i < connections; i++) {
            this.connections[i] = new HttpConnection(host, port);
        }
        for (int i = 0; i < stormSize; i++) {
            this.stormConnections[i] = new HttpConnection(host, port);
        }
        this.workers = Executors.newFixedThreadPool(connections + stormSize, runnable -> {
            Thread thread = new Thread(runnable, "load");
            thread.setDaemon(true);
            return thread;
        });
    }

    int connections() {
        return connections.length;
    }

    int stormSize() {
        return stormConnections.length;
    }

    /** The body of an order request for {@code reference}; the same reference always gives the same bytes. */
    static byte[] body(String reference) {
        return ("{\"reference\":\"" + reference + "\",\"customer\":\"customer-0042\",\"amount\":12.50,"
                + "\"currency\":\"EUR\",\"description\":\"a benchmark order, about as long as a real one\"}")
                .getBytes(StandardCharsets.UTF_8);
    }

    static String newKey() {
        ThreadLocalRandom random = ThreadLocalRandom.current();
        return new UUID((random.nextLong() & ~0xF000L) | 0x4000L,
                (random.nextLong() & 0x3FFFFFFFFFFFFFFFL) | 0x8000000000000000L).toString();
    }

    static String headers(String scenario, String key, boolean trace) {
        StringBuilder headers = new StringBuilder(128).append("X-Bench-Scenario: ").append(scenario).append("\r\n");
        if (key != null) {
            headers.append("Idempotency-Key: ").append(key).append("\r\n");
        }
        if (trace) {
            headers.append("X-Bench-Trace: 1\r\n");
        }
        return headers.toString();
    }

    /**
     * The order reference of a request: its key, or for a request without one (plain) a fresh random UUID all the
     * same, so that both endpoints parse bodies of one length, answer alike, and insert rows whose references land
     * at random places in their index, as the keys do.
     */
    static String reference(String key) {
        return key != null ? key : newKey();
    }

    /** One request on a connection of its own, outside any round (for traces); returns the answer. */
    HttpConnection.Response single(Kind kind, String scenario, String key, boolean trace) throws IOException {
        try (HttpConnection connection = new HttpConnection(host, port)) {
            return connection.post(kind.path, headers(scenario, key, trace), body(reference(key)));
        }
    }

    /** Runs {@code kind} on every connection for {@code duration}. */
    Round steady(String scenario, Kind kind, Duration duration) throws InterruptedException {
        if (kind == Kind.REPLAY) {
            replayKeys = completedKeys.toArray(new String[0]);
            if (replayKeys.length == 0) {
                throw new IllegalStateException("no completed key to replay yet: run a FIRST round before");
            }
        }
        CountDownLatch start = new CountDownLatch(1);
        List<Future<Worker>> futures = new ArrayList<>();
        for (HttpConnection connection : connections) {
            futures.add(workers.submit(() -> {
                Worker worker = new Worker();
                start.await();
                long deadline = System.nanoTime() + duration.toNanos();
                while (System.nanoTime() < deadline && worker.errors < MAX_ERRORS_PER_ROUND) {
                    worker.send(connection, kind, scenario);
                }
                worker.finishedAt = System.nanoTime();
                return worker;
            }));
        }
        long began = System.nanoTime();
        start.countDown();
        return collect(scenario, began, futures, List.of());
    }

    /**
     * Groups of {@link #stormSize()} concurrent requests sharing a fresh key, one group after the other, for
     * {@code duration} or {@code maxGroups} groups, whichever ends first; {@code trace} asks the application for
     * the statements of every request.
     */
    Round storm(String scenario, Duration duration, int maxGroups, boolean trace) throws InterruptedException {
        int size = stormConnections.length;
        List<String> keys = new ArrayList<>();
        String[] currentKey = new String[1];
        boolean[] stop = new boolean[1];
        // the round starts before its workers do: the first group may be sent before submit() returns
        long began = System.nanoTime();
        long deadline = began + duration.toNanos();
        CyclicBarrier group = new CyclicBarrier(size, () -> { // runs before the group's requests are sent
            stop[0] = System.nanoTime() >= deadline || keys.size() >= maxGroups;
            currentKey[0] = BenchStats.STORM_KEY_PREFIX + newKey();
            if (!stop[0]) {
                keys.add(currentKey[0]);
            }
        });
        List<Future<Worker>> futures = new ArrayList<>();
        for (HttpConnection connection : stormConnections) {
            futures.add(workers.submit(() -> {
                Worker worker = new Worker();
                try {
                    while (true) {
                        group.await();
                        if (stop[0]) {
                            break;
                        }
                        worker.sendStorm(connection, scenario, currentKey[0], trace);
                    }
                } catch (BrokenBarrierException e) {
                    throw new IllegalStateException("a storm worker failed", e);
                }
                worker.finishedAt = System.nanoTime();
                return worker;
            }));
        }
        return collect(scenario, began, futures, keys);
    }

    private Round collect(String scenario, long began, List<Future<Worker>> futures, List<String> stormKeys)
            throws InterruptedException {
        long requests = 0;
        long errors = 0;
        long bytes = 0;
        long executed = 0;
        long replayed = 0;
        long finished = began;
        String firstError = null;
        List<long[]> latencies = new ArrayList<>();
        for (Future<Worker> future : futures) {
            Worker worker;
            try {
                worker = future.get();
            } catch (ExecutionException e) {
                throw new IllegalStateException("a load worker failed", e.getCause());
            }
            requests += worker.requests;
            errors += worker.errors;
            bytes += worker.bytes;
            executed += worker.executed;
            replayed += worker.replayed;
            finished = Math.max(finished, worker.finishedAt);
            latencies.add(Arrays.copyOf(worker.latencies, worker.requests));
            if (firstError == null) {
                firstError = worker.firstError;
            }
        }
        long[] all = latencies.stream().flatMapToLong(Arrays::stream).toArray();
        return new Round(scenario, requests, errors, finished - began, all, bytes, executed, replayed,
                List.copyOf(stormKeys), firstError);
    }

    /** One worker's share of a round. */
    private final class Worker {
        int requests;
        long errors;
        long bytes;
        long executed;
        long replayed;
        long finishedAt;
        long[] latencies = new long[4096];
        String firstError;

        void send(HttpConnection connection, Kind kind, String scenario) {
            String key = switch (kind) {
                case PLAIN -> null;
                case FIRST -> newKey();
                case REPLAY -> replayKeys[ThreadLocalRandom.current().nextInt(replayKeys.length)];
            };
            byte[] body = body(reference(key));
            long start = System.nanoTime();
            HttpConnection.Response response;
            try {
                response = connection.post(kind.path, headers(scenario, key, false), body);
            } catch (IOException | RuntimeException e) {
                connection.close();
                error(scenario + ": " + e);
                return;
            }
            long latency = System.nanoTime() - start;
            boolean expected = response.status() == 201 && switch (kind) {
                case PLAIN, FIRST -> !response.replayed();
                case REPLAY -> response.replayed();
            };
            if (!expected) {
                error(scenario + ": " + describe(response));
                return;
            }
            if (kind == Kind.FIRST) {
                completedKeys.add(key);
            }
            record(latency, response);
        }

        void sendStorm(HttpConnection connection, String scenario, String key, boolean trace) {
            long start = System.nanoTime();
            HttpConnection.Response response;
            try {
                response = connection.post(Kind.FIRST.path, headers(scenario, key, trace), body(key));
            } catch (IOException | RuntimeException e) {
                connection.close();
                error(scenario + ": " + e);
                return;
            }
            long latency = System.nanoTime() - start;
            if (response.status() != 201) {
                error(scenario + ": " + describe(response));
                return;
            }
            if (response.replayed()) {
                replayed++;
            } else {
                executed++;
            }
            record(latency, response);
        }

        private void record(long latency, HttpConnection.Response response) {
            if (requests == latencies.length) {
                latencies = Arrays.copyOf(latencies, requests * 2);
            }
            latencies[requests++] = latency;
            bytes += response.body().length;
        }

        private void error(String description) {
            errors++;
            if (firstError == null) {
                firstError = description;
            }
        }
    }

    private static String describe(HttpConnection.Response response) {
        String body = new String(response.body(), StandardCharsets.UTF_8);
        return response.status() + (response.replayed() ? " (replayed) " : " ")
                + body.substring(0, Math.min(200, body.length()));
    }

    @Override
    public void close() {
        workers.shutdownNow();
        for (HttpConnection connection : connections) {
            connection.close();
        }
        for (HttpConnection connection : stormConnections) {
            connection.close();
        }
    }
}
