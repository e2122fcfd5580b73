#pragma once
// Internal to core (not installed): the parameters and buffers of the best validation, for
// `EarlyStopping::restore_best`.

#include <mlo/core/problem.h>

#include <ATen/core/Tensor.h>
#include <torch/serialize/archive.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace mlo {
namespace detail {

using ProblemList = std::vector<std::shared_ptr<Problem>>;

/// Host copies of every problem's module parameters and buffers at one global step. Kept in
/// host memory (a GPU run does not pay for them in device memory) and in the engine's saved
/// state, so that a resumed run restores the same model.
class BestState {
 public:
  /// Copies the problems' current parameters and buffers, as the state of `step`.
  void capture(const ProblemList& problems, int64_t step);
  /// Writes the copies back into the problems' tensors; false (and nothing changes) when
  /// nothing was captured.
  bool restore(const ProblemList& problems) const;
  /// The captured step, or -1.
  int64_t step() const { return step_; }
  void save(torch::serialize::OutputArchive& archive) const;
  /// Reads what `save` wrote (absent from states saved before it existed: nothing captured);
  /// throws `mlo::Error` when the saved tensors do not match the problems' (another model).
  void load(torch::serialize::InputArchive& archive, const ProblemList& problems);

 private:
  int64_t step_ = -1;
  std::vector<std::vector<at::Tensor>> tensors_;  // by problem: parameters, then buffers
};

}  // namespace detail
}  // namespace mlo
