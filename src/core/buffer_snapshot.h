#pragma once
// Internal to core (not installed): puts module buffers back as they were.

#include <ATen/ATen.h>

#include <utility>
#include <vector>

namespace mlo {
namespace detail {

/// Copies a list of buffers (batch-norm running statistics and counters, ...) and writes the
/// copies back into the same tensors when it goes out of scope, also during unwinding.
///
/// A problem's buffers may change only in its own training step. Other passes that run its
/// module in train mode (an upper problem's loss reading the lower model, hypergradient
/// re-evaluations at perturbed weights) still normalize with batch statistics, but whatever they
/// write into the running statistics is undone here, exactly.
class BufferSnapshot {
 public:
  explicit BufferSnapshot(std::vector<at::Tensor> buffers) : buffers_(std::move(buffers)) {
    saved_.reserve(buffers_.size());
    for (const auto& b : buffers_) saved_.push_back(b.detach().clone());
  }
  ~BufferSnapshot() {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < buffers_.size(); ++i) buffers_[i].detach().copy_(saved_[i]);
  }
  BufferSnapshot(const BufferSnapshot&) = delete;
  BufferSnapshot& operator=(const BufferSnapshot&) = delete;

 private:
  std::vector<at::Tensor> buffers_;  // handles to the live buffers (shared storage)
  std::vector<at::Tensor> saved_;
};

}  // namespace detail
}  // namespace mlo
