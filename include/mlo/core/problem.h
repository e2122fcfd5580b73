#pragma once
/// \file
/// `mlo::Problem`: one level of a multilevel optimization. A problem owns a module, an optimizer,
/// an optional learning-rate schedule and a batch stream; its single required method is
/// `training_step`, the loss of one batch.

#include <mlo/core/batch.h>
#include <mlo/core/config.h>
#include <mlo/core/handle.h>
#include <mlo/core/metrics.h>
#include <mlo/memory/footprint.h>
#include <mlo/base/error.h>

#include <c10/core/Device.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mlo {

class Engine;
class Hypergradient;
class Level;
class Path;
namespace detail {
class HandleBase;
class LevelRuntime;
class Zero3;
}  // namespace detail
namespace memory {
class LossScaler;
class MemoryMeter;
}  // namespace memory

/// Learning-rate multiplier as a function of the number of optimizer steps taken (LambdaLR):
/// the learning rate of each parameter group is `base_lr * schedule(optimizer_steps)`.
using LrSchedule = std::function<double(int64_t optimizer_steps)>;

/// Why a problem's code is running (`Problem::loss_call()`). The library sets it around each
/// call, so `training_step` can tell its own step from a hypergradient's re-evaluation of the
/// same batch (e.g. to read inputs it froze at its own step instead of recomputing them).
enum class LossCall {
  /// Outside the library's stepping: a validation hook, the user's code, a test (the default).
  kEvaluation,
  /// The problem's own step (the engine stepping its level, a roll-back's redo included): its
  /// forward, and the hooks the step calls (`on_inner_loop_start`, `grad_callback`,
  /// `param_callback`, ...).
  kOwnStep,
  /// A hypergradient method re-evaluating the loss of a batch the problem has stepped on
  /// (`mlo::Level::loss`), at the stepped, perturbed or replayed parameters. `log_metric`
  /// ignores what it records: the step's metrics stay.
  kReevaluation,
};

/// One level of a multilevel optimization problem. Subclass it and define `training_step`:
///
/// ```
/// struct Inner : mlo::Problem {
///   using mlo::Problem::Problem;
///   mlo::Handle<Outer> outer{this, "outer"};   // typed, non-owning; the engine links it
///   torch::Tensor training_step(const mlo::Batch& b) override {
///     return loss(module_as<torch::nn::LinearImpl>()->forward(b.data), b.target, outer->lambda());
///   }
/// };
/// auto inner = std::make_shared<Inner>("inner", mlo::ProblemConfig().unroll_steps(10));
/// inner->module(torch::nn::Linear(20, 1))
///     .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1))
///     .data(batches);
/// ```
///
/// Problems are stepped by an `Engine` (through the `Level` it makes for each); they are
/// non-copyable, and their state goes through `state_dict`/`load_state_dict`.
class Problem {
 public:
  /// `name` identifies the problem in errors and logs; it must be unique within an engine.
  explicit Problem(std::string name, ProblemConfig config = ProblemConfig());
  virtual ~Problem();
  Problem(const Problem&) = delete;
  Problem& operator=(const Problem&) = delete;

  /// The scalar loss of one batch. Typed handles give access to other levels' modules.
  virtual at::Tensor training_step(const Batch& batch) = 0;

  // ---- Hooks: override what you need; the defaults do nothing. -------------------------------

  /// Called at the start of every unroll (before the first of `unroll_steps` steps).
  virtual void on_inner_loop_start() {}
  /// Called with the gradients (one per trainable parameter) before clipping and the step.
  virtual void grad_callback(std::vector<at::Tensor>& grads) { (void)grads; }
  /// Called after every optimizer step (e.g. to clamp parameters).
  virtual void param_callback() {}
  /// Replaces the optimizer step when it returns true (the default returns false).
  virtual bool custom_optimizer_step() { return false; }
  /// The metrics of this problem's console line, in that order (those the step recorded; the
  /// rest reach only the run's metrics files). The default: "loss", "acc", "lr" and, when the
  /// engine meters memory, "mem_peak_mb". A problem adds a few of its own:
  /// `auto names = Problem::headline_metrics(); names.push_back("weight_std"); return names;`.
  virtual std::vector<std::string> headline_metrics() const;

