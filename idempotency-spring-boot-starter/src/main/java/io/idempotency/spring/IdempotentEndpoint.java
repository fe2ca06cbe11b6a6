package io.idempotency.spring;

import io.idempotency.core.Idempotent;
import io.idempotency.core.IdempotencyEngine;
import io.idempotency.core.IdempotencyMode;
import io.idempotency.core.StoragePolicy;
import org.springframework.beans.BeanUtils;
import org.springframework.boot.convert.DurationStyle;
import org.springframework.core.DefaultParameterNameDiscoverer;
import org.springframework.core.ResolvableType;
import org.springframework.core.env.PropertyResolver;
import org.springframework.expression.Expression;
import org.springframework.expression.spel.SpelNode;
import org.springframework.expression.spel.ast.Assign;
import org.springframework.expression.spel.ast.BeanReference;
import org.springframework.expression.spel.ast.CompoundExpression;
import org.springframework.expression.spel.ast.ConstructorReference;
import org.springframework.expression.spel.ast.FunctionReference;
import org.springframework.expression.spel.ast.Indexer;
import org.springframework.expression.spel.ast.InlineMap;
import org.springframework.expression.spel.ast.MethodReference;
import org.springframework.expression.spel.ast.Projection;
import org.springframework.expression.spel.ast.PropertyOrFieldReference;
import org.springframework.expression.spel.ast.Selection;
import org.springframework.expression.spel.ast.TypeReference;
import org.springframework.expression.spel.ast.VariableReference;
import org.springframework.expression.spel.standard.SpelExpression;
import org.springframework.expression.spel.standard.SpelExpressionParser;
import org.springframework.util.ReflectionUtils;

import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.stream.Collectors;

/** What one {@code @Idempotent} method asks for, with expressions parsed once. Immutable. */
final class IdempotentEndpoint {

    private static final SpelExpressionParser PARSER = new SpelExpressionParser();

    /** The method that carries the annotation, whose parameters the expressions name. */
    final Method method;
    final String scope;
    final boolean keyRequired;
    final Expression keyExpression;
    final List<Expression> fingerprintExpressions;
    /** Whether an expression reads {@code #body}: a body they cannot read as one text is then refused. */
    final boolean readsBody;
    /**
     * Whether the key expression reads {@code #body}: a key read from elsewhere (a header, a parameter, the path) is
     * looked for before the body is read.
     */
    final boolean keyReadsBody;
    final Set<String> methods;
    final StoragePolicy storagePolicy;
    final IdempotencyMode mode;
    final Duration lease;

    private IdempotentEndpoint(Method method, String scope, boolean keyRequired, Expression keyExpression,
                               List<Expression> fingerprintExpressions, boolean readsBody, boolean keyReadsBody,
                               Set<String> methods, StoragePolicy storagePolicy, IdempotencyMode mode,
                               Duration lease) {
        this.method = method;
        this.mode = mode;
        this.lease = lease;
        this.scope = scope;
        this.keyRequired = keyRequired;
        this.keyExpression = keyExpression;
        this.fingerprintExpressions = fingerprintExpressions;
        this.readsBody = readsBody;
        this.keyReadsBody = keyReadsBody;
        this.methods = methods;
        this.storagePolicy = storagePolicy;
    }

