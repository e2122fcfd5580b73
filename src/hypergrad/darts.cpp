#include <mlo/hypergrad/darts.h>

#include <mlo/core/config.h>

#include <mlo/base/error.h>
#include <mlo/core/problem.h>

#include "vector_ops.h"

#include <torch/autograd.h>

#include <cmath>
#include <limits>
#include <cstddef>

namespace mlo {
namespace hypergrad {
namespace {

// Puts the saved parameter values back when it goes out of scope, also during unwinding.
class RestoreOnExit {
 public:
  RestoreOnExit(const detail::TensorList& params, const detail::TensorList& saved)
      : params_(params), saved_(saved) {}
  ~RestoreOnExit() {
    at::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      params_[i].copy_(saved_[i]);
    }
  }
  RestoreOnExit(const RestoreOnExit&) = delete;
  RestoreOnExit& operator=(const RestoreOnExit&) = delete;

 private:
  const detail::TensorList& params_;
  const detail::TensorList& saved_;
};

// Sets w = w0 + step * v in place.
void set_perturbed(const detail::TensorList& w, const detail::TensorList& w0,
                   const detail::TensorList& v, double step) {
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < w.size(); ++i) {
    w[i].copy_(w0[i]).add_(v[i], step);
  }
}

}  // namespace

Darts::Darts(const ProblemConfig& config) : Darts(config.darts()) {}

Darts::Darts(DartsOptions options) : options_(std::move(options)) {
  MLO_CHECK(options_.alpha() > 0, "darts: alpha must be > 0, got ", options_.alpha());
}

std::vector<at::Tensor> Darts::apply(const std::vector<at::Tensor>& v_in, Problem& curr,
                                     Problem& prev) {
  at::AutoGradMode enable_grad(true);
  const detail::TensorList w = curr.parameters();
  const detail::TensorList lambda = prev.parameters();
  const detail::TensorList v = detail::defined_or_zeros(v_in, w, "darts", curr.name());

  const double v_norm = detail::norm(v);
  if (v_norm == 0.0 || lambda.empty()) {
    return detail::zeros_like(lambda);
  }
  if (!std::isfinite(v_norm)) {
    // NOTE: no finite difference exists; hand back a non-finite result, which the stepping
    // problem treats like any other overflow (skip under loss scaling, else an error).
    detail::TensorList result = detail::zeros_like(lambda);
    for (auto& t : result) t.fill_(std::numeric_limits<double>::quiet_NaN());
    return result;
  }
  const double eps = options_.alpha() / v_norm;

  // NOTE: the original values are copied and written back, rather than subtracting eps * v
  // again, so that w is restored exactly (no floating-point drift over many steps).
  const detail::TensorList saved = detail::clone(w);
  RestoreOnExit restore(w, saved);

  set_perturbed(w, saved, v, eps);
  const detail::TensorList grad_plus = detail::window_grad(curr, lambda);
  set_perturbed(w, saved, v, -eps);
  detail::TensorList result = detail::window_grad(curr, lambda);

  // (g- - g+) / (2 eps)
  const double inv_two_eps = 1.0 / (2.0 * eps);
  for (std::size_t i = 0; i < result.size(); ++i) {
    result[i].sub_(grad_plus[i]).mul_(inv_two_eps);
  }
  return result;
}

namespace detail {
void link_darts() {}
}  // namespace detail

MLO_REGISTER_HYPERGRADIENT(Method::kDarts, Darts);

}  // namespace hypergrad
}  // namespace mlo
