#pragma once
/// \file
/// `mlo::hypergrad::CG`: implicit hypergradient with conjugate gradient for H^{-1} v.
///
/// Paper: A. Rajeswaran, C. Finn, S. Kakade, S. Levine, "Meta-Learning with Implicit Gradients"
/// (iMAML), NeurIPS 2019 (arXiv:1909.04630), Sec. 3.1 and Algorithm 2.

#include <mlo/core/method.h>
#include <mlo/hypergrad/forward_mode.h>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include <vector>

namespace mlo {

/// Conjugate gradient: `iterations` CG steps on (alpha H) x = alpha v; the solution is H^{-1} v
/// for every alpha > 0 (alpha only rescales the system).
struct CGOptions : MethodOptionsFor<CGOptions> {
  /// The name configs select it by.
  static constexpr const char* kName = "cg";
  /// CG steps (K >= 1), one Hessian-vector product each.
  TORCH_ARG(int64_t, iterations) = 1;
  /// Scale of the system (> 0); leaves the solution unchanged.
  TORCH_ARG(double, alpha) = 1.0;
  /// How the Hessian-vector products and the final mixed product are taken: `kDoubleBackward`
  /// (reverse-over-reverse), `kJvp` (forward mode, hypergrad/forward_mode.h) or `kAuto`.
  TORCH_ARG(HvpMode, mode) = HvpMode::kDoubleBackward;

 public:  // (TORCH_ARG leaves the struct in a private section)
  /// The keys of the `cg:` section of a problem.
  void visit(Fields& fields) override;
  std::unique_ptr<Hypergradient> make() const override;
};

namespace hypergrad {

/// Solves (alpha H) x = alpha v with K = `iterations` steps of conjugate gradient from x0 = 0,
/// one Hessian-vector product per step, then returns -d/dlambda (dL/dw . x).
///
/// Scaling both sides by alpha leaves every CG iterate unchanged, so x -> H^{-1} v for any
/// alpha > 0 (alpha only changes the conditioning of the arithmetic); with exact arithmetic CG
/// is exact after dim(w) steps when H is positive definite. CG stops early when the residual
/// vanishes, or when it meets a direction of non-positive curvature (H not positive definite
/// there); if that happens at the first step, x = v is used (H^{-1} ~ I, as in DARTS).
/// Options: `CGOptions::iterations`, `CGOptions::alpha`.
///
/// ```
/// auto lower = std::make_shared<Inner>("inner", mlo::ProblemConfig().method(
///     mlo::CGOptions().iterations(10)));
/// ```
class CG : public Hypergradient {
 public:
  /// Validates `options` (throws `mlo::Error` naming the bad value).
  explicit CG(CGOptions options);

  /// Hessian-vector products of the lower loss: true.
  bool second_order() const override { return true; }
  /// See the class comment; `v` over `curr`'s trainable parameters, result over `prev`'s.
  std::vector<at::Tensor> apply(const std::vector<at::Tensor>& v, Level& curr,
                                Level& prev) override;

  /// Of the latest `apply`: "iterations" (CG steps taken), "residual" (|r| / |b| of CG's
  /// iterate after them; 1 when none was taken),
  /// "stopped_early" (1: the residual vanished before `iterations` steps), "negative_curvature"
  /// (1: a direction with p.Hp <= 0 stopped it), "fell_back" (1: that happened at the first
  /// step, so x = v), and under mode jvp or auto "jvp_fell_back" (1: reverse mode took the
  /// products).
  Metrics diagnostics() const override { return diagnostics_; }

  /// The options it was built with.
  const CGOptions& options() const { return options_; }

 private:
  CGOptions options_;
  Metrics diagnostics_;
  SecondOrder::Route route_;  // the forward-mode route taken so far (mode jvp, auto)
};

}  // namespace hypergrad
}  // namespace mlo
