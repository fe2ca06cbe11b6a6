package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import org.junit.jupiter.api.Test;
import org.springframework.boot.context.properties.bind.Bindable;
import org.springframework.boot.context.properties.bind.Binder;
import org.springframework.boot.context.properties.source.MapConfigurationPropertySource;
import org.springframework.util.unit.DataSize;
import tools.jackson.databind.JsonNode;
import tools.jackson.databind.json.JsonMapper;

import java.io.InputStream;
import java.lang.reflect.Method;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The tables of the README, which users read first: every property there, each with the code's default, and every
 * attribute of the annotation.
 */
class ReadmeConfigurationTableTest {

    private static final Pattern ROW = Pattern.compile("^\\| `(idempotency\\.[a-z.-]+)` \\| (`([^`]*)`|[^|]*) \\|");

    @Test
    void theReadmeListsEveryPropertyWithTheDefaultTheCodeHas() throws Exception {
        Map<String, String> table = new LinkedHashMap<>();
        for (String line : Files.readAllLines(Path.of("..", "README.md"))) {
            Matcher row = ROW.matcher(line);
            if (row.find()) {
                table.put(row.group(1), row.group(3)); // null: a default told in words ("a fixed default")
            }
        }
        TreeSet<String> properties = new TreeSet<>();
        try (InputStream in = getClass().getResourceAsStream("/META-INF/spring-configuration-metadata.json")) {
            for (JsonNode property : JsonMapper.builder().build().readTree(in).get("properties")) {
                properties.add(property.get("name").asString());
            }
        }
        assertThat(new TreeSet<>(table.keySet())).isEqualTo(properties);

        Map<String, String> written = new LinkedHashMap<>();
        table.forEach((name, value) -> {
            if (value != null) {
                written.put(name, value);
            }
        });
        assertThat(written.keySet()).as("only the secret's default is not written out")
                .hasSize(properties.size() - 1).doesNotContain("idempotency.downstream-key-secret");
        IdempotencyProperties bound = new Binder(new MapConfigurationPropertySource(written))
                .bind("idempotency", Bindable.ofInstance(new IdempotencyProperties())).get();
        assertThat(bound).usingRecursiveComparison().isEqualTo(new IdempotencyProperties());
    }

    @Test
    void theReadmeDescribesEveryAttributeOfTheAnnotation() throws Exception {
        Pattern attributeRow = Pattern.compile("^\\| `([a-zA-Z]+)` \\|");
        TreeSet<String> described = new TreeSet<>();
        boolean inTable = false;
        for (String line : Files.readAllLines(Path.of("..", "README.md"))) {
            if (line.startsWith("Options on the annotation")) {
                inTable = true;
            } else if (inTable && line.startsWith("Expressions see")) {
                break;
            }
            Matcher row = attributeRow.matcher(line);
            if (inTable && row.find()) {
                described.add(row.group(1));
            }
        }
        TreeSet<String> attributes = new TreeSet<>();
        for (Method attribute : Idempotent.class.getDeclaredMethods()) {
            attributes.add(attribute.getName());
        }
        assertThat(described).isEqualTo(attributes);
    }

    @Test
    void aBareNumberIsMillisecondsOrBytesAsTheReadmeWarns() {
        IdempotencyProperties bound = new Binder(new MapConfigurationPropertySource(Map.of(
                "idempotency.sweeper.interval", "30", "idempotency.max-request-body-size", "1024")))
                .bind("idempotency", Bindable.ofInstance(new IdempotencyProperties())).get();

        assertThat(bound.getSweeper().getInterval()).isEqualTo(Duration.ofMillis(30));
        assertThat(bound.getMaxRequestBodySize()).isEqualTo(DataSize.ofBytes(1024));
    }
}
