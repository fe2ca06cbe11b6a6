package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.testkit.TestPostgres;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.FactoryBean;
import org.springframework.boot.test.context.runner.WebApplicationContextRunner;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.Import;
import org.springframework.context.annotation.Scope;
import org.springframework.http.MediaType;
import org.springframework.http.ResponseEntity;
import org.springframework.stereotype.Service;
import org.springframework.transaction.annotation.Transactional;
import org.springframework.validation.annotation.Validated;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestMapping;
import org.springframework.web.bind.annotation.RequestMethod;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.servlet.mvc.method.annotation.RequestMappingHandlerMapping;

import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/** Applications shaped as real ones are: the startup checks let them start. */
class RealisticApplicationsStartTest {

    private static final TestPostgres.Database DATABASE = TestPostgres.newDatabase();

    private final WebApplicationContextRunner runner = TestDatabases.contextRunner(DATABASE)
            .withConfiguration(org.springframework.boot.autoconfigure.AutoConfigurations.of(
                    org.springframework.boot.autoconfigure.aop.AopAutoConfiguration.class,
                    org.springframework.boot.validation.autoconfigure.ValidationAutoConfiguration.class));

    @Test
    void aGenericBaseControllerServesTwoRoutes() {
        runner.withUserConfiguration(OrderController.class, CustomerController.class, ItemController.class)
                .run(context -> assertThat(context).hasNotFailed());
    }

    @Test
    void aControllerWithSeveralPostMappingsUnderOneClassLevelRoute() {
        runner.withUserConfiguration(AccountsController.class).run(context -> assertThat(context).hasNotFailed());
    }

    @Test
    void theSameRouteAsHtmlWithoutAndAsJsonWithTheAnnotation() {
        runner.withUserConfiguration(PageAndApiController.class).run(context -> assertThat(context).hasNotFailed());
    }

    @Test
    void oneHandlerForPostAndPut() {
        runner.withUserConfiguration(PostAndPutController.class).run(context -> assertThat(context).hasNotFailed());
    }

    @Test
    void transactionalControllers() {
        runner.withUserConfiguration(TransactionalController.class, ReadOnlyController.class)
                .run(context -> assertThat(context).hasNotFailed());
    }

    @Test
    void aValidatedControllerIsProxiedByClass() {
        runner.withUserConfiguration(ValidatedController.class).run(context -> assertThat(context).hasNotFailed());
    }

    @Test
    void lazyBeans() {
        // the property alone does nothing to a context runner: SpringApplication reads it and adds this
        runner.withInitializer(context -> context.addBeanFactoryPostProcessor(
                        new org.springframework.boot.LazyInitializationBeanFactoryPostProcessor()))
                .withUserConfiguration(AccountsController.class, OrderController.class, CustomerController.class,
                        PrototypeService.class, Factory.class)
                .run(context -> assertThat(context).hasNotFailed());
    }

    @Test
    void prototypeAndFactoryBeans() {
        runner.withUserConfiguration(PrototypeService.class, Factory.class).withPropertyValues("payouts.lease=1h")
                .run(context -> assertThat(context).hasNotFailed());
    }

    @Test
    void aSecondHandlerMapping() {
        runner.withUserConfiguration(AccountsController.class, SecondMapping.class)
                .run(context -> assertThat(context).hasNotFailed());
    }

    @Test
    void aWholeApplicationWithAProfileThatSetsALease() {
        try (var context = new org.springframework.boot.builder.SpringApplicationBuilder(WholeApplication.class)
                .profiles("eu")
                .properties(DATABASE.springPropertyValues().toArray(String[]::new))
                .properties("spring.config.name=realistic", "spring.main.lazy-initialization=true", "server.port=0")
                .run()) {
            assertThat(context.getBean(IdempotencyStartupChecks.class)).isNotNull();
        }
    }

    @org.springframework.boot.SpringBootConfiguration
    @org.springframework.boot.autoconfigure.EnableAutoConfiguration
    @Import({OrderController.class, CustomerController.class, TransactionalController.class, ProfileLeasedService.class,
            RequestScopedController.class, ValidatedController.class, PageAndApiController.class})
    static class WholeApplication {
    }

