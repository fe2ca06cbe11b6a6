package io.idempotency.spring;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/** Applications the tests start in JVMs of their own. */
public final class TestJvms {

    private TestJvms() {
    }

    /**
     * A JVM on the test class path (unless {@code options} give another), compiling with C1 alone and collecting with
     * the serial collector, its output in {@code log}.
     */
    public static Process java(List<String> options, List<String> arguments, Path log) throws IOException {
        List<String> command = new ArrayList<>();
        command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        // short-lived JVMs, as the test JVMs are: C1 alone and the serial collector spend less CPU on them
        command.add("-XX:TieredStopAtLevel=1");
        command.add("-XX:+UseSerialGC");
        command.addAll(options);
        if (!options.contains("-cp")) {
            command.add("-cp");
            command.add(System.getProperty("java.class.path"));
        }
        command.addAll(arguments);
        return new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(log.toFile()).start();
    }
}
