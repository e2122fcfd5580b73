#pragma once
/// \file
/// `mlo::hypergrad::Neumann`: implicit hypergradient with a truncated Neumann series for H^{-1}.
///
/// Paper: J. Lorraine, P. Vicol, D. Duvenaud, "Optimizing Millions of Hyperparameters by Implicit
/// Differentiation", AISTATS 2020 (arXiv:1911.02590), Algorithm 3.

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include <vector>

namespace mlo {

/// Neumann series: H^{-1} v ~ alpha * sum_{k=0..K} (I - alpha H)^k v, K = iterations.
/// Converges when 0 < alpha < 2 / lambda_max(H).
struct NeumannOptions {
  TORCH_ARG(int64_t, iterations) = 1;
  TORCH_ARG(double, alpha) = 1.0;
};

}  // namespace mlo

// NOTE: after the options, which core/config.h (included at the end of hypergradient.h) needs.
#include <mlo/hypergrad/hypergradient.h>

namespace mlo {
namespace hypergrad {

/// Approximates H^{-1} v by K + 1 terms of the Neumann series, K = `iterations`:
///
///   p = alpha * sum_{k=0..K} (I - alpha H)^k v,   result = -d/dlambda (dL/dw . p),
///
/// with one Hessian-vector product per iteration. The series converges to H^{-1} v when
/// 0 < alpha < 2 / lambda_max(H); the error shrinks like max_i |1 - alpha h_i|^(K+1).
/// Options: `NeumannOptions::iterations`, `NeumannOptions::alpha` (`ProblemConfig::neumann()`).
///
/// ```
/// auto lower = std::make_shared<Inner>("inner", mlo::ProblemConfig().method(
///     mlo::NeumannOptions().iterations(5).alpha(0.1)));
/// ```
class Neumann : public Hypergradient {
 public:
  /// Validates `options` (throws `mlo::Error` naming the bad value).
  explicit Neumann(NeumannOptions options);
  /// `Neumann(config.neumann())`: the options of the lower problem's config.
  explicit Neumann(const ProblemConfig& config);

  /// See the class comment; `v` over `curr`'s trainable parameters, result over `prev`'s.
  std::vector<at::Tensor> apply(const std::vector<at::Tensor>& v, Problem& curr,
                                Problem& prev) override;

  /// The options read from the config.
  const NeumannOptions& options() const { return options_; }

 private:
  NeumannOptions options_;
};

}  // namespace hypergrad
}  // namespace mlo
