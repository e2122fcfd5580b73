#pragma once
/// \file
/// `mlo::hypergrad::ForwardUnrolled`: forward-mode differentiation through the inner optimizer
/// steps of an unroll (`method: forward`). It gives the hypergradient `unrolled` gives, carrying
/// the tangents d s_t / d lambda along the steps as they are taken instead of replaying them
/// backwards: its memory does not grow with the horizon K, and a hypergradient is available
/// after any step.
///
/// Paper: L. Franceschi, M. Donini, P. Frasconi, M. Pontil, "Forward and Reverse Gradient-Based
/// Hyperparameter Optimization", ICML 2017 (arXiv:1703.01785), Sec. 2.2 (forward mode) and
/// Sec. 3 (real-time hyperparameter optimization).

#include <mlo/core/method.h>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace mlo {

/// Options of `forward`.
struct ForwardOptions : MethodOptionsFor<ForwardOptions> {
  /// The name configs select it by.
  static constexpr const char* kName = "forward";
  /// The most upper-level parameters (scalars) served; more is refused at engine start, naming
  /// the count. Each costs one forward-over-reverse pass of the lower loss per inner step and
  /// one copy of the lower problem's parameters and optimizer state.
  TORCH_ARG(int64_t, max_hyperparameters) = 100;
  /// false: the tangents restart from zero at every unroll start (the hypergradient of the
  /// unroll, as `unrolled` gives it). true: they are carried from one unroll to the next, so the
  /// hypergradient covers every step since the run started, with the upper parameters of each
  /// step treated as one (real-time hyperparameter optimization; use it with unroll_steps 1 for
  /// an upper step after every lower step). Where the weights at an unroll start are not those
  /// the last step left (a lower problem that restarts them), the tangents restart there, with
  /// one warning.
  TORCH_ARG(bool, carry) = false;

 public:  // (TORCH_ARG leaves the struct in a private section)
  /// The keys of the `forward:` section of a problem.
  void visit(Fields& fields) override;
  std::unique_ptr<Hypergradient> make() const override;
};

namespace hypergrad {

class DifferentiableOptimizer;

/// The hypergradient of the unrolled objective, in forward mode: with s_t the lower problem's
/// state (parameters and optimizer state) after its t-th optimizer step of the unroll and
/// s_t = Phi_t(s_{t-1}, lambda) that step (the user's SGD, Adam or AdamW, written as a
/// differentiable update, `DifferentiableOptimizer`), the tangents
///
///   Z_t = (d Phi_t / d s) Z_{t-1} + d Phi_t / d lambda,   Z_0 = 0,
///
/// one per scalar of lambda, are updated at every optimizer step (`before_optimizer_step`), and
/// `apply(v)` returns Z_K^T v, the same quantity as `unrolled` (exact up to rounding) for any K
/// since the unroll started. Each step takes, per scalar j of lambda, one forward-over-reverse
/// pass of the lower loss over the step's window (the tangent of the gradient along
/// (Z_{t-1}, e_j)) and one optimizer update in forward mode, at the state and with the
/// gradients the real step uses.
///
/// Memory: the tangents, m copies of the lower state for m scalars of lambda, whatever the
/// horizon; no trajectory is kept. Time: m forward-over-reverse passes per inner step, so
/// it suits an upper level with few parameters (penalty weights, loss coefficients, a few
/// scalars the lower loss reads); `unrolled` suits many. The tangents are part of the saved state: a run resumed
/// in the middle of an unroll continues it exactly.
///
/// Needs a forward-mode formula for every backward operator the lower loss reaches (LibTorch
/// lacks some: `nll_loss_backward`, `_log_softmax_backward_data`, `native_batch_norm_backward`,
/// which mlo's models and `Chain`s avoid, see `forward_mode.h`); the first step that meets one
/// throws `ForwardModeUnsupported` naming it. Refuses what `unrolled` refuses (an optimizer
/// without a differentiable update, gradient clipping, a second parent, a middle level, data
/// parallelism), more than `max_hyperparameters` scalars of lambda, and
/// `carry` with roll-back. Not differentiated: `grad_callback`, `param_callback` and a custom
/// optimizer step.
///
/// ```
/// auto lower = std::make_shared<Inner>("inner", mlo::ProblemConfig().unroll_steps(100).method(
///     mlo::ForwardOptions()));
/// ```
class ForwardUnrolled : public Hypergradient {
 public:
  /// Validates `options` (throws `mlo::Error` naming the bad value).
  explicit ForwardUnrolled(ForwardOptions options);
  ~ForwardUnrolled() override;

  /// Jacobian-vector products of the lower loss's gradient: true.
  bool second_order() const override { return true; }
  /// Carries tangents through the unroll from its start: true.
  bool differentiates_unroll() const override { return true; }
  /// Z^T v over `prev`'s trainable parameters (`prev` must be `curr`'s parent); `v` over
  /// `curr`'s.
  std::vector<at::Tensor> apply(const std::vector<at::Tensor>& v, Level& curr,
                                Level& prev) override;
  /// Zeroes the tangents (unless `carry`); refuses more than `max_hyperparameters` scalars.
  void on_unroll_start(Level& curr) override;
  /// Carries the tangents through the step about to be taken.
  void before_optimizer_step(Level& curr) override;
  /// Refuses what the class comment lists.
  void check(const MethodContext& context) const override;
  /// Writes the tangents.
  void save(torch::serialize::OutputArchive& archive) const override;
  /// Restores the tangents; refuses a state saved for another lower state's layout when the
  /// next step reads it.
  void load(torch::serialize::InputArchive& archive) override;

  /// Inner steps carried since the tangents last restarted.
  int64_t steps() const { return steps_; }
  /// Scalars of lambda the tangents are kept for (0 before the first unroll).
  int64_t hyperparameters() const { return hyperparameters_; }
  /// Bytes the tangents take.
  int64_t tangent_bytes() const;

  /// The options it was built with.
  const ForwardOptions& options() const { return options_; }

 private:
  // Throws mlo::Error naming `curr` when the tangents do not fit its layout (`matches` false).
  void check_layout(const Level& curr, bool matches, int64_t upper) const;

  ForwardOptions options_;
  // Per slot of `OptimizerState::tensors()` (parameters, momentum, moments): the tangents of all
  // scalars of lambda stacked on a first dimension of size m, or undefined (no such state yet,
  // or none depends on lambda).
  std::vector<at::Tensor> tangents_;
  std::unique_ptr<DifferentiableOptimizer> optimizer_;
  // carry: the weights the latest step left (the next unroll start compares them).
  std::vector<at::Tensor> expected_;
  bool warned_restart_ = false;
  int64_t hyperparameters_ = 0;
  int64_t steps_ = 0;
  bool started_ = false;
};

}  // namespace hypergrad
}  // namespace mlo
