#pragma once
// Internal to core (not installed): whether a loss's autograd graph reaches some tensors, read
// off the graph it already has (no backward pass): the engine's check, at each problem's first
// step, that every edge of the dependency graph is real.

#include <ATen/core/Tensor.h>

#include <vector>

namespace mlo {
namespace detail {

/// Whether `loss` depends on at least one of `leaves` (tensors that require grad and have no
/// history: parameters) through its autograd graph.
bool reaches(const at::Tensor& loss, const std::vector<at::Tensor>& leaves);

}  // namespace detail
}  // namespace mlo
