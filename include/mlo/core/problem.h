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
class Path;
namespace detail {
class DataParallel;
class HandleBase;
class Zero3;
}  // namespace detail
namespace dist {
class ProcessGroup;
}  // namespace dist
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
  /// The problem's own step (`Problem::step`, a roll-back's redo included): its forward, and the
  /// hooks the step calls (`on_inner_loop_start`, `grad_callback`, `param_callback`, ...).
  kOwnStep,
  /// A hypergradient method re-evaluating the loss of a batch the problem has stepped on
  /// (`Problem::current_loss`, `Problem::loss`), at the stepped, perturbed or replayed
  /// parameters. `log_metric` ignores what it records: the step's metrics stay.
  kReevaluation,
};

/// What the engine tells a problem about one step (`Problem::step`). The engine owns the
/// schedule: it decides when a problem steps, and hands it the paths its gradient follows.
struct StepContext {
  /// The hypergradient paths `[this, P1, ..., L, this]` (engine-owned): the step adds each
  /// path's result to its direct gradient. Null or empty for a problem with no `u2l` edge.
  const std::vector<Path>* paths = nullptr;
  /// The first step of an unroll: `on_inner_loop_start()` runs first, and with `roll_back`
  /// the state is snapshotted.
  bool unroll_start = false;
  /// Roll-back: restore the snapshot taken at the unroll's start and take one step again on the
  /// latest batch (not counted as a new local step).
  bool redo = false;
  /// The method that carries this problem's vectors to its parents (null when it is no hop of
  /// a path): it hears about unroll starts and optimizer steps (`Hypergradient` hooks).
  Hypergradient* method = nullptr;
  /// Set on a problem's first step of a run: the problems whose parameters the dependency graph
  /// says enter its loss (`u2l` edges from above: true; `l2u` edges from below: false). The step
  /// checks, on the graph of its loss, that each is reached (a swapped `link` is caught here).
  const std::vector<std::pair<const Problem*, bool>>* inputs = nullptr;
};