  // ---- Setup (chained). ---------------------------------------------------------------------

  /// Sets the module whose trainable parameters this problem optimizes.
  Problem& module(std::shared_ptr<torch::nn::Module> module);
  /// Sets the module from a LibTorch holder: `module(torch::nn::Linear(20, 1))`.
  template <typename Impl>
  Problem& module(const torch::nn::ModuleHolder<Impl>& holder) {
    return module(std::static_pointer_cast<torch::nn::Module>(holder.ptr()));
  }
  /// Creates the optimizer over the module's trainable parameters:
  /// `optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1).momentum(0.9))`.
  template <typename Optimizer, typename Options>
  Problem& optimizer(const Options& options) {
    MLO_CHECK(module_, "problem '", name_, "': set the module before the optimizer");
    return optimizer(std::make_shared<Optimizer>(parameters(), options));
  }
  /// Uses an optimizer built by the caller, with its parameter groups and state as they are.
  Problem& optimizer(std::shared_ptr<torch::optim::Optimizer> optimizer);
  /// Learning-rate schedule, applied after every optimizer step (not every micro-step).
  Problem& scheduler(LrSchedule schedule);
  /// Where batches come from. A problem without data receives empty batches.
  Problem& data(std::shared_ptr<BatchStream> stream);
  /// A fixed list of batches, cycled in order.
  Problem& data(std::vector<Batch> batches);
  /// A function called for every batch.
  Problem& data(std::function<Batch()> next_batch);

  // ---- Access. ------------------------------------------------------------------------------

  /// The name given at construction.
  const std::string& name() const { return name_; }
  /// The configuration given at construction.
  const ProblemConfig& config() const { return config_; }
  /// Whether a module was set.
  bool has_module() const { return module_ != nullptr; }
  /// The module; throws `mlo::Error` naming the problem when none was set.
  torch::nn::Module& module() const;
  /// The module as its concrete type: `module_as<torch::nn::LinearImpl>()`.
  template <typename Impl>
  std::shared_ptr<Impl> module_as() const {
    auto typed = std::dynamic_pointer_cast<Impl>(module_);
    MLO_CHECK(typed, "problem '", name_, "': the module is not of the requested type");
    return typed;
  }
  /// Whether an optimizer was set.
  bool has_optimizer() const { return optimizer_ != nullptr; }
  /// The optimizer; throws `mlo::Error` naming the problem when none was set.
  torch::optim::Optimizer& optimizer() const;
  /// The module's parameters that require gradients, in registration order; once an engine has
  /// initialized, the tensors it trains (listed then: change `requires_grad` before
  /// `Engine::initialize`), which under zero3 are this rank's shards of them.
  std::vector<at::Tensor> parameters() const;
  /// Copies of the module's trainable parameters with their values, in registration order: the
  /// parameters themselves (detached copies) or, when the level shards them (zero3), gathered
  /// from every rank's shards, one block at a time: a collective every rank must call.
  std::vector<at::Tensor> full_parameters() const;
  /// The batch of the latest step (an empty batch for a problem without data); throws
  /// `mlo::Error` naming the problem before its first step, when it has drawn none (an upper
  /// loss reading a lower problem's batch works once the lower has stepped: the engine steps
  /// lower problems first).
  const Batch& current_batch() const;
  /// The micro-batches of the latest accumulation window (the `gradient_accumulation` batches
  /// that the latest optimizer step averaged; one batch without accumulation), which
  /// hypergradients re-evaluate the loss on (`Level::loss`). A subclass's step state
  /// (`save_step_state`) is usually about them.
  const std::vector<Batch>& current_batches() const { return window_; }
  /// Why this problem's code is running now: its own step, a hypergradient's re-evaluation of
  /// its loss, or anything else (an evaluation). Read it in `training_step`:
  ///
  /// ```
  /// if (loss_call() == mlo::LossCall::kOwnStep) frozen_ = inputs.detach().clone();
  /// ```
  LossCall loss_call() const { return call_; }
  /// The module's name for `parameter` ("conv1.weight"), or "(unnamed)" if it is not one of
  /// the module's parameters; for error messages.
  std::string parameter_name(const at::Tensor& parameter) const;
  /// Bytes of this level's parameters, gradients and optimizer state (`memory::footprint`).
  memory::Footprint footprint() const;

