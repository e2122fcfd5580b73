#pragma once
/// \file
/// `mlo::hypergrad::DifferentiableOptimizer`: the update rules of LibTorch's SGD (momentum,
/// dampening, Nesterov, weight decay), Adam (with amsgrad) and AdamW written as out-of-place
/// tensor operations, so that autograd differentiates through an optimizer step. The settings
/// of every parameter are read from the user's optimizer (its parameter group), and its state
/// (momentum buffers, moments, step counts) from the optimizer's state, so a replayed step
/// gives the same numbers as `optimizer.step()`.
///
/// Used by `unrolled` (reverse mode through K inner steps) and `sama` (the optimizer's Jacobian
/// with respect to the gradient).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace torch {
namespace optim {
class Optimizer;
}
}  // namespace torch

namespace mlo {
namespace hypergrad {

/// The update rule of an optimizer `DifferentiableOptimizer` understands.
enum class UpdateRule { kSGD, kAdam, kAdamW };

/// One parameter's optimizer settings (those of its parameter group).
struct UpdateSettings {
  /// The optimizer's update rule (the same for every parameter).
  UpdateRule rule = UpdateRule::kSGD;
  /// False for a parameter in no parameter group: the optimizer never changes it.
  bool optimized = false;
  size_t group = 0;  ///< index of its parameter group
  /// SGD: momentum factor (0: no momentum buffer).
  double momentum = 0, dampening = 0, weight_decay = 0;
  /// SGD: Nesterov momentum.
  bool nesterov = false;
  /// Adam/AdamW: decay rate of the first moment.
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  /// Adam/AdamW: the AMSGrad variant (the maximum of the second moments so far).
  bool amsgrad = false;
  /// \var dampening
  /// \brief SGD: dampening; the momentum buffer's update adds (1 - dampening) times the
  /// gradient.
  /// \var weight_decay
  /// \brief SGD and Adam: L2 penalty, weight_decay * w added to the gradient; AdamW: decoupled
  /// decay, w scaled by (1 - lr * weight_decay) before the update.
  /// \var beta2
  /// \brief Adam/AdamW: decay rate of the second moment.
  /// \var eps
  /// \brief Adam/AdamW: term added to the denominator.
};

/// Parameters and their optimizer state, one entry per parameter (undefined where a piece of
/// state does not exist: SGD without momentum, or before the first step).
struct OptimizerState {
  /// The parameters.
  std::vector<at::Tensor> params;
  std::vector<at::Tensor> momentum;        ///< SGD momentum buffers
  std::vector<at::Tensor> exp_avg;         ///< Adam/AdamW first moments
  std::vector<at::Tensor> exp_avg_sq;      ///< Adam/AdamW second moments
  std::vector<at::Tensor> max_exp_avg_sq;  ///< Adam/AdamW with amsgrad
  std::vector<int64_t> steps;              ///< Adam/AdamW step counts

  /// All tensors in a fixed order: params, momentum, exp_avg, exp_avg_sq, max_exp_avg_sq.
  std::vector<at::Tensor> tensors() const;
  /// The inverse of `tensors()`, with the step counts.
  static OptimizerState from_tensors(const std::vector<at::Tensor>& tensors,
                                     std::vector<int64_t> steps);
  /// Detached clones of every tensor.
  OptimizerState clone() const;
  /// Bytes of all defined tensors.
  int64_t bytes() const;
};

/// Differentiable SGD / Adam / AdamW steps with the settings of a user's optimizer.
///
/// ```
/// DifferentiableOptimizer opt(problem.optimizer(), problem.parameters(), problem.name());
/// OptimizerState s = opt.read_state(problem.optimizer(), problem.parameters());
/// OptimizerState next = opt.step(s, grads, opt.learning_rates(problem.optimizer()));
/// ```
class DifferentiableOptimizer {
 public:
  /// Why `optimizer` has no differentiable update rule ("its optimizer (RMSprop) has no ..."),
  /// or "" when it is exactly SGD, Adam or AdamW (a subclass may override `step()`: refused).
  static std::string unsupported(const torch::optim::Optimizer& optimizer);
  /// Reads the settings of each of `params` from `optimizer`. Throws `mlo::Error` naming
  /// `owner` for an optimizer other than exactly SGD, Adam or AdamW.
  DifferentiableOptimizer(const torch::optim::Optimizer& optimizer,
                          const std::vector<at::Tensor>& params, const std::string& owner);

  /// The settings of each parameter, in the order of the constructor's `params`.
  const std::vector<UpdateSettings>& settings() const { return settings_; }
  /// The optimizer's update rule.
  UpdateRule rule() const { return rule_; }

  /// The current learning rate of each parameter (its group's; 0 for one in no group).
  std::vector<double> learning_rates(const torch::optim::Optimizer& optimizer) const;
  /// Detached clones of `params` and of the optimizer's state for them.
  OptimizerState read_state(const torch::optim::Optimizer& optimizer,
                            const std::vector<at::Tensor>& params) const;
  /// One optimizer step from `state` with gradients `grads` and learning rates `lrs`, as
  /// out-of-place operations (differentiable in `state`'s tensors and in `grads`). An undefined
  /// gradient counts as zero, as in `optimizer.step()` for a parameter with a zero gradient.
  OptimizerState step(const OptimizerState& state, const std::vector<at::Tensor>& grads,
                      const std::vector<double>& lrs) const;

 private:
  UpdateRule rule_ = UpdateRule::kSGD;
  std::vector<UpdateSettings> settings_;
};

/// Name of an update rule ("sgd", "adam", "adamw").
const char* to_string(UpdateRule rule);

}  // namespace hypergrad
}  // namespace mlo
