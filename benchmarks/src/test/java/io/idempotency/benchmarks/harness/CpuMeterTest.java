package io.idempotency.benchmarks.harness;

import org.junit.jupiter.api.Test;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assumptions.assumeThat;
import static org.assertj.core.data.Offset.offset;

class CpuMeterTest {

    @Test
    void aProcessesTimeIsThatOfAllItsThreadsInSeconds() throws Exception {
        assumeThat(Files.isReadable(Path.of("/proc/stat"))).as("Linux /proc").isTrue();
        long self = ProcessHandle.current().pid();
        CpuMeter meter = new CpuMeter(self, List::of);
        ThreadMXBean threads = ManagementFactory.getThreadMXBean();
        AtomicLong spent = new AtomicLong();

        CpuMeter.Sample before = meter.sample();
        // two threads other than this one, as the application's request threads are: each burns 300 ms of CPU
        Thread[] burners = new Thread[2];
        for (int i = 0; i < burners.length; i++) {
            burners[i] = new Thread(() -> {
                long start = threads.getCurrentThreadCpuTime();
                long x = 0;
                while (threads.getCurrentThreadCpuTime() - start < 300_000_000L) {
                    x += System.nanoTime() % 7;
                }
                spent.addAndGet(threads.getCurrentThreadCpuTime() - start + (x == 42 ? 1 : 0));
            });
            burners[i].start();
        }
        for (Thread burner : burners) {
            burner.join();
        }
        CpuMeter.Usage used = meter.sample().minus(before);

        double seconds = spent.get() / 1e9;
        // the same process as client and as app here: both read its /proc/<pid>/stat
        assertThat(used.client() / CpuMeter.ticksPerSecond()).isBetween(seconds * 0.8, seconds + 0.3);
        assertThat(used.app()).isCloseTo(used.client(), offset(2L)); // read just after
        assertThat(used.busy()).isGreaterThanOrEqualTo(used.client() - 2); // the machine's includes this process's
    }

    @Test
    void aBackendThatStartedDuringTheRoundCountsWholeAndOneThatEndedIsLeftOut() {
        CpuMeter.Sample before = new CpuMeter.Sample(1_000, 500, 10, 20, Map.of(1L, 100L, 2L, 200L));
        CpuMeter.Sample after = new CpuMeter.Sample(1_300, 520, 15, 60, Map.of(1L, 150L, 3L, 40L));

        CpuMeter.Usage used = after.minus(before);

        assertThat(used.database()).isEqualTo(50 + 40); // pid 2 ended (its last ticks are unknown), pid 3 is new
        assertThat(used.busy()).isEqualTo(300);
        assertThat(used.idle()).isEqualTo(20);
        assertThat(used.client()).isEqualTo(5);
        assertThat(used.app()).isEqualTo(40);
        assertThat(used.other()).isEqualTo(300 - 5 - 40 - 90);
    }
}
