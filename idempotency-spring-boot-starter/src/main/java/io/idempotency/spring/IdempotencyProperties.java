package io.idempotency.spring;

import io.idempotency.jdbc.IdempotencySchema;
import org.springframework.beans.factory.InitializingBean;
import org.springframework.boot.context.properties.ConfigurationProperties;
import org.springframework.util.unit.DataSize;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/** Settings of the idempotency starter, under {@code idempotency.*}. */
@ConfigurationProperties("idempotency")
public class IdempotencyProperties implements InitializingBean {

    /** Once bound, before any bean uses them: settings that cannot work stop the start, named. */
    @Override
    public void afterPropertiesSet() {
        IdempotencyAutoConfiguration.checkSettings(this);
    }

    /**
     * Whether the starter is active at all. When false, @Idempotent has no effect, and a warning at startup
     * lists the annotated methods. When true, an application whose @Idempotent methods the starter cannot
     * serve (no DataSource or transaction manager) does not start.
     */
    private boolean enabled = true;

    /**
     * Name of the request header that carries the idempotency key: one of the client's own, not one HTTP, browsers,
     * proxies or tracing give another meaning (Content-Type, Authorization, Prefer, Sec-Fetch-Mode, X-Forwarded-For,
     * X-Real-IP, traceparent, X-B3-TraceId), which is refused at startup.
     */
    private String headerName = "Idempotency-Key";

    /**
     * How long a duplicate request waits for the request that holds its key to finish before it is answered
     * 409 idempotency-request-in-progress. Keep it short: the waiting request holds its thread, and a connection
     * too while it waits for another instance's claim. At most 24 days, the longest wait PostgreSQL's lock_timeout
     * takes. A wait inside a transaction with a timeout (spring.transaction.default-timeout) ends with half of that
     * transaction's time left.
     */
    private Duration inFlightWait = Duration.ofSeconds(2);

    /**
     * How many duplicate requests may wait at once, in one instance, for the request that holds their key (each holds
     * its thread while it waits), requests with another body under the key that wait for its claim to commit
     * included; must be positive. One more is answered 409 idempotency-request-in-progress at once, as if its wait had
     * run out, so that a client resending one request without pause cannot take every thread.
     */
    private int maxWaitingDuplicates = 100; // IdempotencyEngine.DEFAULT_MAX_WAITING_DUPLICATES

    /**
     * The Retry-After sent with 409 idempotency-request-in-progress and 503
     * idempotency-store-unavailable (rounded up to seconds); must be positive.
     */
    private Duration retryAfter = Duration.ofSeconds(1);

    /**
     * Largest request body an idempotent endpoint accepts; the body is read and hashed before any database
     * connection is taken. Larger bodies are answered 413 idempotency-request-too-large. At most 2147483639B (just
     * under 2GB): the body is held in one array.
     */
    private DataSize maxRequestBodySize = DataSize.ofMegabytes(1);

    /**
     * HTTP methods that @Idempotent endpoints are idempotent for, unless the annotation names its own.
     * Requests with other methods run normally and their header is ignored. Names that are no registered HTTP method
     * are refused at startup.
     */
    private List<String> methods = new ArrayList<>(List.of("POST", "PATCH"));

    /** How request bodies are fingerprinted when an endpoint does not name the fields that identify a request. */
    private BodyFingerprint bodyFingerprint = BodyFingerprint.CANONICAL_JSON;

    /**
     * Largest answer body that is stored for replay. A storable answer above it is not committed: the request rolls
     * back and is answered 500 idempotency-response-too-large, so an answer is never replayed cut short; it is not held
     * in memory past the cap. The
     * same cap holds for the results of IdempotencyTemplate work (refused with StoredBodyTooLargeException, the work's
     * writes rolled back) and for the answers of a StaleClaimResolver (not stored; the claim stays PROCESSING). A cap
     * the store cannot keep stops the start: on PostgreSQL one above 512 MB less 128 KB (a body read back as text
     * takes twice its size), on MariaDB one the server's max_allowed_packet (twice the cap and 256 KB) or the body
     * column cannot hold.
     */
    private DataSize maxStoredBodySize = DataSize.ofMegabytes(1);

    /** Ways of fingerprinting a request body. */
    public enum BodyFingerprint {
        /**
         * JSON bodies (content type {@code application/json} or {@code *+json}) are read and written canonically:
         * member order and whitespace do not matter, numbers are compared as exact decimals, and duplicate member
         * names are refused (400 {@code idempotency-body-invalid}). Other bodies are fingerprinted as bytes (with the
         * charset they are read in when it is not UTF-8).
         */
        CANONICAL_JSON,
        /**
         * Every body is fingerprinted as the bytes received (decompressed, with the charset they are read in when
         * it is not UTF-8); a JSON body is parsed only for the expressions of an endpoint that has them.
         */
        BYTES
    }

