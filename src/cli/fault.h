#pragma once
// Part of the command line (src/cli): `mlo run --raise-at STEP:SIGNAL[:RANK]`, a fault-injection
// aid for tests. The process raises SIGNAL on itself at the end of global step STEP (an engine
// callback added before the run's own: before the step's metrics records, its stop check and
// its periodic save), so an interruption lands at a chosen step on every run:
// TERM and INT go through the runner's real handler (save and stop), KILL dies at once as in a
// crash, STOP freezes the process as a hanging rank does. With RANK, only that rank of a launch
// raises it. A launcher's restart of the workers (torchrun --max-restarts, mlo launch
// --max-restarts) raises nothing: the crash is injected once. tests/cli/fault_matrix.cpp drives
// resume through it.

#include <mlo/core/callback.h>

#include <cstdint>
#include <string>

namespace mlo {
namespace cli {

/// A signal to raise at the end of a global step (`--raise-at`). Default: none.
struct RaiseAt {
  int64_t step = 0;  ///< global step (>= 1); 0: never
  int signal = 0;    ///< TERM, INT, KILL or STOP
  int rank = -1;     ///< only this rank of a launch (-1: every rank)

  /// Reads "STEP:SIGNAL[:RANK]" (SIGNAL: TERM, INT, KILL, STOP, with or without "SIG").
  /// Throws `mlo::Error` naming the option and the bad part.
  static RaiseAt parse(const std::string& text);

  /// Raises the signal when `step` is `this->step` and `rank` is the chosen rank (or any).
  void maybe_raise(int64_t step, int rank) const;
};

/// `RaiseAt` as the engine callback that raises it on rank `rank`.
class RaiseAtStep : public Callback {
 public:
  RaiseAtStep(RaiseAt raise_at, int rank) : raise_at_(raise_at), rank_(rank) {}
  StepDecision on_step_end(Engine& engine, const StepEnd& step) override {
    (void)engine;
    raise_at_.maybe_raise(step.step, rank_);
    return StepDecision::kContinue;
  }

 private:
  RaiseAt raise_at_;
  int rank_;
};

}  // namespace cli
}  // namespace mlo