    /**
     * @param placeholders resolves {@code ${…}} placeholders in the annotation's lease (the application's
     *                     environment)
     * @throws IllegalStateException if an expression does not parse or reads a variable no evaluation has, the lease
     *                               is not a positive duration (or names
     *                               a property that is not set) or is set on an endpoint that is not intent-first,
     *                               or the storage policy cannot be created; the
     *                               startup checks call this for every endpoint, so such mistakes stop the start
     */
    static IdempotentEndpoint of(Method method, Idempotent annotation, Collection<String> defaultMethods,
                                 StoragePolicy defaultPolicy, Duration defaultLease, PropertyResolver placeholders) {
        try {
            Expression key = annotation.key().isBlank() ? null : PARSER.parseExpression(annotation.key());
            List<Expression> fingerprint = Arrays.stream(annotation.fingerprint())
                    .map(PARSER::parseExpression).toList();
            unknownVariable(method, key, fingerprint).ifPresent(name -> {
                throw new IllegalArgumentException("an expression reads #" + name + ", which is neither a parameter"
                        + " of the method (" + parameterNames(method) + ") nor one of #body, #path, #headers and"
                        + " #params: it would be null for every request, so every request would lack its key, or"
                        + " every request be one fingerprint and another request be answered with the first one's"
                        + " answer. Correct the name; a parameter is known by name only when the code is compiled"
                        + " with -parameters, else as #p0, #p1…");
            });
            readOfTheRoot(key, fingerprint).ifPresent(read -> {
                throw new IllegalArgumentException("an expression reads " + read + ": it fails or"
                        + " reads null on every request, so every request would lack its key (and run without"
                        + " idempotency where the key is optional), or be refused for its fingerprint, or have the"
                        + " fingerprint of every other (another request under a key answered with the first one's"
                        + " answer). Read the request through #body, #path, #headers and #params, and a parameter as"
                        + " #name (was a '#' left out?)");
            });
            if (key instanceof SpelExpression spel && readsNothing(spel.getAST())) {
                throw new IllegalArgumentException("the key expression " + annotation.key() + " reads nothing of the"
                        + " request: every request would have the same key, and every one after the first be answered"
                        + " with the first one's answer, or refused as another request under its key. Read the key"
                        + " from the request: #body.eventId, #headers['X-Event-Id'], a parameter as #name (was the"
                        + " whole expression quoted?)");
            }
            if (!fingerprint.isEmpty() && fingerprint.stream()
                    .allMatch(expression -> expression instanceof SpelExpression spel && readsNothing(spel.getAST()))) {
                throw new IllegalArgumentException("the fingerprint " + Arrays.toString(annotation.fingerprint())
                        + " reads nothing of the request: every request would have one fingerprint, and another request"
                        + " under a key be answered with the first one's answer. Name what identifies the request:"
                        + " #body.amount, #params['orderId'], a parameter as #name (was an expression quoted?)");
            }
            instanceNamingParameter(method, key, fingerprint).ifPresent(parameter -> {
                throw new IllegalArgumentException("an expression is #" + parameter.expression() + " alone, a "
                        + parameter.type().getTypeName() + (parameter.held() == null ? "" : ", whose text holds "
                        + parameter.held()) + ", whose toString() is Object's: it names the instance,"
                        + " not what it holds, so every request, each retry too, would have another key or fingerprint"
                        + " (a retry refused as a mismatch instead of answered); name the fields that identify the"
                        + " request (#" + parameter.expression() + ".amount, say), or give the class a toString()");
            });
            Collection<String> methods = annotation.methods().length == 0
                    ? defaultMethods : Arrays.asList(annotation.methods());
            if (annotation.methods().length > 0) {
                String unknown = unknownMethods(methods);
                if (unknown != null) {
                    throw new IllegalArgumentException("methods names " + unknown + ", which is no registered HTTP"
                            + " method (e.g. POST, PATCH, PUT, DELETE): the requests meant would run without idempotency");
                }
            }
            StoragePolicy policy = annotation.storagePolicy() == StoragePolicy.class
                    ? defaultPolicy : BeanUtils.instantiateClass(annotation.storagePolicy());
            if (!annotation.lease().isBlank() && annotation.mode() != IdempotencyMode.INTENT_FIRST) {
                // only an intent-first claim is held by a lease: written without the mode, the lease would be ignored
                // and the handler's call to a third party would run with no intent committed before it
                throw new IllegalArgumentException("a lease is set (" + annotation.lease() + "), but only an"
                        + " INTENT_FIRST claim is held by one, and the mode is " + annotation.mode() + ": add mode ="
                        + " IdempotencyMode.INTENT_FIRST if the method calls a third party, or remove the lease");
            }
            String leaseText = annotation.lease().isBlank() ? ""
                    : placeholders.resolveRequiredPlaceholders(annotation.lease()).trim();
            Duration lease = leaseText.isEmpty() ? defaultLease : DurationStyle.detectAndParse(leaseText);
            if (lease.isNegative() || lease.isZero()) {
                throw new IllegalArgumentException("the lease must be positive: " + annotation.lease()
                        + (leaseText.equals(annotation.lease()) ? "" : " (" + leaseText + ")"));
            }
            if (lease.compareTo(IdempotencyEngine.MIN_LEASE) < 0) {
                throw new IllegalArgumentException("the lease must be at least 1ms, the precision claims are held to: "
                        + annotation.lease() + (leaseText.equals(annotation.lease()) ? "" : " (" + leaseText + ")"));
            }
            return new IdempotentEndpoint(method, annotation.scope(), annotation.keyRequired(), key, fingerprint,
                    readsBody(key, fingerprint), readsBody(key, List.of()),
                    methods.stream().map(IdempotentEndpoint::methodName).collect(Collectors.toUnmodifiableSet()),
                    policy, annotation.mode(), lease);
        } catch (RuntimeException e) {
            throw new IllegalStateException("invalid @Idempotent on " + method + ": " + e.getMessage(), e);
        }
    }

