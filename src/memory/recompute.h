#pragma once
// Internal to core (not installed): what a recomputing autograd function records of its forward
// and re-installs for the recomputation in backward: the random generators' states (CPU's, and a
// CUDA device's in CUDA builds), the autocast state, and the values of buffers the forward
// updates as a side effect. Activation checkpointing (memory/checkpoint.h) and the functional
// call (nn/functional_call.h) recompute this way.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <vector>

namespace mlo {
namespace memory {
namespace detail {

// The state of a forward that its recomputation must see again.
struct ForwardState {
  // The forward's state now, for work on `device` (whose generator is recorded when it has one
  // of its own).
  static ForwardState record(const c10::Device& device);

  c10::Device device{c10::kCPU};
  at::Tensor cpu_rng;
  at::Tensor device_rng;
  bool autocast_cpu = false;
  c10::ScalarType autocast_cpu_dtype = c10::kBFloat16;
  bool autocast_cuda = false;
  c10::ScalarType autocast_cuda_dtype = c10::kHalf;
};

// Installs `forward`'s random and autocast state for a recomputation, and puts the current
// state back when destroyed (also on exceptions), `buffers` included: the values they held when
// the scope began (so a recomputation updates them no second time).
class RecomputeScope {
 public:
  RecomputeScope(const ForwardState& forward, std::vector<at::Tensor> buffers);
  ~RecomputeScope();
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;

 private:
  const ForwardState& forward_;
  std::vector<at::Tensor> buffers_, saved_buffers_;
  ForwardState current_;
  bool nested_ = false;
};

}  // namespace detail
}  // namespace memory
}  // namespace mlo