    /**
     * Response headers stored with an answer and sent again on replay, besides the body and status. Headers such as
     * Set-Cookie or Authorization, hop-by-hop headers such as Connection or Transfer-Encoding (and those a Connection
     * header names), and those that describe each message rather than the answer (Content-Length, Date, Age) are
     * never stored, even if listed here. A list that replaces the default should keep Content-Type and
     * Content-Encoding: without them a client cannot read the replayed body (a warning at startup names the one left
     * out). A name that is no HTTP header name (such as a list written with semicolons) stops the start.
     */
    private List<String> replayedHeaders = new ArrayList<>(List.of("Content-Type", "Content-Encoding",
            "Content-Language", "Content-Location", "Content-Disposition", "Location", "ETag", "Last-Modified",
            "Link"));

    /**
     * Base URI of the problem types in error answers; the type of each error is this base followed by its name,
     * e.g. idempotency-key-missing. An absolute URI, or a path from the root (/problems/): a relative one, which a
     * client resolves against each request's URI, stops the start.
     */
    private String problemTypeBase = ProblemResponses.DEFAULT_TYPE_BASE;

    /**
     * Status of the answer to a key reused with a different request (problem type
     * idempotency-key-mismatch): 422 by default, e.g. 400 for clients that know no other. Must be a 4xx other
     * than 408, 409, 425 and 429: those tell a client to retry, and a retry of a mismatched request never succeeds;
     * nor 401, 405, 407 or 426, which HTTP requires to carry a header the refusal does not.
     */
    private int mismatchStatus = 422;

    /**
     * How long a claim committed before its work (for side effects outside the database) is held before another
     * request may take it over; measured on the database clock. The retention must cover the longest retry window
     * plus this lease.
     */
    private Duration lease = Duration.ofMinutes(5);

    /**
     * Secret of the HMAC that derives the keys handlers send to third parties
     * (IdempotencyContext.require().downstreamKey()). Must be the same on every instance and stay the same across
     * restarts, or a rerun after a crash would send a new key and the third party could not deduplicate it. Set it per
     * application.
     */
    private String downstreamKeySecret = io.idempotency.core.IdempotencyEngine.DEFAULT_DOWNSTREAM_SECRET;

    private final Sweeper sweeper = new Sweeper();

    private final ReplayCache replayCache = new ReplayCache();

    /**
     * Completed answers kept in memory per instance, so that a replay needs no database round trip. Safe because a
     * completed record never changes; a record removed after its retention (or by hand) may still be replayed from
     * memory to its own request for at most {@code max-age} on an instance that cached it. A request with another
     * fingerprint is always judged by the database, never refused from memory.
     */
    public static class ReplayCache {

        /** How many answers each instance keeps at most; 0 switches the cache off. */
        private int maxEntries = 10_000;

        /** Larger answers are not kept in memory (they are replayed from the database). */
        private DataSize maxBodySize = DataSize.ofKilobytes(64);

        /**
         * How much memory the kept answers may take in all (estimated from above: bodies, headers, keys and the
         * objects that hold them); the least recently used go first beyond it. 0 keeps none.
         */
        private DataSize maxTotalSize = DataSize.ofMegabytes(32);

        /** How long an answer is kept after it was stored or last read from the database; 0 keeps none. */
        private Duration maxAge = Duration.ofMinutes(10);

        /**
         * How many completed requests each instance remembers at least (2.5 bytes of memory each),
         * beyond the answers it keeps: a retry of one of them is answered from one read of its record, instead of a
         * claim and its rollback (two round trips). 0 remembers none; at most 100,000,000 (250 MB).
         */
        private int completedKeys = 1_000_000;

        public int getMaxEntries() {
            return maxEntries;
        }

        public void setMaxEntries(int maxEntries) {
            this.maxEntries = maxEntries;
        }

        public DataSize getMaxBodySize() {
            return maxBodySize;
        }

        public void setMaxBodySize(DataSize maxBodySize) {
            this.maxBodySize = maxBodySize;
        }

        public DataSize getMaxTotalSize() {
            return maxTotalSize;
        }

        public void setMaxTotalSize(DataSize maxTotalSize) {
            this.maxTotalSize = maxTotalSize;
        }

        public Duration getMaxAge() {
            return maxAge;
        }

        public void setMaxAge(Duration maxAge) {
            this.maxAge = maxAge;
        }

        public int getCompletedKeys() {
            return completedKeys;
        }

