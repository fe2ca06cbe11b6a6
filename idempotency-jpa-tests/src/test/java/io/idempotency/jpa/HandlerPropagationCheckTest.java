package io.idempotency.jpa;

import io.idempotency.core.Idempotent;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.runner.WebApplicationContextRunner;
import org.springframework.transaction.annotation.Isolation;
import org.springframework.transaction.annotation.Propagation;
import org.springframework.transaction.annotation.Transactional;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * An {@code @Idempotent} handler whose own {@code @Transactional} leaves the request's transaction: its writes would
 * commit (or run) apart from the claim and the stored answer, and stay when the request is rolled back.
 */
class HandlerPropagationCheckTest {

    private static final TestPostgres.Database DATABASE = JpaContexts.withPurchases();

    private final WebApplicationContextRunner contextRunner = JpaContexts.contextRunner(DATABASE);

    @Test
    void aHandlerThatLeavesTheRequestsTransactionStopsTheApplication() {
        contextRunner.withUserConfiguration(EscapingController.class, EscapingClassController.class).run(context -> {
            assertThat(context).hasFailed();
            assertThat(context.getStartupFailure()).message().contains(
                    "EscapingController.requiresNew()", "EscapingController.notSupported()",
                    "EscapingController.never()", "EscapingClassController.inherited()", "REQUIRES_NEW",
                    "NOT_SUPPORTED", "NEVER", "EscapingController.nested()", "propagation NESTED")
                    .doesNotContain("joins()", "mandatory()", "plain()");
        });
    }

    /**
     * A handler asking for REPEATABLE READ or SERIALIZABLE joins the request's transaction, which runs at READ
     * COMMITTED: Spring ignores the isolation of a transaction it joins, so it would silently lose what it asked for
     * (a balance check under SERIALIZABLE would allow write skew).
     */
    @Test
    void aHandlerAskingForAStricterIsolationThanTheRequestsTransactionStopsTheApplication() {
        contextRunner.withUserConfiguration(IsolatedController.class, IsolatedClassController.class).run(context -> {
            assertThat(context).hasFailed();
            assertThat(context.getStartupFailure()).message().contains(
                    "IsolatedController.serializable()", "IsolatedController.repeatableRead()",
                    "IsolatedClassController.inheritedIsolation()", "isolation SERIALIZABLE",
                    "isolation REPEATABLE_READ", "READ COMMITTED").doesNotContain("readCommitted()");
        });
    }

    @Test
    void handlersThatRunInTheRequestsTransactionAreAccepted() {
        contextRunner.withUserConfiguration(JoiningController.class).run(context -> assertThat(context).hasNotFailed());
    }

    @RestController
    static class EscapingController {
        @PostMapping("/requires-new")
        @Idempotent
        @Transactional(propagation = Propagation.REQUIRES_NEW)
        public String requiresNew() {
            return "";
        }

        @PostMapping("/not-supported")
        @Idempotent
        @Transactional(propagation = Propagation.NOT_SUPPORTED)
        public String notSupported() {
            return "";
        }

        @PostMapping("/never")
        @Idempotent
        @jakarta.transaction.Transactional(jakarta.transaction.Transactional.TxType.NEVER)
        public String never() {
            return "";
        }

        /** A savepoint in the request's transaction, which JPA's transaction manager cannot make. */
        @PostMapping("/nested")
        @Idempotent
        @Transactional(propagation = Propagation.NESTED)
        public String nested() {
            return "";
        }
    }

    @RestController
    @Transactional(propagation = Propagation.REQUIRES_NEW)
    static class EscapingClassController {
        @PostMapping("/inherited")
        @Idempotent
        public String inherited() {
            return "";
        }
    }

    @RestController
    static class JoiningController {
        @PostMapping("/joins")
        @Idempotent
        @Transactional
        public String joins() {
            return "";
        }

        @PostMapping("/mandatory")
        @Idempotent
        @Transactional(propagation = Propagation.MANDATORY)
        public String mandatory() {
            return "";
        }

        @PostMapping("/plain")
        @Idempotent
        public String plain() {
            return "";
        }

        @PostMapping("/read-committed")
        @Idempotent
        @Transactional(isolation = Isolation.READ_COMMITTED)
        public String readCommitted() {
            return "";
        }
    }

    @RestController
    static class IsolatedController {
        @PostMapping("/serializable")
        @Idempotent
        @Transactional(isolation = Isolation.SERIALIZABLE)
        public String serializable() {
            return "";
        }

        @PostMapping("/repeatable-read")
        @Idempotent
        @Transactional(isolation = Isolation.REPEATABLE_READ)
        public String repeatableRead() {
            return "";
        }

        @PostMapping("/read-committed-too")
        @Idempotent
        @Transactional(isolation = Isolation.READ_COMMITTED)
        public String readCommitted() {
            return "";
        }
    }

    @RestController
    @Transactional(isolation = Isolation.SERIALIZABLE)
    static class IsolatedClassController {
        @PostMapping("/inherited-isolation")
        @Idempotent
        public String inheritedIsolation() {
            return "";
        }
    }
}
