#pragma once
// Test helper: steps a lower problem through one unroll the way the engine does (its level's
// step with a StepContext), telling a hypergradient method about the unroll start and every
// optimizer step, so that methods that record the trajectory (unrolled) or the optimizer's
// latest gradient (sama) can be tested without an engine.

#include "support/levels.h"

#include <mlo/core/problem.h>
#include <mlo/core/method.h>

#include <torch/torch.h>

#include <cstdint>
#include <sstream>
#include <vector>

namespace mlo {
namespace testing {

/// Takes `steps` local steps of `lower` (a level made with make_level, with its peers), the
/// first one starting an unroll; `method` (may be null) hears about it.
inline void run_unroll(mlo::detail::LevelRuntime& lower, Hypergradient* method, int64_t steps) {
  for (int64_t t = 0; t < steps; ++t) {
    mlo::detail::StepContext context;
    context.unroll_start = t == 0;
    context.method = method;
    lower.step(context);
  }
}

/// The lower problem's parameters and optimizer state, to run several unrolls from one start.
class SavedState {
 public:
  explicit SavedState(Problem& p) : problem_(p) {
    for (const auto& t : p.parameters()) params_.push_back(t.detach().clone());
    torch::save(p.optimizer(), optimizer_);
  }
  void restore() {
    torch::NoGradGuard no_grad;
    const auto params = problem_.parameters();
    for (size_t i = 0; i < params.size(); ++i) params[i].copy_(params_[i]);
    std::istringstream in(optimizer_.str());
    torch::load(problem_.optimizer(), in);
  }

 private:
  Problem& problem_;
  std::vector<torch::Tensor> params_;
  std::stringstream optimizer_;
};

}  // namespace testing
}  // namespace mlo