    /** The variables the advice sets for every evaluation, besides the method's parameters. */
    private static final Set<String> REQUEST_VARIABLES = Set.of("body", "path", "headers", "params");

    private static final DefaultParameterNameDiscoverer PARAMETER_NAMES = new DefaultParameterNameDiscoverer();

    /**
     * The first variable an expression reads that no evaluation ever has: a misspelt name, or a parameter's name where
     * the code was compiled without its names. SpEL reads an unknown variable as null without a word.
     */
    private static Optional<String> unknownVariable(Method method, Expression key, List<Expression> fingerprint) {
        Set<String> known = new HashSet<>(REQUEST_VARIABLES);
        known.addAll(List.of("this", "root"));
        String[] names = PARAMETER_NAMES.getParameterNames(method);
        for (int i = 0; i < method.getParameterCount(); i++) {
            // as MethodBasedEvaluationContext names the arguments
            known.add("a" + i);
            known.add("p" + i);
            if (names != null && names[i] != null) {
                known.add(names[i]);
            }
        }
        for (Expression expression : both(key, fingerprint)) {
            if (expression instanceof SpelExpression spel) {
                Set<String> assigned = new HashSet<>();
                List<String> read = new ArrayList<>();
                variables(spel.getAST(), assigned, read);
                Optional<String> unknown = read.stream()
                        .filter(name -> !known.contains(name) && !assigned.contains(name)).findFirst();
                if (unknown.isPresent()) {
                    return unknown;
                }
            }
        }
        return Optional.empty();
    }

    /** The fingerprint's expressions and the key's, if there is one. */
    private static List<Expression> both(Expression key, List<Expression> fingerprint) {
        List<Expression> expressions = new ArrayList<>(fingerprint);
        if (key != null) {
            expressions.add(key);
        }
        return expressions;
    }

    /** Whether an expression reads the request's body ({@code #body}, also where a parameter has the name). */
    private static boolean readsBody(Expression key, List<Expression> fingerprint) {
        for (Expression expression : both(key, fingerprint)) {
            if (expression instanceof SpelExpression spel) {
                List<String> read = new ArrayList<>();
                variables(spel.getAST(), new HashSet<>(), read);
                if (read.contains("body")) {
                    return true;
                }
            }
        }
        return false;
    }

    /**
     * What an expression reads of the evaluation's root object, which is null (the context has no root, only
     * variables), or of a bean, which it cannot resolve, described; empty if it reads neither. {@code transactionId}
     * where {@code #body.transactionId} was meant fails on every request, as SpEL cannot read a property of null;
     * {@code #root} and {@code #this} (as {@code #root.args[0]} is written for Spring's cache annotations) are null,
     * and {@code @name} fails as well, as does a function ({@code #sha256(#body.id)}): none is registered. Not looked into: selections and projections, whose names and {@code #this} are
     * each element's, indexers and inline maps, where a name may stand for itself.
     */
    private static Optional<String> readOfTheRoot(Expression key, List<Expression> fingerprint) {
        for (Expression expression : both(key, fingerprint)) {
            if (expression instanceof SpelExpression spel) {
                Optional<String> read = readOfTheRoot(spel.getAST(), true);
                if (read.isPresent()) {
                    return read;
                }
            }
        }
        return Optional.empty();
    }

