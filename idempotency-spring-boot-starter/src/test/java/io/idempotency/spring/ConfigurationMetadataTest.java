package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import tools.jackson.databind.JsonNode;
import tools.jackson.databind.json.JsonMapper;

import java.io.InputStream;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/** The metadata IDEs show for the properties: every default there, and the same as the code's. */
class ConfigurationMetadataTest {

    @Test
    void everyPropertyShowsTheDefaultTheCodeHas() throws Exception {
        Map<String, JsonNode> defaults = new HashMap<>();
        List<String> withoutDefault = new ArrayList<>();
        try (InputStream in = getClass().getResourceAsStream("/META-INF/spring-configuration-metadata.json")) {
            for (JsonNode property : JsonMapper.builder().build().readTree(in).get("properties")) {
                String name = property.get("name").asString();
                if (property.has("defaultValue")) {
                    defaults.put(name, property.get("defaultValue"));
                } else {
                    withoutDefault.add(name);
                }
            }
        }
        IdempotencyProperties properties = new IdempotencyProperties();

        assertThat(withoutDefault).as("only the secret, whose default is not advertised")
                .containsExactly("idempotency.downstream-key-secret");
        assertThat(strings(defaults.get("idempotency.methods"))).isEqualTo(properties.getMethods());
        assertThat(strings(defaults.get("idempotency.replayed-headers"))).isEqualTo(properties.getReplayedHeaders());
        assertThat(defaults.get("idempotency.problem-type-base").asString()).isEqualTo(properties.getProblemTypeBase());
        assertThat(defaults.get("idempotency.jdbc.table-name").asString())
                .isEqualTo(properties.getJdbc().getTableName());
    }

    @Test
    void descriptionsArePlainTextAsIdesShowThem() throws Exception {
        // the processor copies a field's Javadoc as it is: a tag such as {@code …} would show literally in completion
        List<String> tagged = new ArrayList<>();
        try (InputStream in = getClass().getResourceAsStream("/META-INF/spring-configuration-metadata.json")) {
            for (JsonNode property : JsonMapper.builder().build().readTree(in).get("properties")) {
                assertThat(property.has("description")).as(property.get("name").asString()).isTrue();
                if (property.get("description").asString().contains("{@")) {
                    tagged.add(property.get("name").asString());
                }
            }
        }
        assertThat(tagged).isEmpty();
    }

    private static List<String> strings(JsonNode array) {
        List<String> values = new ArrayList<>();
        array.forEach(value -> values.add(value.asString()));
        return values;
    }
}