    @Service
    static class ProfileLeasedService {
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "${payouts.lease}")
        public String payout() {
            return "{}";
        }
    }

    @RestController
    @org.springframework.web.context.annotation.RequestScope
    static class RequestScopedController {
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "${payouts.lease}")
        @PostMapping("/payouts")
        public String payout() {
            return "{}";
        }
    }

    public static class Order {
        public String note;
    }

    public abstract static class AbstractCrudController<T> {
        @Idempotent
        @PostMapping
        public ResponseEntity<T> create(@RequestBody T body) {
            return ResponseEntity.ok(body);
        }
    }

    @RestController
    @RequestMapping("/orders")
    static class OrderController extends AbstractCrudController<Order> {
    }

    @RestController
    @RequestMapping("/customers")
    static class CustomerController extends AbstractCrudController<Map<String, Object>> {
    }

    @RestController
    @RequestMapping("/items")
    static class ItemController extends AbstractCrudController<Order> {
        @Override
        @Idempotent
        @PostMapping
        public ResponseEntity<Order> create(@RequestBody Order body) {
            return ResponseEntity.ok(body);
        }
    }

    @RestController
    @RequestMapping(path = "/accounts", produces = MediaType.APPLICATION_JSON_VALUE)
    static class AccountsController {
        @Idempotent
        @PostMapping
        public String open() {
            return "{}";
        }

        @Idempotent
        @PostMapping("/{id}/deposits")
        public String deposit() {
            return "{}";
        }

        @Idempotent
        @PostMapping("/{id}/withdrawals")
        public String withdraw() {
            return "{}";
        }
    }

    @org.springframework.stereotype.Controller
    static class PageAndApiController {
        @PostMapping(path = "/tickets", produces = MediaType.TEXT_HTML_VALUE)
        public String form() {
            return "tickets";
        }

        @Idempotent
        @PostMapping(path = "/tickets", produces = MediaType.APPLICATION_JSON_VALUE)
        @org.springframework.web.bind.annotation.ResponseBody
        public String create() {
            return "{}";
        }
    }

    @RestController
    static class PostAndPutController {
        @Idempotent(methods = {"POST", "PUT"})
        @RequestMapping(path = "/documents", method = {RequestMethod.POST, RequestMethod.PUT})
        public String save() {
            return "{}";
        }
    }

    @RestController
    @Transactional
    static class TransactionalController {
        @Idempotent
        @PostMapping("/transfers")
        public String transfer() {
            return "{}";
        }
    }

    @RestController
    @Transactional(readOnly = true)
    static class ReadOnlyController {
        @Idempotent
        @Transactional
        @PostMapping("/payments")
        public String pay() {
            return "{}";
        }
    }

    @RestController
    @Validated
    static class ValidatedController {
        @Idempotent
        @PostMapping("/shipments")
        public String ship(@jakarta.validation.constraints.NotNull @RequestBody String body) {
            return "{}";
        }
    }

    @Service
    @Scope("prototype")
    static class PrototypeService {
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "${payouts.lease:45s}")
        public String payout() {
            return "{}";
        }
    }

    public interface Charges {
        @Idempotent(mode = IdempotencyMode.INTENT_FIRST, lease = "${charges.lease:1m}")
        String charge();
    }

    @Configuration
    static class Factory {
        @Bean
        FactoryBean<Charges> charges() {
            return new FactoryBean<>() {
                @Override
                public Charges getObject() {
                    return () -> "{}";
                }

                @Override
                public Class<?> getObjectType() {
                    return Charges.class;
                }
            };
        }
    }

    @Configuration
    @Import(AdminController.class)
    static class SecondMapping {
        @Bean
        RequestMappingHandlerMapping adminHandlerMapping() {
            RequestMappingHandlerMapping mapping = new RequestMappingHandlerMapping() {
                @Override
                protected boolean isHandler(Class<?> beanType) {
                    return beanType == AdminController.class;
                }
            };
            mapping.setOrder(-1);
            return mapping;
        }
    }

    @RestController
    @RequestMapping("/admin")
    static class AdminController {
        @Idempotent
        @PostMapping("/refunds")
        public String refund() {
            return "{}";
        }
    }
}