        public void setCompletedKeys(int completedKeys) {
            this.completedKeys = completedKeys;
        }
    }

    private final Retention retention = new Retention();

    private final Jdbc jdbc = new Jdbc();

    /** How long records are kept, and how they are removed afterwards. */
    public static class Retention {

        /**
         * Minimum time a record is kept after its key was claimed. Must be at least the longest time a client may
         * retry or replay a request (offline jobs, message redelivery, an old browser tab) plus the lease: a record
         * that is gone lets an old request run again. A record that still exists is honoured, expired or not. At most
         * 36500000d (about 100,000 years): the expiry must be a time PostgreSQL can hold.
         */
        private Duration ttl = Duration.ofDays(30);

        /**
         * The longest time after a first attempt that a client may still retry or replay it, as the application
         * declares it. The application does not start when ttl is shorter than this plus the lease.
         */
        private Duration maxRetryWindow = Duration.ofDays(7);

        private final Cleanup cleanup = new Cleanup();

        public Duration getTtl() {
            return ttl;
        }

        public void setTtl(Duration ttl) {
            this.ttl = ttl;
        }

        public Duration getMaxRetryWindow() {
            return maxRetryWindow;
        }

        public void setMaxRetryWindow(Duration maxRetryWindow) {
            this.maxRetryWindow = maxRetryWindow;
        }

        public Cleanup getCleanup() {
            return cleanup;
        }
    }

    /** Removal of records past their retention. */
    public static class Cleanup {

        /**
         * Whether this instance removes expired records (safe on several instances at once). In
         * drop-partitions mode every instance creates partitions ahead, at startup and on schedule, even when
         * this is false; only dropping is switched off.
         */
        private boolean enabled = true;

        /**
         * How expired records are removed. delete: in batches, skipping rows other transactions hold.
         * drop-partitions: keep the table partitioned by creation time, create partitions ahead and drop
         * whole partitions once all their records have expired (the table is created partitioned in this mode).
         */
        private CleanupMode mode = CleanupMode.DELETE;

        /**
         * Time between two cleanup runs (in drop-partitions mode also the runs that create partitions, and the longest
         * a partition's detach waits for the requests in progress on the table).
         */
        private Duration interval = Duration.ofHours(1);

        /** Most records removed by one statement in delete mode. */
        private int batchSize = 1000;

        /**
         * The time span of one partition in drop-partitions mode (bounds are multiples of it since the epoch, UTC).
         * The TTL's partitions, the present one and those ahead may number at most 100: every claim locks each one.
         */
        private Duration partitionInterval = Duration.ofDays(1);

        /**
         * How many partitions after the current one are kept ready in drop-partitions mode. Times partition-interval
         * they must span at least two cleanup intervals and 5 seconds; at most 1000.
         */
        private int partitionsAhead = 7;

        /**
         * Whether this instance creates partitions in drop-partitions mode. Switch off when partitions are
         * managed outside the application (pg_partman, a DBA); then the application only checks at startup that a
         * partition (or a default partition) covers the current time, and drops nothing unless cleanup is enabled.
         */
        private boolean createPartitions = true;

        public boolean isCreatePartitions() {
            return createPartitions;
        }

        public void setCreatePartitions(boolean createPartitions) {
            this.createPartitions = createPartitions;
        }

        public boolean isEnabled() {
            return enabled;
        }

        public void setEnabled(boolean enabled) {
            this.enabled = enabled;
        }

        public CleanupMode getMode() {
            return mode;
        }

        public void setMode(CleanupMode mode) {
            this.mode = mode;
        }

        public Duration getInterval() {
            return interval;
        }

        public void setInterval(Duration interval) {
            this.interval = interval;
        }

        public int getBatchSize() {
            return batchSize;
        }

        public void setBatchSize(int batchSize) {
            this.batchSize = batchSize;
        }

        public Duration getPartitionInterval() {
            return partitionInterval;
        }

        public void setPartitionInterval(Duration partitionInterval) {
            this.partitionInterval = partitionInterval;
        }

        public int getPartitionsAhead() {
            return partitionsAhead;
        }

        public void setPartitionsAhead(int partitionsAhead) {
            this.partitionsAhead = partitionsAhead;
        }
    }

    /** How expired records are removed. */
    public enum CleanupMode {
        /** Batched deletes of expired rows. */
        DELETE,
        /** Whole partitions are dropped; the table is partitioned by creation time. */
        DROP_PARTITIONS
    }

    /** The background sweeper of claims whose lease ran out with no retry to resolve them. */
    public static class Sweeper {

        /** Whether this instance sweeps (safe on several instances: each stale claim is resolved once). */
        private boolean enabled = true;