  /// The level's loss scaler, or null when loss scaling is off (made at engine initialization).
  const memory::LossScaler* loss_scaler() const { return scaler_.get(); }

  /// Local steps taken (each fetches one batch).
  int64_t step_count() const { return step_count_; }
  /// Optimizer steps taken.
  int64_t optimizer_steps() const { return optimizer_steps_; }
  /// Loss of the latest step.
  double last_loss() const { return last_loss_; }
  /// Metrics of the latest step: "loss", "lr" (the first parameter group's learning rate after
  /// the step) plus whatever `log_metric` recorded.
  const Metrics& metrics() const { return metrics_; }
  /// Records a metric of this step (call from `training_step` or a hook). `name` must satisfy
  /// `is_metric_name` (no spaces: build names from free text with `metric_segment`). Ignored
  /// during a re-evaluation (`LossCall::kReevaluation`): a hypergradient re-running the loss at
  /// other parameters leaves the metrics of the step that was taken.
  void log_metric(const std::string& name, double value);

  /// Training mode: steps count, and the module is in train mode.
  void train(bool on = true);
  /// Evaluation mode: `train(false)`.
  void eval() { train(false); }
  /// Whether the problem is in training mode (true from construction until `train(false)`).
  bool is_training() const { return training_; }
  /// Where the module's parameters live (the first one's device; CPU without a module or
  /// parameters), fixed at engine initialization. Every batch the problem draws is moved there
  /// (`Batch::to`) before `training_step` sees it.
  c10::Device device() const;

  /// Writes module, optimizer, counters (and the schedule position) to `archive`.
  void state_dict(torch::serialize::OutputArchive& archive) const;
  /// Restores what `state_dict` wrote.
  void load_state_dict(torch::serialize::InputArchive& archive);

 protected:
  /// Saves a subclass's own step state: whatever its later steps read besides the module, the
  /// optimizer, the counters and its step values (`step_value`, which the library saves), so
  /// that a resumed run continues bit for bit. Called by `state_dict`.
  virtual void save_step_state(torch::serialize::OutputArchive& archive) const { (void)archive; }
  /// Restores what `save_step_state` wrote. Called by `load_state_dict` after the problem's own
  /// state: `current_batches()` already holds the saved accumulation window.
  virtual void load_step_state(torch::serialize::InputArchive& archive) { (void)archive; }
  /// Declares the structure of this problem's loss in a re-evaluation (`LossCall::kReevaluation`)
  /// that a method differentiates with respect to the upper problems' parameters only
  /// (`Reevaluation::upper_gradients_only`). true promises that the loss is
  /// `sum_i c_i * l_i`, where the terms l_i depend on this problem's parameters and the
  /// coefficients c_i do not (they come from the upper problems' parameters and from inputs
  /// fixed at the problem's own step; a weighted mean or a normalized weighted sum qualifies).
  /// A forward-mode method (`darts.mode: jvp`, which reads it through `Level`) then
  /// differentiates the terms in forward mode only and the coefficients in reverse mode only.
  /// The default, false, promises nothing.
  virtual bool separable_reevaluation() const { return false; }
  /// A value fixed at this problem's own step on `batch` (the batch `training_step` was given):
  /// in the own step (`LossCall::kOwnStep`), a detached copy of `value` is kept under `key` for
  /// that batch and returned; when the loss of that batch is evaluated again (a hypergradient's
  /// re-evaluation at other parameters, an evaluation), the kept copy is returned and `value` is
  /// not used. For a batch no own step kept it, `stop_gradient(value)`. E.g. the
  /// Meta-Weight-Net's inputs, the per-sample losses of the classifier's step:
  ///
  /// ```
  /// const at::Tensor inputs = step_value(batch, "losses", losses);   // losses at the step's w
  /// return (weight_net->forward(inputs) * losses).mean();
  /// ```
  ///
  /// Kept for the latest `gradient_accumulation x unroll_steps` own steps (the batches a method
  /// re-evaluates or replays), saved with the problem's state and restored on resume for the
  /// latest accumulation window. A kept copy is matched to its batch by the batch's data tensor
  /// (the same tensor object, not equal values) and by `value`'s shape.
  at::Tensor step_value(const Batch& batch, const std::string& key, const at::Tensor& value);
  /// Forgets the values kept under `key` (e.g. when the rule that made them changes): later
  /// evaluations of those batches see `stop_gradient(value)` until an own step keeps new ones.
  void forget_step_values(const std::string& key);