    /** @param onRoot whether {@code node} is evaluated on the root object (not on the value of what precedes it) */
    private static Optional<String> readOfTheRoot(SpelNode node, boolean onRoot) {
        if (node instanceof FunctionReference function) {
            // a function is a variable holding a method, which neither the request nor a parameter is
            return Optional.of("the function " + function.toStringAST() + ", which the evaluation does not have (it"
                    + " registers no function; call a static method, as T(com.example.Keys).of(#body))");
        }
        if (node instanceof Selection || node instanceof Projection || node instanceof Indexer
                || node instanceof InlineMap) {
            return Optional.empty();
        }
        if (onRoot && node instanceof PropertyOrFieldReference property && !property.isNullSafe()) {
            return Optional.of(property.getName() + " of the evaluation's root object, which is null");
        }
        if (onRoot && node instanceof MethodReference call && !call.isNullSafe()) {
            return Optional.of(call.getName() + "() of the evaluation's root object, which is null");
        }
        if (node instanceof VariableReference variable
                && (variable.toStringAST().equals("#root") || variable.toStringAST().equals("#this"))) {
            return Optional.of(variable.toStringAST() + ", the evaluation's root object, which is null");
        }
        if (node instanceof BeanReference bean) {
            // the evaluation has no bean resolver, unlike that of Spring's cache annotations
            return Optional.of("the bean @" + bean.getName() + ", which the evaluation cannot resolve (it has no"
                    + " bean resolver)");
        }
        for (int i = 0; i < node.getChildCount(); i++) {
            // a compound's later parts are read of the value before them; a method's arguments of the root again
            boolean childOnRoot = node instanceof CompoundExpression ? onRoot && i == 0 : true;
            Optional<String> read = readOfTheRoot(node.getChild(i), childOnRoot);
            if (read.isPresent()) {
                return read;
            }
        }
        return Optional.empty();
    }

    /**
     * Whether an expression reads nothing at all, of the request or elsewhere: literals and operators only
     * ({@code 'orders'}, {@code '#body.id'} quoted whole, {@code 1 + 1}), the same value for every request. Any variable,
     * property, method, type, constructor or bean counts as a read: a static method may read the request's state.
     */
    private static boolean readsNothing(SpelNode node) {
        if (node instanceof VariableReference || node instanceof FunctionReference
                || node instanceof PropertyOrFieldReference || node instanceof MethodReference
                || node instanceof TypeReference || node instanceof ConstructorReference
                || node instanceof BeanReference) {
            return false;
        }
        for (int i = 0; i < node.getChildCount(); i++) {
            if (!readsNothing(node.getChild(i))) {
                return false;
            }
        }
        return true;
    }

    /**
     * An expression that is a parameter alone (or a chain of its properties), of a {@code type} whose values' text
     * names an instance.
     *
     * @param held what of the value names the instance, as the message says it ("a Charge", "an array"), or null when
     *             the value itself is of a class whose {@code toString()} is {@link Object}'s
     */
    private record InstanceNaming(String expression, java.lang.reflect.Type type, String held) {
    }

    /**
     * The first expression that is a parameter alone, or a property of one, whose value is compared (see
     * {@link Idempotent#fingerprint()}) by a text that names an instance, so it is another for every request: of a
     * class whose {@code toString()} is {@link Object}'s, or one that holds such a value where it is written (a
     * record's component, a collection's or an array's element). Empty if there is none.
     */
    private static Optional<InstanceNaming> instanceNamingParameter(Method method, Expression key,
                                                                    List<Expression> fingerprint) {
        String[] names = PARAMETER_NAMES.getParameterNames(method);
        for (Expression expression : both(key, fingerprint)) {
            if (!(expression instanceof SpelExpression spel)) {
                continue;
            }
            // a parameter alone, or a chain of its properties (#order.payer), each read as SpEL reads it
            SpelNode ast = spel.getAST();
            List<String> properties = new ArrayList<>();
            if (ast instanceof CompoundExpression && ast.getChild(0) instanceof VariableReference) {
                for (int i = 1; i < ast.getChildCount(); i++) {
                    if (!(ast.getChild(i) instanceof PropertyOrFieldReference property)) {
                        properties = null;
                        break;
                    }
                    properties.add(property.getName());
                }
                if (properties == null) {
                    continue;
                }
                ast = ast.getChild(0);
            }
            if (!(ast instanceof VariableReference variable)) {
                continue;
            }
            String name = variable.toStringAST().substring(1);
            if (REQUEST_VARIABLES.contains(name)) {
                continue; // the request's, even where a parameter has the name
            }
            for (int i = 0; i < method.getParameterCount(); i++) {
                boolean named = name.equals("p" + i) || name.equals("a" + i) || names != null && name.equals(names[i]);
                if (!named) {
                    continue;
                }
                ResolvableType type = ResolvableType.forMethodParameter(method, i);
                for (String property : properties) {
                    type = type == null ? null : propertyType(type, property);
                }
                if (type == null) {
                    continue;
                }
                Class<?> raw = type.resolve();
                if (raw != null && namesTheInstance(raw)) {
                    return Optional.of(new InstanceNaming(String.join(".", concat(name, properties)), raw, null));
                }
                String held = heldInstance(type, false, new HashSet<>());
                if (held != null) {
                    return Optional.of(new InstanceNaming(String.join(".", concat(name, properties)),
                            type.getType(), held));
                }
            }
        }
        return Optional.empty();
    }

