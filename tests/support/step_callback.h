#pragma once
// A test's engine callback from a function called after every global step (true: go on,
// false: pause, as Ctrl-C does).

#include <mlo/core/callback.h>
#include <mlo/core/engine.h>

#include <functional>
#include <memory>
#include <utility>

namespace mlo_test {

class StepCallback : public mlo::Callback {
 public:
  explicit StepCallback(std::function<bool(int64_t)> f) : f_(std::move(f)) {}
  mlo::StepDecision on_step_end(mlo::Engine&, const mlo::StepEnd& step) override {
    return f_(step.step) ? mlo::StepDecision::kContinue : mlo::StepDecision::kPause;
  }

 private:
  std::function<bool(int64_t)> f_;
};

/// Adds `f` to `engine` as a callback called after every global step with its number.
inline void on_step(mlo::Engine& engine, std::function<bool(int64_t)> f) {
  engine.add_callback(std::make_shared<StepCallback>(std::move(f)));
}

}  // namespace mlo_test
