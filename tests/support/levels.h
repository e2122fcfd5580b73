#pragma once
// Test helper: problems as an engine runs them (mlo::Level), without an engine, for tests that
// apply a hypergradient method by hand or step one level directly. Uses the core's internal
// runtime (src/core/level_runtime.h).

#include "core/level_runtime.h"

#include <mlo/core/problem.h>

#include <memory>
#include <vector>

namespace mlo {
namespace testing {

/// A level of `problem` in one process, with `peers` (whose buffers its steps leave alone).
inline std::shared_ptr<mlo::detail::LevelRuntime> make_level(
    Problem& problem, const std::vector<Problem*>& peers = {}) {
  return std::make_shared<mlo::detail::LevelRuntime>(problem, /*meter=*/nullptr, peers,
                                                     /*group=*/nullptr,
                                                     dist::Strategy::kDefault);
}

}  // namespace testing
}  // namespace mlo