    private static List<String> concat(String first, List<String> rest) {
        List<String> all = new ArrayList<>(List.of(first));
        all.addAll(rest);
        return all;
    }

    /**
     * The declared type of {@code property} as SpEL reads it of a {@code type}: its getter's, a record component's,
     * or a public field's; null when it cannot be told (a map's key, say).
     */
    private static ResolvableType propertyType(ResolvableType owner, String property) {
        Class<?> type = owner.resolve();
        if (type == null || java.util.Map.class.isAssignableFrom(type) || type.isArray()
                || Collection.class.isAssignableFrom(type)) {
            return null;
        }
        java.beans.PropertyDescriptor descriptor = BeanUtils.getPropertyDescriptor(type, property);
        if (descriptor != null && descriptor.getReadMethod() != null) {
            return ResolvableType.forMethodReturnType(descriptor.getReadMethod(), type);
        }
        if (type.isRecord()) {
            Method accessor = ReflectionUtils.findMethod(type, property);
            if (accessor != null && accessor.getParameterCount() == 0) {
                return ResolvableType.forMethodReturnType(accessor, type);
            }
        }
        java.lang.reflect.Field field = ReflectionUtils.findField(type, property);
        return field != null && Modifier.isPublic(field.getModifiers()) ? ResolvableType.forField(field, owner) : null;
    }

    /**
     * Whether the text of every value of {@code type} names the instance: a concrete class (an interface's or abstract
     * class's values may write themselves) other than {@code Object} (which a body is bound to as maps and lists),
     * whose {@code toString()} is {@code Object}'s.
     */
    private static boolean namesTheInstance(Class<?> type) {
        if (type == Object.class || type.isInterface() || type.isArray() || type.isPrimitive()
                || Modifier.isAbstract(type.getModifiers())) {
            return false;
        }
        Method toString = ReflectionUtils.findMethod(type, "toString");
        return toString != null && toString.getDeclaringClass() == Object.class;
    }

    /**
     * What a value of {@code type} holds whose text names an instance, where the value is written: canonical JSON
     * writes a collection's, an array's, an {@code Optional}'s and a map's values as it writes any value (and a map's
     * keys by their text), a record's {@code toString()} its components by theirs, in which an array names itself.
     * Null when there is none, or it cannot be told (an element of a type that is not declared).
     *
     * @param asText whether the value is written by its {@code toString()} (inside a record's), not as canonical JSON
     * @param seen   the records looked into, so that a record holding itself is looked into once
     */
    private static String heldInstance(ResolvableType type, boolean asText, Set<Class<?>> seen) {
        Class<?> raw = type.resolve();
        if (raw == null || raw.isPrimitive()) {
            return null;
        }
        if (raw.isArray()) {
            return asText ? "an array" : heldInstance(type.getComponentType(), false, seen);
        }
        if (raw == Optional.class) {
            return elementInstance(type.getGeneric(0), asText, seen);
        }
        if (Collection.class.isAssignableFrom(raw)) {
            return elementInstance(type.asCollection().getGeneric(0), asText, seen);
        }
        if (java.util.Map.class.isAssignableFrom(raw)) {
            ResolvableType map = type.asMap();
            String key = elementInstance(map.getGeneric(0), true, seen);
            return key != null ? key : elementInstance(map.getGeneric(1), asText, seen);
        }
        if (!raw.isRecord() || !seen.add(raw)) {
            return null;
        }
        Method toString = ReflectionUtils.findMethod(raw, "toString");
        if (toString == null || toString.getDeclaringClass() != raw || !Modifier.isFinal(toString.getModifiers())) {
            return null; // a record that writes itself (the one javac writes is final)
        }
        for (java.lang.reflect.RecordComponent component : raw.getRecordComponents()) {
            String held = elementInstance(ResolvableType.forType(component.getGenericType(), type), true, seen);
            if (held != null) {
                return held;
            }
        }
        return null;
    }

