#pragma once
// Part of src/io (internal): a run's stops on request, a callback of mlo::Run. From its
// construction until its destruction SIGINT and SIGTERM (Ctrl-C; what `mlo launch` forwards and
// what schedulers send) ask the run to save and stop (a second one ends the process at once,
// keeping the previous state), and they end a wait for the other ranks of a launch at once
// (base/stop_request.h); the previous handlers come back after. `stop_at` (a global step, 0:
// none) asks the same at that step. The engine stops after the first step at which a stop was
// asked and a saved state resumes exactly (StepEnd::resumable: a stop inside a distributed
// run's accumulation window waits for the window's end, and says so).

#include <mlo/core/callback.h>

#include <cstdint>

namespace mlo {
namespace io {

class StopRequests : public Callback {
 public:
  explicit StopRequests(int64_t stop_at);
  ~StopRequests() override;
  StopRequests(const StopRequests&) = delete;
  StopRequests& operator=(const StopRequests&) = delete;

  StepDecision on_step_end(Engine& engine, const StepEnd& step) override;

  /// Whether a SIGINT or SIGTERM came while it lived.
  static bool signalled();
  /// Whether it stopped the engine (a signal, or `stop_at`).
  bool stopped() const { return stopped_; }

 private:
  int64_t stop_at_;
  bool requested_ = false;  // stop_at reached (the stop may wait for a window's end)
  bool stopped_ = false;
  bool window_note_logged_ = false;
  void (*previous_int_)(int) = nullptr;
  void (*previous_term_)(int) = nullptr;
};

}  // namespace io
}  // namespace mlo
