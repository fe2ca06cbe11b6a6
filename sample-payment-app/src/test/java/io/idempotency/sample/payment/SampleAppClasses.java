package io.idempotency.sample.payment;

import io.idempotency.testkit.TestPostgres;

import java.io.File;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.jar.JarEntry;
import java.util.jar.JarOutputStream;
import java.util.stream.Stream;

/**
 * What the sample application's JVMs start from: the test class path, and an archive of the classes the application
 * loads while it starts (class data sharing), which they map instead of loading and verifying each class again. The
 * crash tests start the application some thirty times; from the archive each start takes about 40 % less CPU (2.5
 * against 4.5 s to a refreshed context on two cores) and half the time.
 *
 * <p>The archive is made once per build, by whichever test JVM needs it first (the others wait for it, under a file
 * lock), from one start of the application on a database of its own that stops once its context is refreshed. A
 * class path directory cannot be archived from, so each directory on the class path ({@code target/classes},
 * {@code target/test-classes}) is copied into a jar of its own, in its place. The copies are made again whenever a
 * class path entry or a file in those directories changed. Where the archive cannot be made (a JVM without dynamic
 * archives), the application starts without one, from the test class path as it is.
 */
final class SampleAppClasses {

    private static final Path ROOT = Path.of("target", "sample-app-classes");
    private static final long TRAINING_TIMEOUT_SECONDS = 180;

    /** The class path to start the application with, and the JVM options that use the archive when there is one. */
    record Launch(String classPath, List<String> options) {
    }

    private static Launch launch;

    private SampleAppClasses() {
    }

    /** How to start the application: made on the first call in this JVM, then the same. */
    static synchronized Launch launch() {
        if (launch == null) {
            launch = prepare(testClassPath());
        }
        return launch;
    }

    private static Launch prepare(String classPath) {
        try {
            List<String> entries = List.of(classPath.split(File.pathSeparator));
            Path directory = ROOT.resolve(key(entries)).toAbsolutePath();
            Files.createDirectories(directory);
            try (FileChannel channel = FileChannel.open(directory.resolve("lock"), StandardOpenOption.CREATE,
                    StandardOpenOption.WRITE); FileLock ignored = channel.lock()) {
                String jarred = String.join(File.pathSeparator, jarred(entries, directory));
                Path archive = directory.resolve("classes.jsa");
                Path failed = directory.resolve("failed.log");
                if (!Files.exists(archive) && !Files.exists(failed)) {
                    train(jarred, archive, failed);
                }
                return Files.exists(archive)
                        ? new Launch(jarred, List.of("-XX:SharedArchiveFile=" + archive))
                        : new Launch(jarred, List.of());
            }
        } catch (IOException e) {
            System.err.println("The sample application starts without a class data archive: " + e);
            return new Launch(classPath, List.of());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return new Launch(classPath, List.of());
        }
    }

    /**
     * The JVM options of every instance of the application, and of the run that makes the archive: a small, quickly
     * started JVM, as these instances live for seconds and serve a few requests.
     */
    static List<String> jvmOptions() {
        return List.of("-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC");
    }

