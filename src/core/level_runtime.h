#pragma once
// Internal to core (not installed): the engine's runtime of one problem (mlo::Level). Made at
// engine initialization with what the engine resolves for the problem (device, loss scaler,
// memory meter, trainable tensors, the buffers only its own step may change, its gradient
// synchronization), it takes the problem's steps: the loss, its direct gradient plus one
// hypergradient per path, accumulation, and the optimizer sequence.

#include "dist/gradient_sync.h"

#include <mlo/core/level.h>
#include <mlo/core/path.h>
#include <mlo/core/problem.h>

#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace mlo {
namespace memory {
class MemoryMeter;
}  // namespace memory

namespace detail {

// What the engine tells a level about one step (LevelRuntime::step). The engine owns the
// schedule: it decides when a problem steps, and hands it the paths its gradient follows.
struct StepContext {
  // The hypergradient paths `[this, P1, ..., L, this]` (engine-owned): the step adds each
  // path's result to its direct gradient. Null or empty for a problem with no `u2l` edge.
  const std::vector<Path>* paths = nullptr;
  // The first step of an unroll: `on_inner_loop_start()` runs first, and with `roll_back`
  // the state is snapshotted.
  bool unroll_start = false;
  // Roll-back: restore the snapshot taken at the unroll's start and take one step again on the
  // latest batch (not counted as a new local step).
  bool redo = false;
  // The method that carries this problem's vectors to its parents (null when it is no hop of
  // a path): it hears about unroll starts and optimizer steps (`Hypergradient` hooks).
  Hypergradient* method = nullptr;
  // Set on a problem's first step of a run: the problems whose parameters the dependency graph
  // says enter its loss (`u2l` edges from above: true; `l2u` edges from below: false). The step
  // checks, on the graph of its loss, that each is reached (a swapped `link` is caught here).
  const std::vector<std::pair<const Problem*, bool>>* inputs = nullptr;
  // The engine's global step this step belongs to (for messages).
  int64_t global_step = 0;
};

// One problem as an engine runs it (see the file comment).
class LevelRuntime final : public Level {
 public:
  // Resolves `problem`'s settings for an engine: `meter` (null: not metered), `peers` (the
  // engine's other problems, whose buffers this problem's steps leave as they were), the
  // engine's process group (null: none) and strategy. Attaches itself to the problem until it
  // is destroyed.
  LevelRuntime(Problem& problem, memory::MemoryMeter* meter, const std::vector<Problem*>& peers,
               std::shared_ptr<dist::ProcessGroup> group, dist::Strategy strategy);
  ~LevelRuntime() override;

  // ---- mlo::Level ----
  Problem& problem() const override { return problem_; }
  const std::vector<at::Tensor>& parameters() const override { return trainable_; }
  const std::vector<Batch>& batches() const override { return problem_.window_; }
  at::Tensor loss() override;
  at::Tensor loss(std::size_t micro) override;
  at::Tensor loss(const Batch& batch) override;
  void mean(const std::vector<at::Tensor>& tensors) const override { sync_->mean(tensors); }
  void mean_gradient(const std::vector<at::Tensor>& grads, const Level& of) const override;
  double sum_over_shards(double local) const override { return sync_->sum_over_shards(local); }
  bool shards_parameters() const override { return sync_->shards_parameters(); }
  const memory::LossScaler* loss_scaler() const override { return problem_.scaler_.get(); }
  c10::Device device() const override { return device_; }
  const std::vector<Level*>& parents() const override { return parents_; }

  // ---- The engine's. ----
  // Sets `parents()` (the engine, when it builds the paths; tests that step levels by hand).
  void set_parents(std::vector<Level*> parents) { parents_ = std::move(parents); }
  // One local step (see Problem's contract of a step: StepContext).
  void step(const StepContext& context);
  // The group the level averages over (null: none).
  dist::ProcessGroup* group() const { return sync_->group(); }
  // Where zero3's time went, or "".
  std::string sharding_summary() const { return sync_->summary(problem_.name()); }
  // The runtime of a problem that an engine has resolved (null before).
  static LevelRuntime* of(const Problem& problem) { return problem.runtime_; }
  // While a method that differentiates this level's re-evaluations with respect to `upper`'s
  // parameters only runs (`Reevaluation::upper_gradients_only`; null: none), the level's other
  // parameters take no gradient in them (Path::propagate sets it around such a hop).
  void set_upper_gradients_only(const Level* upper) { upper_only_ = upper; }
  const Level* upper_gradients_only() const { return upper_only_; }

 private:
  // `training_step(batch)` under the level's precision, with `loss_call()` set to `call`.
  at::Tensor evaluate(const Batch& batch, LossCall call);
  // The step without its bookkeeping; `batch` re-uses a given batch (roll-back).
  void descend(const StepContext& context, const Batch* batch);
  // Gradients of `loss` for this problem's parameters: direct plus every hypergradient path.
  std::vector<at::Tensor> gradients(const at::Tensor& loss, const std::vector<Path>& paths);
  void accumulate(std::vector<at::Tensor> grads);
  void optimizer_step();
  // The first step's check of the graph's edges into this problem (StepContext::inputs) and of
  // its own parameters, on the graph of its loss.
  void check_inputs(const at::Tensor& loss, bool has_paths,
                    const std::vector<std::pair<const Problem*, bool>>& inputs) const;
  // The first hypergradient's check of a path whose result is exactly zero: the gradient of
  // each hop's lower loss with respect to its own parameters must depend on the hop's upper
  // parameters (a lower pair linked the wrong way round cannot); throws naming both problems.
  void check_zero_path(const Path& path);
  // Whether the gradient of this level's loss (on its latest batch, as an evaluation) with
  // respect to its own parameters depends on `upper`'s parameters; nullopt when that cannot be
  // told (the gradient has no graph).
  std::optional<bool> gradient_depends_on(const Level& upper);
  // Records "lr" and, when metered, "mem_peak_mb" (the step's peak) at the end of a step.
  void record_step_metrics(int64_t peak_bytes);

  Problem& problem_;
  memory::MemoryMeter* meter_ = nullptr;  // owned by the engine when it tracks memory
  c10::Device device_{c10::kCPU};         // where the module lives (batches, autocast)
  // The trainable tensors, listed once (the step's hot path would otherwise walk the module
  // tree several times per step).
  std::vector<at::Tensor> trainable_;
  // Buffers (batch-norm running statistics, ...) that only their own problem's training step
  // may change: this problem's, and those of every other problem of the engine.
  std::vector<at::Tensor> own_buffers_;
  std::vector<at::Tensor> peer_buffers_;
  std::unique_ptr<GradientSync> sync_;
  Hypergradient* method_ = nullptr;  // of the current step (StepContext::method)
  int64_t global_step_ = 0;          // of the current step (StepContext::global_step)
  const Level* upper_only_ = nullptr;  // set_upper_gradients_only
  std::vector<Level*> parents_;      // the hops' `prev` levels (set_parents)
  // This process's steps with a hypergradient, and how many of them, from the first on, were
  // exactly zero (a warning names the problem when they stay so).
  int64_t hypergradients_ = 0;
  int64_t zero_hypergradients_ = 0;
};

// The runtime of a problem that an engine has resolved (null before).
inline LevelRuntime* runtime_of(const Problem& problem) { return LevelRuntime::of(problem); }

}  // namespace detail
}  // namespace mlo
