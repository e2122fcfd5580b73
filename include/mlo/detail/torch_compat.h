#pragma once
/// \file
/// The one place where LibTorch versions differ (Debian's 1.13 for CPU builds, 2.x for CUDA
/// builds). Code elsewhere calls these shims instead of testing versions itself.

#include <torch/version.h>

#define MLO_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||      \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace mlo {
namespace detail {

/// LibTorch version as "major.minor.patch", for logs and reports.
inline const char* torch_version() { return TORCH_VERSION; }

}  // namespace detail
}  // namespace mlo
