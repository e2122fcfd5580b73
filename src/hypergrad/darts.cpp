#include <mlo/hypergrad/darts.h>

#include <mlo/base/error.h>
#include <mlo/core/level.h>
#include <mlo/core/problem.h>

#include <mlo/hypergrad/finite_difference.h>
#include <mlo/hypergrad/forward_mode.h>

#include <spdlog/spdlog.h>

#include <torch/autograd.h>

#include <cmath>
#include <limits>
#include <cstddef>

namespace mlo {
namespace hypergrad {

Darts::Darts(DartsOptions options) : options_(std::move(options)) {
  check_options(options_);
}

std::vector<at::Tensor> Darts::apply(const std::vector<at::Tensor>& v_in, Level& curr,
                                     Level& prev) {
  at::AutoGradMode enable_grad(true);
  const TensorList v =
      defined_or_zeros(v_in, curr.parameters(), "darts", curr.name());
  if (options_.mode() != DartsMode::kFiniteDifference && !finite_difference_) {
    try {
      if (prev.shards_parameters()) {
        // NOTE: zero3's reduce-scatter of the upper gradients carries no tangents.
        throw ForwardModeUnsupported(c10::str(
            "darts (mode jvp): problem '", prev.name(), "' above '", curr.name(), "' shards its ",
            "parameters (zero3), which forward mode does not follow; choose mode: ",
            "finite_difference or auto"));
      }
      TensorList result = forward_mixed(curr, prev.parameters(), v, "darts");
      negate_(result);
      if (!logged_) {
        logged_ = true;
        spdlog::info("darts: problem '{}' takes the exact mixed product in forward mode ({})",
                     curr.name(),
                     curr.problem().separable_reevaluation()
                         ? "its separable loss's terms forward, the coefficients backward"
                         : "forward-over-reverse");
      }
      return result;
    } catch (const ForwardModeUnsupported& e) {
      if (options_.mode() == DartsMode::kJvp) throw;
      spdlog::warn("{}; mode auto: the finite difference from now on", e.what());
      finite_difference_ = true;
      logged_ = true;
    }
  }
  return central_difference(curr, prev.parameters(), v, options_.alpha(),
                            options_.exact_restore());
}

void Darts::check(const MethodContext& context) const {
  MLO_CHECK(options_.mode() != DartsMode::kJvp || !context.shards_parameters, "darts.mode: ",
            "problem '", context.problem.name(), "' shards its parameters (zero3), which ",
            "forward mode does not follow; choose finite_difference or auto");
}

MLO_REGISTER_METHOD(DartsOptions);

}  // namespace hypergrad

void DartsOptions::visit(Fields& fields) {
  fields("alpha", alpha(), positive());
  fields("exact_restore", exact_restore());
  fields.enumeration("mode", mode());
}

std::unique_ptr<Hypergradient> DartsOptions::make() const {
  return std::make_unique<hypergrad::Darts>(*this);
}

}  // namespace mlo
