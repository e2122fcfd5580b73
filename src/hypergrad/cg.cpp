#include <mlo/hypergrad/cg.h>

#include <mlo/core/config.h>

#include <mlo/base/error.h>
#include <mlo/core/problem.h>

#include "vector_ops.h"

#include <spdlog/spdlog.h>
#include <torch/autograd.h>

#include <cmath>

namespace mlo {
namespace hypergrad {

CG::CG(const ProblemConfig& config) : CG(config.cg()) {}

CG::CG(CGOptions options) : options_(std::move(options)) {
  MLO_CHECK(options_.iterations() >= 1, "cg: iterations must be >= 1, got ", options_.iterations());
  MLO_CHECK(options_.alpha() > 0, "cg: alpha must be > 0, got ", options_.alpha());
}

std::vector<at::Tensor> CG::apply(const std::vector<at::Tensor>& v_in, Problem& curr,
                                  Problem& prev) {
  at::AutoGradMode enable_grad(true);
  const detail::TensorList lambda = prev.parameters();
  detail::LowerGradient lower(curr);
  const detail::TensorList v =
      detail::defined_or_zeros(v_in, lower.parameters(), "cg", curr.name());
  const double alpha = options_.alpha();

  // Standard CG on A x = b with A = alpha H, b = alpha v, x0 = 0.
  detail::TensorList x = detail::zeros_like(v);
  detail::TensorList r = detail::scale(v, alpha);
  detail::TensorList p = detail::clone(r);
  double rr = detail::dot(r, r);
  // NOTE: stop once the residual is at rounding level relative to b; further steps would divide
  // rounding noise by rounding noise. The bound is far below what K steps reach in float32.
  const double rr_stop = rr * 1e-28;
  for (int64_t k = 0; k < options_.iterations() && rr > rr_stop; ++k) {
    const detail::TensorList ap = detail::scale(lower.hvp(p), alpha);
    const double pap = detail::dot(p, ap);
    if (!(pap > 0.0) || !std::isfinite(pap)) {
      // Non-positive curvature along p (or a non-finite product): CG's step is undefined.
      spdlog::debug("cg: problem '{}': non-positive curvature p.Hp = {} at step {}; stopping",
                    curr.name(), pap / alpha, k);
      if (k == 0) {
        x = detail::clone(v);  // H^{-1} ~ I, as in DARTS
      }
      break;
    }
    const double step = rr / pap;
    detail::axpy(step, p, x);
    detail::axpy(-step, ap, r);
    const double rr_next = detail::dot(r, r);
    const double beta = rr_next / rr;
    rr = rr_next;
    p = detail::add_scaled(r, beta, p);  // p <- r + beta p
  }

  detail::TensorList result = lower.mixed(x, lambda);
  detail::negate_(result);
  return result;
}

namespace detail {
void link_cg() {}
}  // namespace detail

MLO_REGISTER_HYPERGRADIENT(Method::kCG, CG);

}  // namespace hypergrad
}  // namespace mlo
