#pragma once
/// \file
/// Few-shot meta-learning as a bilevel problem (implicit MAML; Rajeswaran, Finn, Kakade and
/// Levine, "Meta-Learning with Implicit Gradients", NeurIPS 2019):
///
///   outer (`MetaLearner`, theta): min_theta  sum over tasks of L_query(phi*(theta))
///   inner (`Learner`, phi):       phi*(theta) = argmin_phi  L_support(phi) + reg/2 |phi - theta|^2
///
/// The learner restarts from theta at every unroll (one task per unroll, read from a
/// `TaskEnvironment`), with a fresh optimizer state, so its hypergradient through CG (or
/// Neumann, as their iterations grow) is iMAML's: reg (H + reg I)^{-1} v with H the support
/// loss's Hessian; DARTS gives reg v ((H + reg I)^{-1} ~ I), SAMA reg J v (J the inner
/// optimizer's Jacobian). `unrolled` and `forward` would treat the unroll's start as a constant
/// and see only the proximal term's path, not MAML's: the learner refuses them
/// (`Hypergradient::differentiates_unroll`; the experiment, naming the YAML key). With `reg = 0` and the method `first_order` it is
/// first-order MAML. Several tasks per meta-batch: the meta-learner's
/// `gradient_accumulation`. `adapt` runs the same inner objective on a copy (evaluation and the
/// baselines). Models: `make_model` (an MLP for the sinusoid, a small CNN for images).

#include "problems/fewshot/tasks.h"

#include <mlo/core/problem.h>
#include <mlo/run/config.h>

#include <torch/nn/modules/container/sequential.h>

#include <cstdint>
#include <string>
#include <vector>

namespace mlo {
namespace problems {
namespace fewshot {

class MetaLearner;

/// Mean squared error (regression) or cross-entropy (classification) of `output` on `target`.
at::Tensor task_loss(const at::Tensor& output, const at::Tensor& target, bool regression);

/// The lower level: phi, adapted to one task's support set.
class Learner : public Problem {
 public:
  /// `reg` >= 0: the proximal term's weight; `regression`: the task loss (`task_loss`).
  Learner(std::string name, ProblemConfig config, double reg, bool regression);
  /// The meta-learner (linked by the engine: the one MetaLearner).
  Handle<MetaLearner> meta{this};
  /// task_loss(support) + reg/2 |phi - theta|^2.
  at::Tensor training_step(const Batch& batch) override;
  /// phi <- theta, and the optimizer's state (momentum, moments) cleared.
  void on_inner_loop_start() override;
  /// The learner's output for `x`.
  at::Tensor forward(const at::Tensor& x) const;
  double reg() const { return reg_; }
  bool regression() const { return regression_; }

 private:
  double reg_;
  bool regression_;
};

/// The upper level: theta, the initialization every task's adaptation starts from.
class MetaLearner : public Problem {
 public:
  using Problem::Problem;
  /// The learner (linked by the engine: the one Learner).
  Handle<Learner> learner{this};
  /// task_loss of the adapted learner on the query set (also records "acc" for classification).
  at::Tensor training_step(const Batch& batch) override;
};

/// The model for `sampler`'s tasks: for the sinusoid, an MLP 1-`hidden`-`hidden`-1 with ReLU
/// (MAML's 40 units); for images of shape `image` (C, H, W), two blocks of a 3x3 convolution
/// (`channels`), ReLU and 2x2 max-pooling, then a linear layer to `outputs`. No batch norm
/// (the adapted copy would carry statistics from task to task).
torch::nn::Sequential make_model(bool regression, int64_t outputs, int64_t hidden,
                                 int64_t channels, const std::vector<int64_t>& image);

/// What an adaptation reached on a task's query set.
struct Adapted {
  double loss = 0.0;
  double acc = 0.0;  ///< classification only
};

/// Copies `start` (the copy's parameters are a new leaf each), takes `steps` steps of the
/// optimizer `optimizer` describes on task_loss(support) + reg/2 |phi - anchor|^2 (anchor:
/// `start`'s parameters; `reg` 0 drops the term), each step's gradient clipped to total norm
/// `clip` as the inner problem's `gradient_clipping` clips its own (0: not clipped), and
/// evaluates the query set. `start` is left unchanged. With `new_head` > 0 the copy's last layer is replaced by a fresh linear layer
/// with that many outputs first (fine-tuning a pre-trained model), initialized from LibTorch's
/// default generator.
Adapted adapt(const torch::nn::Sequential& start, const Task& task, int64_t steps,
              const run::OptimizerConfig& optimizer, double reg, double clip, bool regression,
              int64_t new_head = 0);

}  // namespace fewshot
}  // namespace problems
}  // namespace mlo
