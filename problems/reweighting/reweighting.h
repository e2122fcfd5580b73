#pragma once
/// \file
/// Data reweighting (Meta-Weight-Net style, bilevel):
///
///   lower (Classifier):  min_w  mean_i  MWN(l_i)  l_i(w)        l_i = per-sample cross-entropy
///   upper (Reweighter):  min_phi  CE(meta set; w*(phi))        phi = the MWN's parameters
///
/// The weights are computed from the *detached* per-sample losses, so the classifier's gradient
/// is the weighted gradient and the reweighter's parameters enter the lower loss only through
/// the weights. DARTS is the usual method; any method works (`ProblemConfig::method`).
/// Without a reweighter the classifier trains on the plain mean loss (the baseline).

#include <mlo/core/problem.h>

#include <memory>

namespace mlo {
namespace problems {
namespace reweighting {

class Reweighter;

/// Lower level: a classifier whose module is an `mlo::nn::Chain` producing logits.
class Classifier : public Problem {
 public:
  using Problem::Problem;
  /// The level above; null trains without reweighting.
  std::shared_ptr<Reweighter> reweighter;
  /// Divide by the batch's total weight instead of its size: sum_i w_i l_i / sum_i w_i. Only the
  /// relative weights then matter, so the reweighter cannot shrink every weight towards zero (in
  /// effect a smaller learning rate), a collapse seen without it on long-tailed Fashion-MNIST.
  bool normalize_weights = true;
  /// Weighted mean of per-sample cross-entropy (normalized or not); records "acc" and, with a
  /// reweighter, the meta weights' "weight_mean", "weight_std", "weight_min", "weight_max".
  at::Tensor training_step(const Batch& batch) override;
  /// Logits of the classifier for `x`.
  at::Tensor logits(const at::Tensor& x);
};

/// Upper level: the reweighting net (`mlo::nn::MWN`), trained on the balanced meta set.
class Reweighter : public Problem {
 public:
  using Problem::Problem;
  std::shared_ptr<Classifier> classifier;
  /// Mean cross-entropy of the classifier on the meta batch; records "acc".
  at::Tensor training_step(const Batch& batch) override;
  /// Per-sample weights [N] for per-sample losses [N] (pass them detached).
  at::Tensor weights(const at::Tensor& losses);
};

}  // namespace reweighting
}  // namespace problems
}  // namespace mlo
