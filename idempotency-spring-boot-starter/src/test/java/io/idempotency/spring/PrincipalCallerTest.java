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

    @Test
    void aPrincipalNamedByTheIdentityOfItsPrincipalObjectIsRefusedSayingWhatToDo() {
        PrincipalCaller caller = new PrincipalCaller();
        Object client = new Object();

        // as Spring Security names an authentication whose principal object is of no kind it takes a name from
        Token token = new Token(client, client.toString());
        assertThatIllegalStateException().isThrownBy(() -> caller.resolve(request(token)))
                .withMessageContaining("POST /payments")
                .withMessageContaining("named by its object's identity")
                .withMessageContaining(client.toString())
                .withMessageContaining("CallerResolver");
    }

    @Test
    void aNameThatOnlyLooksLikeAnObjectsIdentityStands() {
        PrincipalCaller caller = new PrincipalCaller();
        String chosen = "java.lang.Object@1b6d3586"; // a user name, say

        assertThat(caller.resolve(request(new Token(chosen, chosen)))).isEqualTo(chosen);
        assertThat(caller.resolve(request(new Token(new Object(), chosen)))).isEqualTo(chosen);
        assertThat(caller.resolve(request(new Token(null, chosen)))).isEqualTo(chosen);
        assertThat(caller.resolve(request(() -> chosen))).isEqualTo(chosen);
    }

    /** A principal named after a principal object, as Spring Security's authentications are. */
    public static final class Token implements Principal {

        private final Object principal;
        private final String name;

        Token(Object principal, String name) {
            this.principal = principal;
            this.name = name;
        }

        public Object getPrincipal() {
            return principal;
        }

        @Override
        public String getName() {
            return name;
        }
    }

    private static MockHttpServletRequest request(Principal principal) {
        MockHttpServletRequest request = new MockHttpServletRequest("POST", "/payments");
        request.setUserPrincipal(principal);
        return request;
    }
}
