package org.springframework.pulsar.annotation;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * A stand-in, under its real name, for the annotation of Spring for Apache Pulsar, which the tests do not depend on:
 * the startup check knows such annotations by name only.
 */
@Target(ElementType.METHOD)
@Retention(RetentionPolicy.RUNTIME)
public @interface PulsarReader {
}
