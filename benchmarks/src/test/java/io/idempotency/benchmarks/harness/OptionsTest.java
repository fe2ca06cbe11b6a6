package io.idempotency.benchmarks.harness;

import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class OptionsTest {

    @Test
    void theDefaultsAndTheQuickRun() {
        Options full = Options.parse(new String[0]);
        assertThat(full.rounds()).isEqualTo(8);
        assertThat(full.roundDuration()).isEqualTo(Duration.ofSeconds(5));
        assertThat(full.growthRows()).containsExactly(0L, 1_000_000L, 10_000_000L);

        Options quick = Options.parse(new String[]{"--quick"});
        assertThat(quick.rounds()).isEqualTo(4);
        assertThat(quick.growthRows()).containsExactly(0L, 1_000_000L);
        assertThat(Options.parse(new String[]{"--explain"}).explainOnly()).isTrue();
    }

    @Test
    void aCountThatIsNotAWholeNumberNamesItsOption() {
        assertThatThrownBy(() -> Options.parse(new String[]{"--connections", "abc"}))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessage("--connections needs a whole number of at least 1, not abc");
    }

    @Test
    void countsThatWouldMeasureNothingAreRefused() {
        // no round at all: ratios of 0 / 0, printed as NaN in a RESULT line and exit status 0
        assertThatThrownBy(() -> Options.parse(new String[]{"--rounds", "0"}))
                .hasMessage("--rounds needs a whole number of at least 1, not 0");
        // rounds of no time: no request, and the run only fails after its warm-up
        assertThatThrownBy(() -> Options.parse(new String[]{"--seconds", "0"}))
                .hasMessage("--seconds needs a whole number of at least 1, not 0");
        assertThatThrownBy(() -> Options.parse(new String[]{"--connections", "-1"}))
                .hasMessage("--connections needs a whole number of at least 1, not -1");
    }

    @Test
    void roundsComeInMultiplesOfTheScenarios() {
        // the order rotates by one scenario each round: over 5 rounds one scenario would run first twice
        assertThatThrownBy(() -> Options.parse(new String[]{"--rounds", "5"}))
                .hasMessage("--rounds needs a multiple of 4, so that each scenario runs in each place of a round"
                        + " equally often, not 5");
        assertThat(Options.parse(new String[]{"--rounds", "12"}).rounds()).isEqualTo(12);
    }

    @Test
    void theMicroBenchmarksRefuseTheHttpBenchmarksOptions() {
        for (String option : List.of("--rounds", "--connections", "--seconds", "--storm-size")) {
            assertThatThrownBy(() -> Options.parse(new String[]{"--jmh", option, "8"}))
                    .hasMessage("--jmh runs the micro-benchmarks only, which " + option + " does not apply to; run the"
                            + " HTTP benchmark without --jmh");
        }
        assertThatThrownBy(() -> Options.parse(new String[]{"--no-growth", "--jmh"}))
                .hasMessageContaining("which --no-growth does not apply to");
        assertThatThrownBy(() -> Options.parse(new String[]{"--jmh", "--explain"}))
                .hasMessageContaining("which --explain does not apply to");
        assertThat(Options.parse(new String[]{"--jmh", "--quick"}).quick()).isTrue();
    }

    @Test
    void aStormOfOneRequestPerKeyIsRefused() {
        // one request per key can neither execute twice nor hold two connections: storm_* would be 1 whatever the
        // library does
        assertThatThrownBy(() -> Options.parse(new String[]{"--storm-size", "1"}))
                .hasMessage("--storm-size needs a whole number of at least 2, not 1");
        assertThat(Options.parse(new String[]{"--storm-size", "2"}).stormSize()).isEqualTo(2);
    }

    @Test
    void growthSizesMustBeDistinctAndIncreasing() {
        assertThat(Options.parse(new String[]{"--growth-rows", "0, 1_000_000,2000000"}).growthRows())
                .containsExactly(0L, 1_000_000L, 2_000_000L);
        // the table is only ever filled up: a smaller size after a larger one would be measured at the larger one
        // under the smaller one's label, and a size given twice would merge two measurements into one row
        for (String sizes : List.of("1000000,0", "0,0", "0,-5")) {
            assertThatThrownBy(() -> Options.parse(new String[]{"--growth-rows", sizes}))
                    .hasMessage("--growth-rows needs table sizes of at least 0 in increasing order, e.g."
                            + " 0,1000000: not " + sizes);
        }
        // an empty list is not --no-growth
        for (String sizes : List.of(",", "", "0,,1000")) {
            assertThatThrownBy(() -> Options.parse(new String[]{"--growth-rows", sizes}))
                    .isInstanceOf(IllegalArgumentException.class)
                    .hasMessageStartingWith("--growth-rows needs table sizes");
        }
        assertThat(Options.parse(new String[]{"--no-growth"}).growthRows()).isEmpty();
    }

    @Test
    void helpIsNotABadOption() {
        // a bad option exits with status 2 (main); asking for help is no error
        for (String help : List.of("--help", "-h")) {
            assertThatThrownBy(() -> Options.parse(new String[]{"--quick", help}))
                    .isNotInstanceOf(IllegalArgumentException.class);
        }
    }
}
