#pragma once
// A hypergradient method defined outside libmlo: damped fixed-point iteration for H^{-1} v,
// stopped by a relative residual tolerance. Registered by name, so a problem selects it in YAML
// (`method: fixed_point` with a `fixed_point: {...}` section) and in code
// (`mlo::ProblemConfig().method(FixedPointOptions().tolerance(1e-8))`).
//
//   x_0 = 0,   x_{k+1} = x_k + alpha (v - H x_k),   until ||v - H x_k|| <= tolerance ||v||
//   result = -(d^2 L / dlambda dw) x_K
//
// It converges for 0 < alpha < 2 / lambda_max(H). Unlike the Neumann series (the same iterates
// for a fixed count), it stops on the residual and reports how many products it took.

#include <mlo/core/method.h>
#include <mlo/core/level.h>
#include <mlo/core/problem.h>
#include <mlo/hypergrad/vector.h>

#include <torch/arg.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace fixed_point {

struct FixedPointOptions;

/// The method: one instance serves one lower problem.
class FixedPoint : public mlo::Hypergradient {
 public:
  explicit FixedPoint(double alpha, int64_t max_iterations, double tolerance)
      : alpha_(alpha), max_iterations_(max_iterations), tolerance_(tolerance) {}

  std::vector<at::Tensor> apply(const std::vector<at::Tensor>& v_in, mlo::Level& curr,
                                mlo::Level& prev) override {
    namespace hg = mlo::hypergrad;
    at::AutoGradMode enable_grad(true);
    hg::LowerGradient lower(curr);
    const hg::TensorList v = hg::defined_or_zeros(v_in, lower.parameters(), "fixed_point",
                                                  curr.name());
    const double v_norm = hg::norm(v);
    hg::TensorList x = hg::zeros_like(v);
    hg::TensorList residual = hg::clone(v);  // v - H x at x = 0
    last_iterations_ = 0;
    while (last_iterations_ < max_iterations_ && hg::norm(residual) > tolerance_ * v_norm) {
      hg::axpy(alpha_, residual, x);
      residual = hg::add_scaled(v, -1.0, lower.hvp(x));
      ++last_iterations_;
    }
    last_residual_ = v_norm > 0 ? hg::norm(residual) / v_norm : 0.0;
    hg::TensorList result = lower.mixed(x, prev.parameters());
    hg::negate_(result);
    return result;
  }

  /// Hessian-vector products the latest `apply` took, and its relative residual.
  int64_t last_iterations() const { return last_iterations_; }
  double last_residual() const { return last_residual_; }

 private:
  double alpha_;
  int64_t max_iterations_;
  double tolerance_;
  int64_t last_iterations_ = 0;
  double last_residual_ = 0.0;
};

/// The options: its YAML keys, their checks, and the method they build.
struct FixedPointOptions : mlo::MethodOptionsFor<FixedPointOptions> {
  static constexpr const char* kName = "fixed_point";
  /// Step of the iteration; converges for 0 < alpha < 2 / lambda_max(H).
  TORCH_ARG(double, alpha) = 0.5;
  /// Most Hessian-vector products per hypergradient.
  TORCH_ARG(int64_t, max_iterations) = 50;
  /// Stop when ||v - H x|| <= tolerance * ||v||.
  TORCH_ARG(double, tolerance) = 1e-4;

 public:
  void visit(mlo::Fields& fields) override {
    fields("alpha", alpha(), mlo::positive());
    fields("max_iterations", max_iterations(), mlo::at_least(1));
    fields("tolerance", tolerance(), mlo::in_range(0, 1));
  }
  std::unique_ptr<mlo::Hypergradient> make() const override {
    MLO_CHECK(alpha() > 0, "fixed_point: alpha must be > 0, got ", alpha());
    MLO_CHECK(max_iterations() >= 1, "fixed_point: max_iterations must be >= 1, got ",
              max_iterations());
    return std::make_unique<FixedPoint>(alpha(), max_iterations(), tolerance());
  }
};

// NOTE: in a header, so the test and the program share it; a program that includes it from
// several files registers the same type under the same name again, which the registry accepts
// (it keeps the first; another type under this name would be an error).
MLO_REGISTER_METHOD(FixedPointOptions);

}  // namespace fixed_point
