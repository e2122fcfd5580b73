#pragma once
/// \file
/// `mlo::hypergrad::Neumann`: implicit hypergradient with a truncated Neumann series for H^{-1}.
///
/// Paper: J. Lorraine, P. Vicol, D. Duvenaud, "Optimizing Millions of Hyperparameters by Implicit
/// Differentiation", AISTATS 2020 (arXiv:1911.02590), Algorithm 3.

#include <mlo/core/method.h>
#include <mlo/hypergrad/forward_mode.h>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include <vector>

namespace mlo {

/// Neumann series: H^{-1} v ~ alpha * sum_{k=0..K} (I - alpha H)^k v, K = iterations.
/// Converges when 0 < alpha < 2 / lambda_max(H).
struct NeumannOptions : MethodOptionsFor<NeumannOptions> {
  /// The name configs select it by.
  static constexpr const char* kName = "neumann";
  /// K >= 0: the series has K + 1 terms, one Hessian-vector product per iteration.
  TORCH_ARG(int64_t, iterations) = 1;
  /// Step of the series (> 0); it converges for alpha < 2 / lambda_max(H).
  TORCH_ARG(double, alpha) = 1.0;
  /// How the Hessian-vector products and the final mixed product are taken: `kDoubleBackward`
  /// (reverse-over-reverse), `kJvp` (forward mode, hypergrad/forward_mode.h) or `kAuto`.
  TORCH_ARG(HvpMode, mode) = HvpMode::kDoubleBackward;

 public:  // (TORCH_ARG leaves the struct in a private section)
  /// The keys of the `neumann:` section of a problem.
  void visit(Fields& fields) override;
  std::unique_ptr<Hypergradient> make() const override;
};

namespace hypergrad {

/// Approximates H^{-1} v by K + 1 terms of the Neumann series, K = `iterations`:
///
///   p = alpha * sum_{k=0..K} (I - alpha H)^k v,   result = -d/dlambda (dL/dw . p),
///
/// with one Hessian-vector product per iteration. The series converges to H^{-1} v when
/// 0 < alpha < 2 / lambda_max(H); the error shrinks like max_i |1 - alpha h_i|^(K+1).
/// Options: `NeumannOptions::iterations`, `NeumannOptions::alpha`.
///
/// ```
/// auto lower = std::make_shared<Inner>("inner", mlo::ProblemConfig().method(
///     mlo::NeumannOptions().iterations(5).alpha(0.1)));
/// ```
class Neumann : public Hypergradient {
 public:
  /// Validates `options` (throws `mlo::Error` naming the bad value).
  explicit Neumann(NeumannOptions options);

  /// Hessian-vector products of the lower loss: true.
  bool second_order() const override { return true; }
  /// See the class comment; `v` over `curr`'s trainable parameters, result over `prev`'s.
  std::vector<at::Tensor> apply(const std::vector<at::Tensor>& v, Level& curr,
                                Level& prev) override;

  /// Of the latest `apply`: "iterations" (terms added), "term_ratio" (|(I - alpha H)^K v| /
  /// |v|: below 1 and shrinking with K the series converges; 1 or more it does not at this
  /// alpha; 1 with no terms), "negative_curvature" (1: some term t had t.Ht <= 0, where the series grows), and
  /// under mode jvp or auto "jvp_fell_back" (1: reverse mode took the products).
  Metrics diagnostics() const override { return diagnostics_; }

  /// The options it was built with.
  const NeumannOptions& options() const { return options_; }

 private:
  NeumannOptions options_;
  Metrics diagnostics_;
  SecondOrder::Route route_;  // the forward-mode route taken so far (mode jvp, auto)
};

}  // namespace hypergrad
}  // namespace mlo
