package io.idempotency.core;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

class StoragePolicyTest {

    @ParameterizedTest
    @ValueSource(ints = {200, 201, 202, 204, 299, 300, 301, 302, 303, 307, 308, 399, 400, 402, 403, 404, 410, 413,
            422, 499})
    void defaultStoresFinalAnswers(int status) {
        assertThat(StoragePolicy.DEFAULT.isStorable(status)).isTrue();
    }

    @ParameterizedTest
    @ValueSource(ints = {
            100, 101, 199,                 // informational: never a handler's final answer
            304, 412,                      // answer a conditional request: depend on headers not fingerprinted
            428,                           // asks for the request again with a conditional header
            401, 407,                      // answer the credentials sent, not fingerprinted; challenges never stored
            408, 409, 425, 429,            // 4xx that mean "try again"
            500, 502, 503, 504, 599})
    void defaultDoesNotStoreRetryableOrNonFinalAnswers(int status) {
        assertThat(StoragePolicy.DEFAULT.isStorable(status)).isFalse();
    }
}
