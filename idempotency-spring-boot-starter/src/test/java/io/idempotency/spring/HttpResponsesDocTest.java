package io.idempotency.spring;

import org.junit.jupiter.api.Test;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The table of errors in docs/http-responses.md, which clients and API gateways are configured from: every problem the
 * library answers with is there, with the status it is sent with, and nothing else is.
 */
class HttpResponsesDocTest {

    private static final Pattern ROW = Pattern.compile("^\\| `(idempotency-[a-z-]+)` \\| (\\d{3})\\b");

    @Test
    void theErrorTableListsEveryProblemWithItsStatus() throws Exception {
        Map<String, Integer> documented = new TreeMap<>();
        for (String line : Files.readAllLines(Path.of("..", "docs", "http-responses.md"))) {
            Matcher row = ROW.matcher(line);
            if (row.find()) {
                assertThat(documented.put(row.group(1), Integer.valueOf(row.group(2)))).as(row.group(1)).isNull();
            }
        }
        Map<String, Integer> answered = new TreeMap<>();
        for (ProblemResponses.Problem problem : ProblemResponses.Problem.values()) {
            answered.put(problem.typeName(), problem.status());
        }

        assertThat(documented).isEqualTo(answered);
    }
}
