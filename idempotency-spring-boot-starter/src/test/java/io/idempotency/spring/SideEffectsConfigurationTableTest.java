package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.springframework.boot.context.properties.bind.Bindable;
import org.springframework.boot.context.properties.bind.Binder;
import org.springframework.boot.context.properties.source.MapConfigurationPropertySource;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The configuration tables of docs/side-effects.md and docs/retention.md, beside the README's (held by
 * {@link ReadmeConfigurationTableTest}): every property they list exists, and every default they write out is the
 * code's.
 */
class SideEffectsConfigurationTableTest {

    private static final Pattern ROW = Pattern.compile("^\\| `(idempotency\\.[a-z.-]+)` \\| (`([^`]*)`|[^|]*) \\|");

    @Test
    void theTableListsPropertiesWithTheDefaultsTheCodeHas() throws Exception {
        Map<String, String> table = table("side-effects.md");
        assertThat(table).containsOnlyKeys("idempotency.lease", "idempotency.downstream-key-secret",
                "idempotency.sweeper.enabled", "idempotency.sweeper.interval", "idempotency.sweeper.batch-size");

        Map<String, String> written = new LinkedHashMap<>();
        table.forEach((name, value) -> {
            if (value != null) {
                written.put(name, value);
            }
        });
        assertThat(written).as("only the secret's default is not written out").hasSize(table.size() - 1)
                .doesNotContainKey("idempotency.downstream-key-secret");
        assertDefaultsOfTheCode(written);
    }

    @Test
    void theRetentionTableListsPropertiesWithTheDefaultsTheCodeHas() throws Exception {
        Map<String, String> table = table("retention.md");

        assertThat(table).containsOnlyKeys("idempotency.retention.max-retry-window", "idempotency.lease",
                "idempotency.retention.ttl").doesNotContainValue(null);
        assertDefaultsOfTheCode(table);
    }

    /** The rows of the doc's tables of properties: each property with its default as written, null if in words. */
    private static Map<String, String> table(String doc) throws Exception {
        Map<String, String> table = new LinkedHashMap<>();
        for (String line : Files.readAllLines(Path.of("..", "docs", doc))) {
            Matcher row = ROW.matcher(line);
            if (row.find()) {
                table.put(row.group(1), row.group(3)); // null: a default told in words ("a fixed default")
            }
        }
        return table;
    }

    private static void assertDefaultsOfTheCode(Map<String, String> written) {
        IdempotencyProperties bound = new Binder(new MapConfigurationPropertySource(written))
                .bind("idempotency", Bindable.ofInstance(new IdempotencyProperties())).get();
        assertThat(bound).usingRecursiveComparison().isEqualTo(new IdempotencyProperties());
    }
}
