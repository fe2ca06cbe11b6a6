package io.idempotency.benchmarks.instrument;

import jakarta.servlet.FilterChain;
import jakarta.servlet.ServletException;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import org.springframework.web.filter.OncePerRequestFilter;

import java.io.IOException;

/**
 * The outermost filter: binds a {@link RequestRecord} to the request's thread for everything the request does —
 * the idempotency filter's commit included — and adds it to its scenario's statistics when the answer has been sent.
 */
public class RequestRecordingFilter extends OncePerRequestFilter {

    public static final String SCENARIO_HEADER = "X-Bench-Scenario";
    public static final String TRACE_HEADER = "X-Bench-Trace";
    public static final String REPLAYED_HEADER = "Idempotent-Replayed";

    private final BenchStats stats;

    public RequestRecordingFilter(BenchStats stats) {
        this.stats = stats;
    }

    @Override
    protected boolean shouldNotFilter(HttpServletRequest request) {
        return request.getRequestURI().startsWith("/bench/");
    }

    @Override
    protected void doFilterInternal(HttpServletRequest request, HttpServletResponse response, FilterChain chain)
            throws ServletException, IOException {
        String scenario = request.getHeader(SCENARIO_HEADER);
        RequestRecord record = new RequestRecord(scenario != null ? scenario : request.getRequestURI(),
                request.getHeader(TRACE_HEADER) != null);
        RequestRecord.bind(record);
        try {
            chain.doFilter(request, response);
        } finally {
            RequestRecord.unbind();
            stats.scenario(record.scenario()).record(record, response.getStatus(),
                    response.getHeader(REPLAYED_HEADER) != null);
        }
    }
}
