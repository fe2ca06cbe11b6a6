package io.awspring.cloud.sqs.annotation;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * A stand-in, under its real name, for the annotation of Spring Cloud AWS, which the tests do not depend on: the
 * startup check knows such annotations by name only.
 */
@Target(ElementType.METHOD)
@Retention(RetentionPolicy.RUNTIME)
public @interface SqsListener {
}
