#include <mlo/core/stop_gradient.h>

#include <c10/util/StringUtil.h>

namespace mlo {

at::Tensor stop_gradient(const at::Tensor& t, const std::string& what) {
  if (t.defined() && t._fw_grad(/*level=*/0).defined()) {
    throw StoppedTangent(c10::str(
        what, ": a constant of the loss (a stopped gradient) computed from the parameters ",
        "forward mode differentiates, a dependence forward mode cannot follow (a finite ",
        "difference does); fix the value at the problem's own step (Problem::step_value)"));
  }
  return t.defined() ? t.detach() : t;
}

}  // namespace mlo
