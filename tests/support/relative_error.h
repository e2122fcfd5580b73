#pragma once
// Test helper: the relative error of a vector held as a list of tensors (one per parameter, as
// hypergradient methods return them).

#include <torch/torch.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace mlo {
namespace testing {

/// ||got - want|| / ||want|| over all tensors together; infinity when `want` is zero.
inline double relative_error(const std::vector<torch::Tensor>& got,
                             const std::vector<torch::Tensor>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]).pow(2).sum().item<double>();
    den += want[i].pow(2).sum().item<double>();
  }
  return den > 0 ? std::sqrt(num / den) : std::numeric_limits<double>::infinity();
}

}  // namespace testing
}  // namespace mlo