    /**
     * One start of the application with {@code -XX:ArchiveClassesAtExit}, on a database of its own, stopped once its
     * context is refreshed ({@code spring.context.exit=onRefresh}): the JVM writes the archive as it exits.
     */
    private static void train(String classPath, Path archive, Path failed) throws IOException, InterruptedException {
        Path written = archive.resolveSibling(archive.getFileName() + ".tmp");
        Files.deleteIfExists(written);
        Path log = archive.resolveSibling("training.log");
        List<String> command = new ArrayList<>();
        command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        command.addAll(jvmOptions());
        command.addAll(List.of("-XX:ArchiveClassesAtExit=" + written, "-Dspring.context.exit=onRefresh",
                "-cp", classPath, SamplePaymentApplication.class.getName(),
                "--server.port=0", "--spring.main.banner-mode=off"));
        TestPostgres.newDatabase().springPropertyValues().forEach(value -> command.add("--" + value));
        Process process = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(log.toFile()).start();
        boolean exited;
        try {
            exited = process.waitFor(TRAINING_TIMEOUT_SECONDS, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            process.destroyForcibly(); // no run left behind, writing an archive no one waits for
            throw e;
        }
        if (exited && process.exitValue() == 0 && Files.exists(written) && Files.size(written) > 0) {
            Files.move(written, archive, StandardCopyOption.ATOMIC_MOVE);
            return;
        }
        if (!exited) {
            process.destroyForcibly();
            process.waitFor(10, TimeUnit.SECONDS);
        }
        String why = exited ? "exited with " + process.exitValue() + " without an archive"
                : "did not stop within " + TRAINING_TIMEOUT_SECONDS + " s";
        Files.writeString(failed, "The run that makes the class data archive " + why + ":\n"
                + Files.readString(log, StandardCharsets.UTF_8));
        System.err.println("The sample application starts without a class data archive: the run that makes it "
                + why + " (" + log.toAbsolutePath() + ")");
    }

    /** {@code entries} with each directory replaced by a jar of its files (made now, unless made already). */
    private static List<String> jarred(List<String> entries, Path directory) throws IOException {
        List<String> jarred = new ArrayList<>();
        for (int i = 0; i < entries.size(); i++) {
            Path entry = Path.of(entries.get(i));
            if (!Files.isDirectory(entry)) {
                jarred.add(entries.get(i));
                continue;
            }
            Path jar = directory.resolve("classpath-" + i + ".jar");
            if (!Files.exists(jar)) {
                Path written = directory.resolve("classpath-" + i + ".jar.tmp");
                writeJar(entry, written);
                Files.move(written, jar, StandardCopyOption.ATOMIC_MOVE);
            }
            jarred.add(jar.toString());
        }
        return jarred;
    }

    /**
     * A jar of the files under {@code directory}, with an entry for each directory too: Spring's class path scanning
     * finds a package in a jar by its directory entry.
     */
    private static void writeJar(Path directory, Path jar) throws IOException {
        List<Path> paths;
        try (Stream<Path> walk = Files.walk(directory)) {
            paths = walk.filter(path -> !path.equals(directory)).sorted().toList();
        }
        try (OutputStream out = Files.newOutputStream(jar); JarOutputStream jarOut = new JarOutputStream(out)) {
            for (Path path : paths) {
                String name = directory.relativize(path).toString().replace(File.separatorChar, '/');
                if (Files.isDirectory(path)) {
                    jarOut.putNextEntry(new JarEntry(name + "/"));
                } else {
                    jarOut.putNextEntry(new JarEntry(name));
                    Files.copy(path, jarOut);
                }
                jarOut.closeEntry();
            }
        }
    }

    /**
     * A name for this class path and what it holds: its entries, the size and time of change of each jar, and of each
     * file in its directories.
     */
    private static String key(List<String> entries) throws IOException {
        MessageDigest digest;
        try {
            digest = MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
        for (String entry : entries) {
            digest.update((entry + "\n").getBytes(StandardCharsets.UTF_8));
            Path path = Path.of(entry);
            if (Files.isRegularFile(path)) {
                // a jar built again under the same name (a module of this build) would no longer match the archive
                BasicFileAttributes attributes = Files.readAttributes(path, BasicFileAttributes.class);
                digest.update((attributes.size() + " " + attributes.lastModifiedTime().toMillis() + "\n")
                        .getBytes(StandardCharsets.UTF_8));
            } else if (Files.isDirectory(path)) {
                List<Path> files;
                try (Stream<Path> walk = Files.walk(path)) {
                    files = walk.filter(Files::isRegularFile).sorted().toList();
                }
                for (Path file : files) {
                    BasicFileAttributes attributes = Files.readAttributes(file, BasicFileAttributes.class);
                    digest.update((file + " " + attributes.size() + " " + attributes.lastModifiedTime().toMillis()
                            + "\n").getBytes(StandardCharsets.UTF_8));
                }
            }
        }
        return HexFormat.of().formatHex(digest.digest(), 0, 8);
    }

    /**
     * The class path of the running tests. Surefire may start its JVM through a manifest-only jar, so its own record
     * of the class path is preferred over {@code java.class.path}.
     */
    private static String testClassPath() {
        String surefire = System.getProperty("surefire.test.class.path");
        return surefire != null && !surefire.isBlank() ? surefire : System.getProperty("java.class.path");
    }
}
