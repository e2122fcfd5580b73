#pragma once
/// \file
/// The central finite difference of the mixed second derivative along a direction, shared by
/// darts and sama and public for methods written outside libmlo.

#include <mlo/hypergrad/vector.h>

#include <cmath>
#include <cstddef>
#include <limits>

namespace mlo {
namespace hypergrad {
/// Puts the saved parameter values back when it goes out of scope, also during unwinding.
class RestoreOnExit {
 public:
  /// Will copy `saved[i]` into `params[i]`; both lists are held by reference and must outlive it.
  RestoreOnExit(const TensorList& params, const TensorList& saved)
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
  const TensorList& params_;
  const TensorList& saved_;
};

/// Steps w back by -offset * d when it goes out of scope (also during unwinding): the in-place
/// restore of `central_difference(..., exact_restore = false)`, which keeps no copy of w.
class StepBackOnExit {
 public:
  /// Starts at offset 0 (w as it is); both lists are held by reference and must outlive it.
  StepBackOnExit(const TensorList& w, const TensorList& d) : w_(w), d_(d) {}
  ~StepBackOnExit() { move(-offset_); }
  StepBackOnExit(const StepBackOnExit&) = delete;
  StepBackOnExit& operator=(const StepBackOnExit&) = delete;
  /// Moves w to w_original + to * d.
  void go_to(double to) {
    move(to - offset_);
    offset_ = to;
  }

 private:
  void move(double by) const {
    if (by == 0.0) return;
    at::NoGradGuard no_grad;
    for (std::size_t i = 0; i < w_.size(); ++i) w_[i].add_(d_[i], by);
  }
  const TensorList& w_;
  const TensorList& d_;
  double offset_ = 0.0;
};

/// Sets w = w0 + step * v in place.
inline void set_perturbed(const TensorList& w, const TensorList& w0, const TensorList& v,
                          double step) {
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < w.size(); ++i) {
    w[i].copy_(w0[i]).add_(v[i], step);
  }
}

/// eps = alpha / ||d||;  (d/dlambda L(w - eps d) - d/dlambda L(w + eps d)) / (2 eps)
///   ~ -(d^2 L / dlambda dw) d,
/// L = `curr`'s loss over its latest window, w = `curr`'s parameters (restored bit for bit from
/// a copy, or with `exact_restore` false stepped back in place without one; also when the loss
/// throws). Zeros for a zero `d`; NaNs for a non-finite one.
inline TensorList central_difference(Level& curr, const TensorList& lambda, const TensorList& d,
                                     double alpha, bool exact_restore = true) {
  const TensorList w = curr.parameters();
  // (under zero3, d is this rank's slice of the direction: its norm sums over the ranks)
  const double d_norm = std::sqrt(curr.sum_over_shards(dot(d, d)));
  if (d_norm == 0.0 || lambda.empty()) {
    return zeros_like(lambda);
  }
  if (!std::isfinite(d_norm)) {
    // NOTE: no finite difference exists; hand back a non-finite result, which the stepping
    // problem treats like any other overflow (skip under loss scaling, else an error).
    TensorList result = zeros_like(lambda);
    for (auto& t : result) t.fill_(std::numeric_limits<double>::quiet_NaN());
    return result;
  }
  const double eps = alpha / d_norm;
  const double inv_two_eps = 1.0 / (2.0 * eps);
  if (!exact_restore) {
    StepBackOnExit position(w, d);
    position.go_to(eps);
    const TensorList grad_plus = window_grad(curr, lambda);
    position.go_to(-eps);
    TensorList result = window_grad(curr, lambda);
    for (std::size_t i = 0; i < result.size(); ++i) {
      result[i].sub_(grad_plus[i]).mul_(inv_two_eps);
    }
    return result;
  }
  // NOTE: by default the original values are copied and written back, rather than subtracting
  // eps * d again, so that w is restored exactly (no floating-point drift over many steps).
  const TensorList saved = clone(w);
  RestoreOnExit restore(w, saved);

  set_perturbed(w, saved, d, eps);
  const TensorList grad_plus = window_grad(curr, lambda);
  set_perturbed(w, saved, d, -eps);
  TensorList result = window_grad(curr, lambda);

  for (std::size_t i = 0; i < result.size(); ++i) {
    result[i].sub_(grad_plus[i]).mul_(inv_two_eps);
  }
  return result;
}

}  // namespace hypergrad
}  // namespace mlo
