#include "recorder.h"

#include <mlo/core/engine.h>

namespace mlo {
namespace io {

StepDecision Recorder::on_step_end(Engine& engine, const StepEnd& step) {
  const int64_t log_step = engine.config().log_step();
  if (log_step > 0 && step.step % log_step == 0) {
    for (const auto& problem : engine.problems()) {
      write(step.step, problem->name(), problem->metrics());
    }
  }
  return StepDecision::kContinue;
}

void Recorder::on_validation(Engine& engine, const Validation& validation) {
  (void)engine;
  write(validation.step, "validation", validation.metrics);
}

}  // namespace io
}  // namespace mlo
