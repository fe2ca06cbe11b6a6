package io.idempotency.sample.payment;

import org.springframework.core.MethodParameter;
import org.springframework.http.HttpInputMessage;
import org.springframework.http.converter.HttpMessageConverter;
import org.springframework.web.bind.annotation.ControllerAdvice;
import org.springframework.web.servlet.mvc.method.annotation.RequestBodyAdviceAdapter;

import java.lang.reflect.Type;

/**
 * Checks a provider notification as soon as its body is read: the signature first (401), then the fields (400). A
 * {@code version} that is not a JSON integer is refused (400) earlier still, while the body is read
 * ({@link ProviderNotification.JsonInteger}).
 * Spring MVC reads the body while it binds the handler's arguments, before the {@code @Idempotent} advice claims the
 * key, so a refused notification claims nothing and writes nothing — and a forged one cannot fetch the stored answer
 * of an event whose id it guessed.
 */
@ControllerAdvice(assignableTypes = ProviderNotificationController.class)
public class ProviderNotificationChecks extends RequestBodyAdviceAdapter {

    private final ProviderSignatures signatures;

    /** @param signatures the provider's signing scheme and secret */
    public ProviderNotificationChecks(ProviderSignatures signatures) {
        this.signatures = signatures;
    }

    @Override
    public boolean supports(MethodParameter parameter, Type targetType,
                            Class<? extends HttpMessageConverter<?>> converterType) {
        return parameter.getParameterType() == ProviderNotification.class;
    }

    @Override
    public Object afterBodyRead(Object body, HttpInputMessage inputMessage, MethodParameter parameter,
                                Type targetType, Class<? extends HttpMessageConverter<?>> converterType) {
        // A JSON null reads as no object: left to Spring MVC, which refuses a missing required body with 400.
        if (body instanceof ProviderNotification notification) {
            if (!signatures.verify(notification)) {
                throw NotificationRefusedException.badSignature();
            }
            notification.validate();
        }
        return body;
    }
}
