#include "memory/recompute.h"

#include <mlo/build_config.h>
#include <mlo/base/error.h>
#include <mlo/base/rng.h>
#include <mlo/detail/torch_compat.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/GradMode.h>
#if MLO_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

#include <utility>

namespace mlo {
namespace memory {
namespace detail {

namespace {

// The device generator a recomputation forks: a CUDA device's in CUDA builds.
bool has_device_generator(const c10::Device& device) { return MLO_WITH_CUDA && device.is_cuda(); }

at::Generator device_generator(const c10::Device& device) {
#if MLO_WITH_CUDA
  return at::cuda::detail::getDefaultCUDAGenerator(device.index());
#else
  (void)device;
  MLO_INTERNAL_ASSERT(false, "no device generator in a CPU build");
  return at::detail::getDefaultCPUGenerator();
#endif
}

}  // namespace

ForwardState ForwardState::record(const c10::Device& device) {
  ForwardState state;
  state.device = device;
  state.cpu_rng = rng_state(at::detail::getDefaultCPUGenerator());
  if (has_device_generator(device)) state.device_rng = rng_state(device_generator(device));
  state.autocast_cpu = mlo::detail::autocast_enabled(c10::kCPU);
  state.autocast_cpu_dtype = mlo::detail::autocast_dtype(c10::kCPU);
  state.autocast_cuda = mlo::detail::autocast_enabled(c10::kCUDA);
  state.autocast_cuda_dtype = mlo::detail::autocast_dtype(c10::kCUDA);
  return state;
}

RecomputeScope::RecomputeScope(const ForwardState& forward, std::vector<at::Tensor> buffers)
    : forward_(forward), buffers_(std::move(buffers)) {
  at::NoGradGuard no_grad;
  for (const auto& b : buffers_) saved_buffers_.push_back(b.clone());
  current_.device = forward.device;
  current_.cpu_rng = rng_state(at::detail::getDefaultCPUGenerator());
  set_rng_state(at::detail::getDefaultCPUGenerator(), forward.cpu_rng);
  if (forward.device_rng.defined()) {
    current_.device_rng = rng_state(device_generator(forward.device));
    set_rng_state(device_generator(forward.device), forward.device_rng);
  }
  current_.autocast_cpu = mlo::detail::autocast_enabled(c10::kCPU);
  current_.autocast_cpu_dtype = mlo::detail::autocast_dtype(c10::kCPU);
  current_.autocast_cuda = mlo::detail::autocast_enabled(c10::kCUDA);
  current_.autocast_cuda_dtype = mlo::detail::autocast_dtype(c10::kCUDA);
  mlo::detail::set_autocast_dtype(c10::kCPU, forward.autocast_cpu_dtype);
  mlo::detail::set_autocast_enabled(c10::kCPU, forward.autocast_cpu);
  mlo::detail::set_autocast_dtype(c10::kCUDA, forward.autocast_cuda_dtype);
  mlo::detail::set_autocast_enabled(c10::kCUDA, forward.autocast_cuda);
  nested_ = forward.autocast_cpu || forward.autocast_cuda;
  if (nested_) at::autocast::increment_nesting();
}

RecomputeScope::~RecomputeScope() {
  // NOTE: as AutocastGuard does, drop the cast cache when the outermost region ends.
  if (nested_ && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  mlo::detail::set_autocast_enabled(c10::kCPU, current_.autocast_cpu);
  mlo::detail::set_autocast_dtype(c10::kCPU, current_.autocast_cpu_dtype);
  mlo::detail::set_autocast_enabled(c10::kCUDA, current_.autocast_cuda);
  mlo::detail::set_autocast_dtype(c10::kCUDA, current_.autocast_cuda_dtype);
  if (current_.device_rng.defined()) {
    set_rng_state(device_generator(forward_.device), current_.device_rng);
  }
  set_rng_state(at::detail::getDefaultCPUGenerator(), current_.cpu_rng);
  // NOTE: the recomputed batch-norm nodes saved the running statistics (at their updated
  // version); a normal copy_ would bump the version and make their backward refuse to run.
  // Below the ADInplaceOrView key the copy leaves the version alone; the values those nodes
  // saved are not used by a training-mode backward, and eval mode does not update them.
  at::NoGradGuard no_grad;
  at::AutoDispatchBelowADInplaceOrView keep_version;
  for (size_t i = 0; i < saved_buffers_.size(); ++i) buffers_[i].copy_(saved_buffers_[i]);
}

}  // namespace detail
}  // namespace memory
}  // namespace mlo
