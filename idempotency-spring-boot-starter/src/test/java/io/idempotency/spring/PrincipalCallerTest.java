package io.idempotency.spring;

import org.junit.jupiter.api.Test;
import org.springframework.mock.web.MockHttpServletRequest;

import java.security.Principal;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatIllegalStateException;

class PrincipalCallerTest {

    @Test
    void namesThePrincipalAndLeavesAnonymousCallersUnnamed() {
        PrincipalCaller caller = new PrincipalCaller();

        assertThat(caller.resolve(request(() -> "alice"))).isEqualTo("alice");
        assertThat(caller.resolve(request(null))).isEmpty();
    }

    @Test
    void anAuthenticatedCallerWithoutANameIsRefusedSayingWhatToDo() {
        PrincipalCaller caller = new PrincipalCaller();

        // e.g. a JWT without the claim the principal's name is read from
        for (Principal nameless : new Principal[] {() -> null, () -> ""}) {
            assertThatIllegalStateException().isThrownBy(() -> caller.resolve(request(nameless)))
                    .withMessageContaining("POST /payments")
                    .withMessageContaining("principal without a name")
                    .withMessageContaining("CallerResolver");
        }
    }

    private static MockHttpServletRequest request(Principal principal) {
        MockHttpServletRequest request = new MockHttpServletRequest("POST", "/payments");
        request.setUserPrincipal(principal);
        return request;
    }
}
