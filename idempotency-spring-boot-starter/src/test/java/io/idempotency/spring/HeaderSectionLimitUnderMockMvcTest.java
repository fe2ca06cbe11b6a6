package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.webmvc.test.autoconfigure.AutoConfigureMockMvc;
import org.springframework.context.annotation.Import;
import org.springframework.http.ResponseEntity;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.test.web.servlet.MockMvc;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.RestController;

import static org.assertj.core.api.Assertions.assertThat;
import static org.springframework.test.web.servlet.request.MockMvcRequestBuilders.post;
import static org.springframework.test.web.servlet.result.MockMvcResultMatchers.jsonPath;
import static org.springframework.test.web.servlet.result.MockMvcResultMatchers.status;

/**
 * An answer whose headers the application's embedded server would not send (Tomcat's 8 KB header section, by
 * default) is refused under MockMvc as it is on the server: rolled back and answered 500
 * {@code idempotency-response-too-large}, not stored. The mock web environment starts no server, but the application
 * runs on the one whose factory it configures, and a test that passes under MockMvc must not answer otherwise there.
 */
@SpringBootTest(classes = HeaderSectionLimitUnderMockMvcTest.App.class)
@AutoConfigureMockMvc
class HeaderSectionLimitUnderMockMvcTest {

    static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    @DynamicPropertySource
    static void database(DynamicPropertyRegistry registry) {
        DATABASE.springProperties().forEach((name, value) -> registry.add(name, () -> value));
    }

    @SpringBootConfiguration
    @EnableAutoConfiguration
    @Import(LinksController.class)
    static class App {
    }

    @RestController
    public static class LinksController {

        @PostMapping("/links")
        @Idempotent
        public ResponseEntity<String> links(@RequestParam int size) {
            return ResponseEntity.ok().header("Link", "<https://example.com/" + "a".repeat(size) + ">").body("ok");
        }
    }

    @Autowired
    MockMvc mvc;

    @Test
    void anAnswerTheServerWouldNotSendIsRefusedAsTheServerRefusesIt() throws Exception {
        mvc.perform(post("/links").param("size", "9000").header("Idempotency-Key", "big"))
                .andExpect(status().isInternalServerError())
                .andExpect(jsonPath("$.type").value(
                        "https://idempotency-starter.github.io/problems/idempotency-response-too-large"));
        assertThat(DATABASE.queryLong("select count(*) from idempotency_keys where idempotency_key = 'big'")).isZero();

        mvc.perform(post("/links").param("size", "100").header("Idempotency-Key", "small"))
                .andExpect(status().isOk());
    }
}