        /** Time between two sweeps. */
        private Duration interval = Duration.ofSeconds(30);

        /** Most stale claims looked at per sweep. */
        private int batchSize = 100;

        public boolean isEnabled() {
            return enabled;
        }

        public void setEnabled(boolean enabled) {
            this.enabled = enabled;
        }

        public Duration getInterval() {
            return interval;
        }

        public void setInterval(Duration interval) {
            this.interval = interval;
        }

        public int getBatchSize() {
            return batchSize;
        }

        public void setBatchSize(int batchSize) {
            this.batchSize = batchSize;
        }
    }

    /** The JDBC store. */
    public static class Jdbc {

        /**
         * Table of the idempotency records, in the connection's default schema. A plain SQL identifier, and no key word
         * PostgreSQL reserves (such as user or order).
         */
        private String tableName = IdempotencySchema.DEFAULT_TABLE_NAME;

        /**
         * Whether to create or upgrade the table at startup with the library's own Flyway migration (history table
         * idempotency_schema_history, or the table's name followed by _schema_history for another table). Switch off
         * when the schema is managed elsewhere; the plain script is io/idempotency/jdbc/postgresql/schema.sql
         * in the idempotency-jdbc-store jar. Switched off, the application still checks at startup, after the
         * application's own database initialisation (Flyway, Liquibase, SQL scripts), that the table exists with the
         * layout of the cleanup mode.
         */
        private boolean initializeSchema = true;

        public String getTableName() {
            return tableName;
        }

        public void setTableName(String tableName) {
            this.tableName = tableName;
        }

        public boolean isInitializeSchema() {
            return initializeSchema;
        }

        public void setInitializeSchema(boolean initializeSchema) {
            this.initializeSchema = initializeSchema;
        }
    }

    public boolean isEnabled() {
        return enabled;
    }

    public void setEnabled(boolean enabled) {
        this.enabled = enabled;
    }

    public String getHeaderName() {
        return headerName;
    }

    public void setHeaderName(String headerName) {
        this.headerName = headerName;
    }

    public Duration getInFlightWait() {
        return inFlightWait;
    }

    public void setInFlightWait(Duration inFlightWait) {
        this.inFlightWait = inFlightWait;
    }

    public int getMaxWaitingDuplicates() {
        return maxWaitingDuplicates;
    }

    public void setMaxWaitingDuplicates(int maxWaitingDuplicates) {
        this.maxWaitingDuplicates = maxWaitingDuplicates;
    }

    public Duration getRetryAfter() {
        return retryAfter;
    }

    public void setRetryAfter(Duration retryAfter) {
        this.retryAfter = retryAfter;
    }

    public DataSize getMaxRequestBodySize() {
        return maxRequestBodySize;
    }

    public void setMaxRequestBodySize(DataSize maxRequestBodySize) {
        this.maxRequestBodySize = maxRequestBodySize;
    }

    public List<String> getMethods() {
        return methods;
    }

    public void setMethods(List<String> methods) {
        this.methods = methods;
    }

    public BodyFingerprint getBodyFingerprint() {
        return bodyFingerprint;
    }

    public void setBodyFingerprint(BodyFingerprint bodyFingerprint) {
        this.bodyFingerprint = bodyFingerprint;
    }

    public DataSize getMaxStoredBodySize() {
        return maxStoredBodySize;
    }

    public void setMaxStoredBodySize(DataSize maxStoredBodySize) {
        this.maxStoredBodySize = maxStoredBodySize;
    }

    public List<String> getReplayedHeaders() {
        return replayedHeaders;
    }

    public void setReplayedHeaders(List<String> replayedHeaders) {
        this.replayedHeaders = replayedHeaders;
    }

    public String getProblemTypeBase() {
        return problemTypeBase;
    }

    public void setProblemTypeBase(String problemTypeBase) {
        this.problemTypeBase = problemTypeBase;
    }

    public int getMismatchStatus() {
        return mismatchStatus;
    }

    public void setMismatchStatus(int mismatchStatus) {
        this.mismatchStatus = mismatchStatus;
    }

    public String getDownstreamKeySecret() {
        return downstreamKeySecret;
    }

    public void setDownstreamKeySecret(String downstreamKeySecret) {
        this.downstreamKeySecret = downstreamKeySecret;
    }

    public ReplayCache getReplayCache() {
        return replayCache;
    }

    public Sweeper getSweeper() {
        return sweeper;
    }

    public Duration getLease() {
        return lease;
    }

    public void setLease(Duration lease) {
        this.lease = lease;
    }

    public Retention getRetention() {
        return retention;
    }

    public Jdbc getJdbc() {
        return jdbc;
    }
}
