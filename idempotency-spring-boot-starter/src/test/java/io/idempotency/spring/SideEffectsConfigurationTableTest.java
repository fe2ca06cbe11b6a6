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
 * The configuration table of docs/side-effects.md, beside the README's (held by {@link ReadmeConfigurationTableTest}):
 * every property it lists exists, and every default it writes out is the code's.
 */
class SideEffectsConfigurationTableTest {

    private static final Pattern ROW = Pattern.compile("^\\| `(idempotency\\.[a-z.-]+)` \\| (`([^`]*)`|[^|]*) \\|");

    @Test
    void theTableListsPropertiesWithTheDefaultsTheCodeHas() throws Exception {
        Map<String, String> table = new LinkedHashMap<>();
        for (String line : Files.readAllLines(Path.of("..", "docs", "side-effects.md"))) {
            Matcher row = ROW.matcher(line);
            if (row.find()) {
                table.put(row.group(1), row.group(3)); // null: a default told in words ("a fixed default")
            }
        }
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
        IdempotencyProperties bound = new Binder(new MapConfigurationPropertySource(written))
                .bind("idempotency", Bindable.ofInstance(new IdempotencyProperties())).get();
        assertThat(bound).usingRecursiveComparison().isEqualTo(new IdempotencyProperties());
    }
}