 private:
  friend class Engine;
  friend class Level;
  friend class detail::HandleBase;
  friend class detail::LevelRuntime;
  void apply_schedule();
  // Roll-back: the parameters, buffers, optimizer state and optimizer-step count at an unroll's
  // start, and back to them.
  void cache_state();
  void restore_state();

  std::string name_;
  ProblemConfig config_;
  std::vector<detail::HandleBase*> handles_;  // members of the subclass; linked by the engine
  // Other problems' handles linked to this one, unlinked when this problem is destroyed.
  std::vector<detail::HandleBase*> linked_from_;
  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<torch::optim::Optimizer> optimizer_;
  LrSchedule schedule_;
  std::vector<double> base_lrs_;
  std::shared_ptr<BatchStream> stream_;
  Batch current_batch_;
  std::vector<Batch> window_;  // the micro-batches of the current accumulation window

  int64_t step_count_ = 0;
  int64_t optimizer_steps_ = 0;
  double last_loss_ = 0.0;
  Metrics metrics_;
  LossCall call_ = LossCall::kEvaluation;  // see loss_call(); set around each call
  bool training_ = true;

  // The step state an engine's runtime of this problem keeps here, so that it outlives the
  // engine and goes into the problem's saved state.
  std::shared_ptr<std::stringstream> cached_state_;  // roll-back snapshot (saved with the state)
  // Set when a hypergradient path met a non-finite incoming vector during the current
  // accumulation window; the optimizer step then skips and the loss scaler backs off.
  bool nonfinite_window_ = false;
  std::unique_ptr<memory::LossScaler> scaler_;
  // zero3 on an nn::Chain: the parameter shards (src/dist/zero3.h), which hold the values for as
  // long as the problem lives.
  std::unique_ptr<detail::Zero3> zero3_;
  // The runtime of the engine that runs this problem (null before one initializes; not owned).
  detail::LevelRuntime* runtime_ = nullptr;
  // The step values (`step_value`), each for the batch (its data tensor) of the own step that
  // kept it.
  // NOTE: a weak reference to the data tensor: it keeps the tensor's address from being reused
  // by a later batch without keeping its storage alive.
  struct StepValue {
    using Ref = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
    Ref batch;
    std::string key;
    at::Tensor value;
  };
  std::vector<StepValue> step_values_;
  void save_step_values(torch::serialize::OutputArchive& archive) const;
  void load_step_values(torch::serialize::InputArchive& archive);
};

/// The squared Euclidean norm of a vector over `problem`'s trainable parameters, one tensor per
/// tensor of `problem.parameters()` (an undefined tensor counts as zeros), summed in double.
/// Under zero3, where each rank holds its shards, the sum over the ranks: a collective every
/// rank of the level calls.
double squared_norm(const Problem& problem, const std::vector<at::Tensor>& vector);

}  // namespace mlo
