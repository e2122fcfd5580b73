#pragma once
/// \file
/// Hyperparameter optimization of L2-regularized logistic regression (bilevel):
///
///   outer:  min_lambda  BCE(valid; w*(lambda))          lambda: one L2 weight per feature
///   inner:  w*(lambda) = argmin_w  BCE(train; w) + 1/2 sum_j lambda_j w_j^2
///
/// The inner weights restart from zero at every unroll; lambda is clamped positive after each
/// outer step. `make_logreg_hpo` builds the pair with the settings of the HPO scenario.

#include <mlo/core/problem.h>

#include <torch/nn/modules/linear.h>

#include <cstdint>
#include <memory>

namespace mlo {
namespace problems {
namespace hpo {

/// Per-feature regularization weights lambda (the outer parameters).
class L2WeightsImpl : public torch::nn::Module {
 public:
  L2WeightsImpl(int64_t features, double init);
  at::Tensor weights;
};
TORCH_MODULE(L2Weights);

class LogRegOuter;

/// Inner level: logistic regression (`torch::nn::Linear(features, 1)`) with lambda's penalty.
class LogRegInner : public Problem {
 public:
  using Problem::Problem;
  /// The outer problem (linked by the engine: the one LogRegOuter).
  Handle<LogRegOuter> outer{this};
  /// mean BCE-with-logits + 1/2 sum_j lambda_j w_j^2 (the bias is not penalized).
  at::Tensor training_step(const Batch& batch) override;
  /// Restarts w and the bias from zero.
  void on_inner_loop_start() override;
  /// The model's logits for `x`.
  at::Tensor logits(const at::Tensor& x) const;
};

/// Outer level: validation BCE of the inner model; lambda stays >= `kMinWeight`.
class LogRegOuter : public Problem {
 public:
  using Problem::Problem;
  static constexpr double kMinWeight = 1e-8;
  /// The inner problem (linked by the engine: the one LogRegInner).
  Handle<LogRegInner> inner{this};
  at::Tensor training_step(const Batch& batch) override;
  void param_callback() override;
  /// The current lambda.
  at::Tensor weights() const;
};

/// Synthetic data of the HPO scenario: x ~ N(0, I), y = [x w_true + noise * eps > 0].
struct LogRegData {
  Batch train;
  Batch valid;
  Batch test;  ///< held-out points of the same distribution (empty unless asked for)
};
/// `samples` points split half train / half validation, seeded; plus `test_samples` more points
/// of the same distribution for a test set (drawn after the others, so train and validation do
/// not depend on it).
LogRegData make_logreg_data(int64_t samples = 1000, int64_t features = 20, double noise = 0.1,
                            uint64_t seed = 0, int64_t test_samples = 0);

/// Options of the HPO pair (defaults: the scenario of the test suite and the benchmark).
struct LogRegHpoOptions {
  TORCH_ARG(double, inner_lr) = 0.1;
  TORCH_ARG(double, outer_lr) = 1.0;
  TORCH_ARG(double, outer_momentum) = 0.9;
  TORCH_ARG(double, initial_weight) = 1.0;
  /// When true lambda never changes (the no-meta-learning baseline).
  TORCH_ARG(bool, freeze_weights) = false;
};

/// The linked pair. It owns both problems (with the engine they are added to); their handles to
/// each other do not own, so keep both (or the engine) alive while either is used.
struct LogRegHpo {
  std::shared_ptr<LogRegInner> inner;
  std::shared_ptr<LogRegOuter> outer;
};
/// Builds the linked pair on `data`: inner SGD(inner_lr) on the training half with
/// `inner_config` (e.g. unroll_steps(100) and a method), outer SGD(outer_lr, momentum) on the
/// validation half. Add both to an Engine with `engine.add(outer).add(inner).link(outer, inner)`.
LogRegHpo make_logreg_hpo(const LogRegData& data, ProblemConfig inner_config,
                          const LogRegHpoOptions& options = LogRegHpoOptions());

/// Validation BCE of the inner model (no gradients).
double validation_loss(const LogRegHpo& hpo, const LogRegData& data);

}  // namespace hpo
}  // namespace problems
}  // namespace mlo
