// A constant of a loss that is computed from the parameters (`stop_gradient`), and what it
// throws when forward mode differentiates through it.
#pragma once

#include <mlo/base/error.h>

#include <ATen/core/Tensor.h>

#include <string>

namespace mlo {

/// Thrown by `stop_gradient` for a tensor that carries a forward-mode tangent. A hypergradient
/// method's forward route reports it as `hypergrad::ForwardModeUnsupported`, naming itself and
/// the problem (a method under mode auto then takes its finite difference).
class StoppedTangent : public Error {
 public:
  using Error::Error;
};

/// `t` as a constant of the loss: `t.detach()`, for an input the loss treats as fixed although
/// it is computed from the parameters (the per-sample losses a weight net reads). A finite
/// difference sees that dependence, reverse mode by design does not, and forward mode cannot
/// honour it: when `t` carries a forward-mode tangent (a jvp route re-evaluating the loss),
/// throws `StoppedTangent` naming `what` ("the weight net's inputs"). Fix such an input at the
/// problem's own step instead (`Problem::step_value`) for the forward route.
at::Tensor stop_gradient(const at::Tensor& t, const std::string& what = "a stopped gradient");

}  // namespace mlo