    /** {@link #heldInstance} of a value that is held: itself when its class names the instance. */
    private static String elementInstance(ResolvableType type, boolean asText, Set<Class<?>> seen) {
        Class<?> raw = type.resolve();
        if (raw != null && namesTheInstance(raw)) {
            return "a " + raw.getTypeName();
        }
        return heldInstance(type, asText, seen);
    }

    /**
     * The variables {@code node} reads, into {@code read}, and those it assigns ({@code #x = …}), into
     * {@code assigned}.
     */
    private static void variables(SpelNode node, Set<String> assigned, List<String> read) {
        if (node instanceof VariableReference) {
            read.add(node.toStringAST().substring(1));
        } else if (node instanceof Assign && node.getChild(0) instanceof VariableReference variable) {
            assigned.add(variable.toStringAST().substring(1));
        }
        for (int i = 0; i < node.getChildCount(); i++) {
            variables(node.getChild(i), assigned, read);
        }
    }

    private static String parameterNames(Method method) {
        String[] names = PARAMETER_NAMES.getParameterNames(method);
        if (method.getParameterCount() == 0) {
            return "it has none";
        }
        return names == null ? "their names are not compiled in" : "#" + String.join(", #", names);
    }

    /**
     * The HTTP methods of the IANA HTTP Method Registry: the eight a Spring MVC mapping can name, and those of WebDAV
     * and its kin, which a mapping without methods (or a functional route) serves too. Left out are CONNECT, which
     * opens a tunnel and has no answer to replay, PRI, which is HTTP/2's connection preface, and the wildcard.
     */
    static final List<String> HTTP_METHODS = List.of("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS",
            "TRACE", "ACL", "BASELINE-CONTROL", "BIND", "CHECKIN", "CHECKOUT", "COPY", "LABEL", "LINK", "LOCK",
            "MERGE", "MKACTIVITY", "MKCALENDAR", "MKCOL", "MKREDIRECTREF", "MKWORKSPACE", "MOVE", "ORDERPATCH",
            "PROPFIND", "PROPPATCH", "QUERY", "REBIND", "REPORT", "SEARCH", "UNBIND", "UNCHECKOUT", "UNLINK",
            "UNLOCK", "UPDATE", "UPDATEREDIRECTREF", "VERSION-CONTROL");

    /**
     * The names among {@code methods} that are no HTTP method (a misspelt {@code PSOT}), joined; null if there are
     * none. On an endpoint mapped to POST and PATCH, idempotent for "PSOT, PATCH", POST requests would run without
     * idempotency, and no other check would notice.
     */
    static String unknownMethods(Collection<String> methods) {
        List<String> unknown = methods.stream()
                .filter(m -> m == null || !HTTP_METHODS.contains(methodName(m))).toList();
        return unknown.isEmpty() ? null : String.join(", ", unknown.stream().map(String::valueOf).toList());
    }

    /**
     * A configured HTTP method name as requests carry it: upper case, without the spaces around it that
     * {@link #unknownMethods} accepts too.
     */
    static String methodName(String configured) {
        return configured.trim().toUpperCase(Locale.ROOT);
    }

    /**
     * Whether a request with {@code httpMethod} is idempotent here. A HEAD request is wherever a GET is: Spring MVC
     * serves it with the GET's handler, which would otherwise run without idempotency (and without a key).
     */
    boolean appliesTo(String httpMethod) {
        return covers(methods, httpMethod);
    }

    /**
     * Whether {@code methods} (upper case) cover a request with {@code httpMethod}: they list it, or it is a HEAD and
     * they list GET, whose handler Spring MVC serves a HEAD with.
     */
    static boolean covers(Set<String> methods, String httpMethod) {
        String method = httpMethod.toUpperCase(Locale.ROOT);
        return methods.contains(method) || method.equals("HEAD") && methods.contains("GET");
    }
}
