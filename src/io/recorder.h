#pragma once
// Part of src/io (internal): a run's metrics sink as a callback of mlo::Run. It records every
// problem's metrics (`Problem::metrics`) every `log_step` global steps (the engine's), each
// validation's metrics (source "validation"), and what the run adds itself: the final test
// metrics (source "test") and texts (the resolved config, the run's metadata). The sinks:
// metrics_files.h (CSV and JSON lines), tensorboard_files.h (TensorBoard event files).

#include <mlo/core/callback.h>
#include <mlo/core/metrics.h>

#include <cstdint>
#include <string>

namespace mlo {
namespace io {

class Recorder : public Callback {
 public:
  /// One record: `source` is a problem's name, "validation" or "test".
  virtual void write(int64_t step, const std::string& source, const Metrics& metrics) = 0;
  /// A text (Markdown) at `step` under `tag`, for the sinks that keep texts.
  virtual void text(int64_t step, const std::string& tag, const std::string& markdown) {
    (void)step;
    (void)tag;
    (void)markdown;
  }

  StepDecision on_step_end(Engine& engine, const StepEnd& step) override;
  void on_validation(Engine& engine, const Validation& validation) override;
};

}  // namespace io
}  // namespace mlo
