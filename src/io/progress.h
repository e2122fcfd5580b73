#pragma once
// Part of src/io (internal): a run's progress, a callback of mlo::Run. On a terminal, one
// redrawn line with a bar, step, rate, ETA and the first problem's latest loss (validation lines
// printed above it); when not a terminal, a plain line every `log_step` global steps (so logs and
// CI output stay readable).

#include <mlo/core/callback.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace mlo {
namespace io {

class Progress : public Callback {
 public:
  /// `terminal` draws the redrawn bar (else plain lines).
  explicit Progress(bool terminal) : terminal_(terminal) {}
  ~Progress() override { finish(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// Counts from the engine's global step (a resumed run's) to its `train_iters`.
  void on_start(Engine& engine) override;
  StepDecision on_step_end(Engine& engine, const StepEnd& step) override;
  /// On a terminal, the engine's validation line above the bar (the console shows warnings
  /// only under a bar; the log file has the line).
  void on_validation(Engine& engine, const Validation& validation) override;
  void on_end(Engine& engine, const StepEnd& last) override;

  /// Whether standard error is a terminal.
  static bool stderr_is_terminal();

 private:
  void update(int64_t step, const std::string& status);
  void println(const std::string& line);
  void draw();
  void finish();

  bool terminal_;
  int64_t total_ = 0, start_ = 0, step_ = 0, every_ = 100;
  std::string status_;
  std::chrono::steady_clock::time_point begin_, last_draw_;
  bool drawn_ = false;
};

}  // namespace io
}  // namespace mlo
