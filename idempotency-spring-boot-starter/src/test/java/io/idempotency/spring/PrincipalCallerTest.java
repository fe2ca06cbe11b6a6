package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.mock.web.MockHttpServletRequest;

import java.security.Principal;

import static org.assertj.core.api.Assertions.assertThat;

@ExtendWith(OutputCaptureExtension.class)
class PrincipalCallerTest {

    @Test
    void namesThePrincipalAndLeavesAnonymousCallersUnnamed(CapturedOutput output) {
        PrincipalCaller caller = new PrincipalCaller();

        assertThat(caller.resolve(request(() -> "alice"))).isEqualTo("alice");
        assertThat(caller.resolve(request(null))).isEmpty();
        assertThat(output).doesNotContain("without a name");
    }

    @Test
    void anAuthenticatedCallerWithoutANameIsSaidToShareTheAnonymousNamespaceOnce(CapturedOutput output) {
        PrincipalCaller caller = new PrincipalCaller();

        // e.g. a JWT without the claim the principal's name is read from
        assertThat(caller.resolve(request(() -> null))).isEmpty();
        assertThat(caller.resolve(request(() -> ""))).isEmpty();

        assertThat(output).containsOnlyOnce("has a principal without a name")
                .contains("POST /payments", "share the namespace of anonymous callers", "CallerResolver");
    }

    private static MockHttpServletRequest request(Principal principal) {
        MockHttpServletRequest request = new MockHttpServletRequest("POST", "/payments");
        request.setUserPrincipal(principal);
        return request;
    }
}
