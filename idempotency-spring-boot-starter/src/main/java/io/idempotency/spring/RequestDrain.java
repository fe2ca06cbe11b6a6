package io.idempotency.spring;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.springframework.boot.web.server.context.WebServerApplicationContext;
import org.springframework.context.ApplicationContext;
import org.springframework.context.SmartLifecycle;

import java.time.Duration;
import java.util.List;
import java.util.function.Supplier;

/**
 * Waits, when the application context closes, for the requests the idempotency filter is serving — where no embedded
 * server drains them: in a war deployed to a servlet container of its own, which closes the context when it undeploys
 * the application (Tomcat after waiting two seconds, its {@code unloadDelay}, for a servlet's requests), while its
 * threads still run them. Without the wait the engine would stop renewing their leases and the pool close under
 * them: an intent-first request's claim could be taken over while its handler still called the third party, and no
 * request could record its result. A container undeploying the application takes no new request for it meanwhile; an
 * application that closes itself (Actuator's shutdown endpoint, {@code SpringApplication.exit}) is still sent requests
 * while it waits, so under steady load the wait lasts the whole timeout. A request whose own thread closes the
 * application is not waited for: it would wait for itself.
 * <p>
 * At most {@code spring.lifecycle.timeout-per-shutdown-phase}, in the phase of the web server's graceful shutdown
 * ({@link PeriodicTask#PHASE}), before the engine and the pool are destroyed. With an embedded server it waits for
 * nothing: the server's graceful shutdown drains its requests, and {@code server.shutdown=immediate} asks for no wait.
 */
final class RequestDrain implements SmartLifecycle {

    private static final Logger log = LoggerFactory.getLogger(RequestDrain.class);

    private final ApplicationContext context;
    private final Supplier<List<IdempotencyFilter>> filters;
    private final Duration timeout;
    private volatile boolean running;

    RequestDrain(ApplicationContext context, Supplier<List<IdempotencyFilter>> filters, Duration timeout) {
        this.context = context;
        this.filters = filters;
        this.timeout = timeout;
    }

    @Override
    public void start() {
        running = true;
    }

    @Override
    public void stop() {
        running = false;
        awaitRequests(Thread.currentThread(), System.nanoTime());
    }

    @Override
    public void stop(Runnable callback) {
        running = false;
        Thread closer = Thread.currentThread();
        long started = System.nanoTime(); // the phase's timeout runs from here too
        if (embeddedServer() || inProgress(closer) == 0) {
            callback.run();
            return;
        }
        Thread drain = new Thread(null, () -> {
            try {
                awaitRequests(closer, started);
            } finally {
                callback.run();
            }
        }, "idempotency-request-drain", 0, false);
        drain.setDaemon(true);
        drain.start();
    }

    /**
     * Waits for the filter's requests on threads other than {@code closer} (the one closing the application, which may
     * be serving a request itself) to end, at most {@link #timeout} from {@code started}.
     */
    private void awaitRequests(Thread closer, long started) {
        if (embeddedServer()) {
            return;
        }
        long deadline = started + timeout.toNanos();
        int left = inProgress(closer);
        if (left > 0) {
            log.info("Waiting for {} request(s) in progress through the idempotency filter to end, at most {}",
                    left, timeout);
        }
        while (left > 0) {
            if (System.nanoTime() - deadline >= 0) {
                log.warn("{} request(s) still in progress through the idempotency filter after {}: the application"
                        + " closes under them, and intent-first ones stay PROCESSING until their lease runs out",
                        left, timeout);
                return;
            }
            try {
                Thread.sleep(10);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
            left = inProgress(closer);
        }
    }

    private int inProgress(Thread closer) {
        return filters.get().stream().mapToInt(filter -> filter.requestsInProgressBesides(closer)).sum();
    }

    /** Whether this context runs an embedded server, whose own shutdown decides what becomes of its requests. */
    private boolean embeddedServer() {
        return context instanceof WebServerApplicationContext server && server.getWebServer() != null;
    }

    @Override
    public boolean isRunning() {
        return running;
    }

    @Override
    public int getPhase() {
        return PeriodicTask.PHASE;
    }
}
