package io.idempotency.sample.payment;

import org.springframework.context.annotation.Configuration;
import org.springframework.core.MethodParameter;
import org.springframework.http.HttpInputMessage;
import org.springframework.http.converter.HttpMessageConverter;
import org.springframework.web.bind.annotation.ControllerAdvice;
import org.springframework.web.bind.support.WebDataBinderFactory;
import org.springframework.web.context.request.NativeWebRequest;
import org.springframework.web.method.support.HandlerMethodArgumentResolver;
import org.springframework.web.method.support.ModelAndViewContainer;
import org.springframework.web.servlet.config.annotation.WebMvcConfigurer;
import org.springframework.web.servlet.mvc.method.annotation.RequestBodyAdviceAdapter;

import java.lang.reflect.Type;
import java.util.List;

/**
 * Checks of {@code POST /charges} that must happen before the key is claimed.
 *
 * <p>The endpoint runs in the starter's intent-first mode: the claim is committed before the handler runs, and an
 * exception thrown by the handler counts as an unknown outcome that holds the key until its lease runs out. A request
 * that is merely invalid must not do that. So the body is validated and the {@code X-Chaos} header parsed while
 * Spring MVC binds the handler's arguments — which happens before the {@code @Idempotent} advice runs — and a refusal
 * there (400 problem+json) claims nothing, writes nothing, and leaves the key usable for the corrected request.
 */
@Configuration(proxyBeanMethods = false)
public class ChargeWebConfiguration implements WebMvcConfigurer {

    private final FaultInjector faults;

    /** @param faults parses the {@code X-Chaos} header */
    public ChargeWebConfiguration(FaultInjector faults) {
        this.faults = faults;
    }

    @Override
    public void addArgumentResolvers(List<HandlerMethodArgumentResolver> resolvers) {
        resolvers.add(new HandlerMethodArgumentResolver() {
            @Override
            public boolean supportsParameter(MethodParameter parameter) {
                return parameter.getParameterType() == ChargeFaults.class;
            }

            @Override
            public Object resolveArgument(MethodParameter parameter, ModelAndViewContainer mavContainer,
                                          NativeWebRequest webRequest, WebDataBinderFactory binderFactory) {
                return new ChargeFaults(faults.parseForCharges(webRequest.getHeader(FaultInjector.HEADER)));
            }
        });
    }

    /** Validates the body of {@code POST /charges} as soon as it is read (400 {@code invalid-payment} otherwise). */
    @ControllerAdvice(assignableTypes = ChargeController.class)
    static class ChargeRequestValidation extends RequestBodyAdviceAdapter {

        @Override
        public boolean supports(MethodParameter parameter, Type targetType,
                                Class<? extends HttpMessageConverter<?>> converterType) {
            return parameter.getParameterType() == PaymentRequest.class;
        }

        @Override
        public Object afterBodyRead(Object body, HttpInputMessage inputMessage, MethodParameter parameter,
                                    Type targetType, Class<? extends HttpMessageConverter<?>> converterType) {
            // A JSON null reads as no object: left to Spring MVC, which refuses a missing required body with 400.
            if (body instanceof PaymentRequest request) {
                request.validate(); // throws InvalidPaymentException, answered 400
            }
            return body;
        }
    }
}
