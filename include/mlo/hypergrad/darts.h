#pragma once
/// \file
/// `mlo::hypergrad::Darts`: the finite-difference hypergradient of DARTS.
///
/// Paper: H. Liu, K. Simonyan, Y. Yang, "DARTS: Differentiable Architecture Search", ICLR 2019
/// (arXiv:1806.09055), Sec. 2.3, Eq. (8).

#include <mlo/core/method.h>
#include <mlo/hypergrad/forward_mode.h>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include <utility>
#include <vector>

namespace mlo {

/// How darts takes the mixed product (the names "finite_difference", "jvp", "auto").
using DartsMode = MixedMode;

/// DARTS: eps = alpha / ||v||; result (grad_lambda L(w - eps v) - grad_lambda L(w + eps v)) / 2eps.
struct DartsOptions : MethodOptionsFor<DartsOptions> {
  /// The name configs select it by.
  static constexpr const char* kName = "darts";
  /// Perturbation size, relative to ||v||.
  TORCH_ARG(double, alpha) = 0.01;
  /// true: the lower parameters are restored from a copy, bit for bit. false: they are stepped
  /// back in place (w + eps v, then w - eps v, then w), which needs no parameter-sized copy (one
  /// model's weights less at the upper step's peak) and leaves a rounding drift of a few ulps
  /// of w per hypergradient.
  TORCH_ARG(bool, exact_restore) = true;
  /// `kFiniteDifference` (the default), `kJvp` (the exact product, no eps) or `kAuto`. With
  /// `kJvp`, `alpha` and `exact_restore` are not used.
  TORCH_ARG(DartsMode, mode) = DartsMode::kFiniteDifference;

 public:  // (TORCH_ARG leaves the struct in a private section)
  /// The keys of the `darts:` section of a problem.
  void visit(Fields& fields) override;
  std::unique_ptr<Hypergradient> make() const override;
  /// A finite difference: its re-evaluations need gradients for the upper problems only.
  /// (jvp keeps no copy of w: the direction rides on w as its tangent)
  Reevaluation reevaluation() const override {
    return {true, mode() != DartsMode::kJvp && exact_restore() ? 1 : 0};
  }
};

namespace hypergrad {

/// Approximates the implicit hypergradient with H^{-1} ~ I and a central finite difference of
/// the mixed second derivative along v:
///
///   eps = alpha / ||v||,   g(+/-) = d/dlambda L(w +/- eps v, lambda),
///   result = (g(-) - g(+)) / (2 eps)  ~  -(d^2 L / dlambda dw) v.
///
/// Costs two gradient evaluations of the lower loss and no second-order graph. The lower
/// parameters are perturbed in place and restored bit for bit (also when the loss throws).
/// A zero v gives zeros. Options: `DartsOptions::alpha`.
///
/// With `DartsOptions::mode` jvp the product is exact: `forward_mixed` (forward_mode.h) takes
/// it in forward mode, through the terms of a separable loss
/// (`Problem::separable_reevaluation`: one forward pass in forward mode, one backward pass
/// through the coefficients) or forward-over-reverse. A missing forward-mode formula is an
/// error at the first step (jvp) or a switch to the finite difference (auto), logged once.
///
/// ```
/// auto lower = std::make_shared<Inner>("inner", mlo::ProblemConfig().method(
///     mlo::DartsOptions().alpha(0.01)));
/// ```
class Darts : public Hypergradient {
 public:
  /// Validates `options` (throws `mlo::Error` naming the bad value).
  explicit Darts(DartsOptions options);

  /// See the class comment; `v` over `curr`'s trainable parameters, result over `prev`'s.
  std::vector<at::Tensor> apply(const std::vector<at::Tensor>& v, Level& curr,
                                Level& prev) override;

  /// Under mode jvp or auto, "jvp_fell_back" (1: the finite difference took the mixed
  /// product); under the finite difference, nothing.
  Metrics diagnostics() const override {
    if (options_.mode() == DartsMode::kFiniteDifference) return {};
    return {{"jvp_fell_back", route_.fallen_back ? 1.0 : 0.0}};
  }

  /// The options it was built with.
  const DartsOptions& options() const { return options_; }
  /// Refuses mode jvp on a level that shards its parameters (zero3).
  void check(const MethodContext& context) const override;

 private:
  DartsOptions options_;
  ForwardRoute route_;  // jvp taken, or given up under mode auto
};

}  // namespace hypergrad
}  // namespace mlo
