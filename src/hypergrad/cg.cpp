#include <mlo/hypergrad/cg.h>

#include <mlo/base/error.h>
#include <mlo/core/level.h>
#include <mlo/core/problem.h>

#include <mlo/hypergrad/forward_mode.h>
#include <mlo/hypergrad/vector.h>

#include <spdlog/spdlog.h>
#include <torch/autograd.h>

#include <cmath>

namespace mlo {
namespace hypergrad {

CG::CG(CGOptions options) : options_(std::move(options)) { check_options(options_); }

std::vector<at::Tensor> CG::apply(const std::vector<at::Tensor>& v_in, Level& curr,
                                  Level& prev) {
  at::AutoGradMode enable_grad(true);
  const TensorList lambda = prev.parameters();
  SecondOrder lower(curr, options_.mode(), "cg", route_);
  const TensorList v =
      defined_or_zeros(v_in, curr.parameters(), "cg", curr.name());
  const double alpha = options_.alpha();

  // Standard CG on A x = b with A = alpha H, b = alpha v, x0 = 0.
  TensorList x = zeros_like(v);
  TensorList r = scale(v, alpha);
  TensorList p = clone(r);
  double rr = dot(r, r);
  const double rr0 = rr;
  // NOTE: stop once the residual is at rounding level relative to b; further steps would divide
  // rounding noise by rounding noise. The bound is far below what K steps reach in float32.
  const double rr_stop = rr * 1e-28;
  int64_t steps = 0;
  bool negative_curvature = false;
  for (; steps < options_.iterations() && rr > rr_stop; ++steps) {
    const TensorList ap = scale(lower.hvp(p), alpha);
    const double pap = dot(p, ap);
    if (!(pap > 0.0) || !std::isfinite(pap)) {
      // Non-positive curvature along p (or a non-finite product): CG's step is undefined.
      spdlog::debug("cg: problem '{}': non-positive curvature p.Hp = {} at step {}; stopping",
                    curr.name(), pap / alpha, steps);
      negative_curvature = true;
      if (steps == 0) {
        x = clone(v);  // H^{-1} ~ I, as in DARTS
      }
      break;
    }
    const double step = rr / pap;
    axpy(step, p, x);
    axpy(-step, ap, r);
    const double rr_next = dot(r, r);
    const double beta = rr_next / rr;
    rr = rr_next;
    p = add_scaled(r, beta, p);  // p <- r + beta p
  }
  diagnostics_ = {
      {"iterations", static_cast<double>(steps)},
      {"residual", rr0 > 0.0 ? std::sqrt(rr / rr0) : 0.0},
      {"stopped_early", !negative_curvature && steps < options_.iterations() ? 1.0 : 0.0},
      {"negative_curvature", negative_curvature ? 1.0 : 0.0},
      {"fell_back", negative_curvature && steps == 0 ? 1.0 : 0.0},
  };

  TensorList result = lower.mixed(x, lambda);
  // (after the mixed product, which may fall back too)
  if (options_.mode() != HvpMode::kDoubleBackward) {
    diagnostics_["jvp_fell_back"] = route_.fallen_back ? 1.0 : 0.0;
  }
  negate_(result);
  return result;
}

MLO_REGISTER_METHOD(CGOptions);

}  // namespace hypergrad

void CGOptions::visit(Fields& fields) {
  fields("iterations", iterations(), at_least(1));
  fields("alpha", alpha(), positive());
  fields.enumeration("mode", mode());
}

std::unique_ptr<Hypergradient> CGOptions::make() const {
  return std::make_unique<hypergrad::CG>(*this);
}

}  // namespace mlo
