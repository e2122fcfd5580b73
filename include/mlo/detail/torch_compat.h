#pragma once
/// \file
/// The one place where LibTorch versions differ (Debian's 1.13 for CPU builds, 2.x for CUDA
/// builds). Code elsewhere calls these shims instead of testing versions itself.

#include <ATen/autocast_mode.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <torch/version.h>

#define MLO_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||      \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace mlo {
namespace detail {

/// LibTorch version as "major.minor.patch", for logs and reports.
inline const char* torch_version() { return TORCH_VERSION; }

/// Whether autocast is on for `device` (CPU or CUDA).
inline bool autocast_enabled(c10::DeviceType device) {
#if MLO_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::kCPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
#endif
}

/// Turns autocast on or off for `device`.
inline void set_autocast_enabled(c10::DeviceType device, bool enabled) {
#if MLO_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(device, enabled);
#else
  if (device == c10::kCPU) {
    at::autocast::set_cpu_enabled(enabled);
  } else {
    at::autocast::set_enabled(enabled);
  }
#endif
}

/// The dtype autocast casts to on `device`.
inline c10::ScalarType autocast_dtype(c10::DeviceType device) {
#if MLO_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::kCPU ? at::autocast::get_autocast_cpu_dtype()
                             : at::autocast::get_autocast_gpu_dtype();
#endif
}

/// Sets the dtype autocast casts to on `device`.
inline void set_autocast_dtype(c10::DeviceType device, c10::ScalarType dtype) {
#if MLO_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::kCPU) {
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
#endif
}

}  // namespace detail
}  // namespace mlo

#include <ATen/core/Tensor.h>

#include <sstream>
#include <string>
#include <type_traits>

namespace mlo {
namespace detail {

/// The entry of `optimizer.state()` for parameter `param` (or `state.end()`). LibTorch 1.13
/// keys the map by the parameter's TensorImpl address printed as a string, later versions by
/// the address itself; the key type decides.
template <typename StateMap>
auto find_optimizer_state(StateMap& state, const at::Tensor& param) {
  using Key = typename std::decay_t<StateMap>::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream key;
    key << param.unsafeGetTensorImpl();
    return state.find(key.str());
  } else {
    return state.find(static_cast<Key>(param.unsafeGetTensorImpl()));
  }
}

}  // namespace detail
}  // namespace mlo

#include <c10/core/Allocator.h>

#include <utility>

namespace mlo {
namespace detail {

/// The pointer type of an autograd node: `std::shared_ptr<Node>` in LibTorch 1.13,
/// `c10::intrusive_ptr<Node>` in later ones (what `Tensor::grad_fn()` and `Edge` hold).
using NodePtr = std::decay_t<decltype(std::declval<const at::Tensor&>().grad_fn())>;

namespace internal {
template <typename Method>
struct ThirdParameter;
template <typename C, typename R, typename A1, typename A2, typename A3, typename... Rest>
struct ThirdParameter<R (C::*)(A1, A2, A3, Rest...)> {
  using type = A3;
};
}  // namespace internal

/// The type of the running totals `c10::MemoryReportingInfoBase::reportMemoryUsage` receives
/// (`int64_t` in LibTorch 1.13, `size_t` in later ones), read off the method itself so that an
/// override matches whichever LibTorch it is compiled against.
using MemoryReportTotal = typename internal::ThirdParameter<
    decltype(&c10::MemoryReportingInfoBase::reportMemoryUsage)>::type;

}  // namespace detail
}  // namespace mlo