/// One level of a multilevel optimization problem. Subclass it and define `training_step`:
///
/// ```
/// struct Inner : mlo::Problem {
///   using mlo::Problem::Problem;
///   Outer* outer = nullptr;   // typed, non-owning handle to the level above
///   torch::Tensor training_step(const mlo::Batch& b) override {
///     return loss(module_as<torch::nn::LinearImpl>()->forward(b.data), b.target, outer->lambda());
///   }
/// };
/// auto inner = std::make_shared<Inner>("inner", mlo::ProblemConfig().unroll_steps(10));
/// inner->module(torch::nn::Linear(20, 1))
///     .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1))
///     .data(batches);
/// inner->outer = outer.get();   // the engine owns both problems; handles do not own
/// ```
///
/// Problems are stepped by an `Engine`; they are non-copyable, and their state goes through
/// `state_dict`/`load_state_dict`.
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
  /// Saves a subclass's own step state: whatever its later steps or re-evaluations read besides
  /// the module, the optimizer and the counters (e.g. inputs frozen at its latest own step), so
  /// that a resumed run continues bit for bit. Called by `state_dict`.
  virtual void save_step_state(torch::serialize::OutputArchive& archive) const { (void)archive; }
  /// Restores what `save_step_state` wrote. Called by `load_state_dict` after the problem's own
  /// state: `current_batches()` already holds the saved accumulation window.
  virtual void load_step_state(torch::serialize::InputArchive& archive) { (void)archive; }
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
  /// The module's parameters that require gradients, in registration order. (The engine lists
  /// them once at initialization; change `requires_grad` before `Engine::initialize`.)
  std::vector<at::Tensor> parameters() const;
  /// Copies of the module's trainable parameters with their values, in registration order: the
  /// parameters themselves (detached copies) or, when the level shards them (zero3), gathered
  /// from every rank's shards, one block at a time: a collective every rank must call.
  std::vector<at::Tensor> full_parameters() const;
  /// The batch of the latest step.
  const Batch& current_batch() const { return current_batch_; }
  /// The micro-batches of the latest accumulation window (the `gradient_accumulation` batches
  /// that the latest optimizer step averaged; one batch without accumulation). Hypergradients
  /// re-evaluate the loss on all of them, so that G micro-batches act as one large batch.
  const std::vector<Batch>& current_batches() const { return window_; }
  /// The loss over the latest accumulation window, under the level's precision: the mean of
  /// `training_step(b)` over `current_batches()` (what hypergradients differentiate). A
  /// re-evaluation: `training_step` runs under `LossCall::kReevaluation`.
  /// NOTE: the autograd graph covers every micro-batch of the window at once; methods that can
  /// take one micro-batch at a time use `current_loss(i)`.
  at::Tensor current_loss();
  /// The share of micro-batch `micro` in `current_loss()`: `training_step(b_micro) / n` for a
  /// window of n batches. Summing the gradients of all shares gives the gradient of the mean.
  at::Tensor current_loss(size_t micro);
  /// `training_step(batch)` under the level's precision (autocast for bf16/fp16), as a
  /// hypergradient method re-evaluates it (`LossCall::kReevaluation`; e.g. `unrolled` replaying
  /// stored batches). Evaluation code calls `training_step` itself, or the module.
  at::Tensor loss(const Batch& batch);
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
  /// The level's loss scaler, or null when loss scaling is off.
  const memory::LossScaler* loss_scaler() const { return scaler_.get(); }

  /// The group this level is data parallel over (its batches are shards of the global batch),
  /// or null: one process, or the level opted out (`ProblemConfig::data_parallel(false)`).
  dist::ProcessGroup* process_group() const { return group_; }
  /// Under data parallelism, replaces each tensor by its mean over the ranks (one bucketed
  /// collective); otherwise does nothing. A quantity computed from this level's loss on the
  /// local shard becomes the global batch's: hypergradient methods call it on their products.
  void all_reduce_mean(const std::vector<at::Tensor>& tensors) const;
  /// Whether this level's parameters are sharded over the ranks (strategy zero3 on a data-parallel
  /// level whose module is an `nn::Chain`). `parameters()` are then this rank's flat shards
  /// (docs/distributed.md), a gradient for them is already the mean over the ranks, and a vector
  /// over them is this rank's slice of the global vector.
  bool shards_parameters() const { return zero3_ != nullptr; }
  /// Makes `grads`, the gradient of this problem's loss on its local batch with respect to
  /// `of.parameters()`, the global batch's: the mean over the ranks (`all_reduce_mean`), unless
  /// `of` shards its parameters, whose gradients are averaged as they are computed.
  void mean_gradient(const std::vector<at::Tensor>& grads, const Problem& of) const;
  /// The sum over the ranks of `local`, a sum over this level's parameters (a dot product of two
  /// vectors over `parameters()`), when the level shards its parameters; `local` otherwise.
  double sum_over_shards(double local) const;
  /// Under zero3: a line with this rank's shard bytes and the count and time of the level's
  /// all-gathers and reduce-scatters so far (where zero3's extra time goes; wall time, so not a
  /// metric: metrics replay bit for bit on resume). Empty otherwise.
  std::string sharding_summary() const;

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
  /// parameters), fixed at engine initialization (`resolve`). Every batch the problem draws is
  /// moved there (`Batch::to`) before `training_step` sees it.
  c10::Device device() const;

  // ---- Stepping (called by the Engine). ---------------------------------------------------

  /// Resolves per-level settings once, at engine initialization: device, loss scaler, memory
  /// meter (null: not metered), the trainable parameters, the buffers that only this
  /// problem's own step may change (its own; those of its `peers`, restored after each step),
  /// and the engine's process group (null: none) with the strategy: a level that is data
  /// parallel averages over it, one that opted out keeps its replicas equal to rank 0's. Under
  /// zero3 the level's parameter shards keep the group alive (their model gathers through it
  /// for as long as the problem lives); a second resolve must then give the same group.
  void resolve(memory::MemoryMeter* meter, const std::vector<Problem*>& peers,
               std::shared_ptr<dist::ProcessGroup> group = nullptr,
               dist::Strategy strategy = dist::Strategy::kDefault);
  /// One local step (a micro-step under gradient accumulation): fetch a batch, compute the loss
  /// (under the level's precision), its direct gradient plus one hypergradient per path of
  /// `context`, accumulate, and on an accumulation boundary run the optimizer sequence (unscale,
  /// skip on inf/nan, grad_callback, clipping, optimizer step or custom_optimizer_step, schedule,
  /// param_callback). Counts the local step when in training mode.
  void step(const StepContext& context);

  /// Writes module, optimizer, counters (and the schedule position) to `archive`.
  void state_dict(torch::serialize::OutputArchive& archive) const;
  /// Restores what `state_dict` wrote.
  void load_state_dict(torch::serialize::InputArchive& archive);

 private:
  friend class Engine;
  friend class detail::HandleBase;
  // `training_step(batch)` under the level's precision, with `loss_call()` set to `call`.
  at::Tensor evaluate(const Batch& batch, LossCall call);
  // The step without its bookkeeping; `batch` re-uses a given batch (roll-back); `inputs` as in
  // StepContext.
  void descend(const std::vector<Path>* paths, const Batch* batch = nullptr,
               const std::vector<std::pair<const Problem*, bool>>* inputs = nullptr);
  // The first step's check of the graph's edges into this problem (StepContext::inputs) and of
  // its own parameters, on the graph of its loss.
  void check_inputs(const at::Tensor& loss, bool has_paths,
                    const std::vector<std::pair<const Problem*, bool>>& inputs) const;
  // Gradients of `loss` for this problem's parameters: direct plus every hypergradient path.
  std::vector<at::Tensor> gradients(const at::Tensor& loss,
                                    const std::vector<Path>& paths);
  void accumulate(std::vector<at::Tensor> grads);
  // Whether `v`, a vector over `of`'s parameters, is finite on every rank (under zero3 each rank
  // holds a slice of it).
  bool finite_everywhere(const std::vector<at::Tensor>& v, const Problem& of) const;
  // Records "lr" and, when metered, "mem_peak_mb" (the step's peak) at the end of a step.
  void record_step_metrics(int64_t peak_bytes);
  void optimizer_step();
  void apply_schedule();
  void cache_state();
  void restore_state();

  std::string name_;
  ProblemConfig config_;
  std::vector<detail::HandleBase*> handles_;  // members of the subclass; linked by the engine
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
  LossCall call_ = LossCall::kEvaluation;  // see loss_call(); set by step() and evaluate()
  bool training_ = true;

  // Set at engine initialization (resolve).
  bool resolved_ = false;
  std::shared_ptr<std::stringstream> cached_state_;  // roll-back snapshot (saved with the state)
  // Set when a hypergradient path met a non-finite incoming vector during the current
  // accumulation window; the optimizer step then skips and the loss scaler backs off.
  bool nonfinite_window_ = false;
  // Buffers (batch-norm running statistics, ...) that only their own problem's training step may
  // change: this problem's, and those of every other problem in the engine. Listed at engine
  // initialization; see descend().
  std::vector<at::Tensor> own_buffers_;
  std::vector<at::Tensor> peer_buffers_;
  c10::Device device_{c10::kCPU};  // where the module lives (batches, autocast)
  std::unique_ptr<memory::LossScaler> scaler_;
  memory::MemoryMeter* meter_ = nullptr;  // owned by the engine when it tracks memory
  Hypergradient* method_ = nullptr;  // of the current step (StepContext::method)
  // Data parallelism (resolve): the group (null: none), and what the strategy does with this
  // level's gradients and optimizer state (src/core/data_parallel.h).
  dist::ProcessGroup* group_ = nullptr;
  std::unique_ptr<detail::DataParallel> parallel_;
  // zero3 on an nn::Chain: the parameter shards (src/core/zero3.h); then `parallel_` serves only
  // the checks, clipping and buffers.
  std::unique_ptr<detail::Zero3> zero3_;
  // A level that opted out of data parallelism under a distributed engine: every rank computes
  // it on the same data, and its parameters follow rank 0's after each step (kernels that are
  // not deterministic, e.g. atomic adds on a GPU, would otherwise let the replicas drift).
  dist::ProcessGroup* replicas_ = nullptr;
  // The trainable parameters, listed once at engine initialization (the step's hot path would
  // otherwise walk the module tree several times per step).
  std::vector<at::Tensor> trainable_;
};

}  // namespace mlo
