// `mlo run --raise-at STEP:SIGNAL[:RANK]` (src/cli/fault.h): what it reads and what it refuses.
// Raising itself is exercised end to end by tests/cli/fault_matrix.cpp.
#include "fault.h"

#include <mlo/base/error.h>

#include <catch2/catch.hpp>

#include <csignal>

namespace fault_test {

using Catch::Matchers::Contains;
using mlo::cli::RaiseAt;

TEST_CASE("--raise-at: step, signal and optional rank", "[cli][fault]") {
  const RaiseAt term = RaiseAt::parse("7:TERM");
  CHECK(term.step == 7);
  CHECK(term.signal == SIGTERM);
  CHECK(term.rank == -1);
  const RaiseAt kill = RaiseAt::parse("12:sigkill:1");
  CHECK(kill.step == 12);
  CHECK(kill.signal == SIGKILL);
  CHECK(kill.rank == 1);
  CHECK(RaiseAt::parse("3:STOP").signal == SIGSTOP);
  CHECK(RaiseAt::parse("3:int").signal == SIGINT);
  // The default raises nothing, at any step.
  RaiseAt().maybe_raise(0, 0);
  RaiseAt().maybe_raise(1, 0);
}

TEST_CASE("--raise-at: malformed values are refused, naming the part", "[cli][fault]") {
  CHECK_THROWS_WITH(RaiseAt::parse("7"), Contains("expected STEP:SIGNAL or STEP:SIGNAL:RANK"));
  CHECK_THROWS_WITH(RaiseAt::parse("0:TERM"), Contains("STEP must be a global step >= 1, got '0'"));
  CHECK_THROWS_WITH(RaiseAt::parse("x:TERM"), Contains("got 'x'"));
  CHECK_THROWS_WITH(RaiseAt::parse("7:HUP"),
                    Contains("unknown signal 'HUP'; one of TERM, INT, KILL, STOP"));
  CHECK_THROWS_WITH(RaiseAt::parse("7:KILL:-1"), Contains("RANK must be a rank >= 0, got '-1'"));
  CHECK_THROWS_WITH(RaiseAt::parse("7:KILL:1:2"), Contains("expected STEP:SIGNAL"));
}

}  // namespace fault_test
