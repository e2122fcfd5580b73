#pragma once
/// \file
/// `mlo::Callback`: the engine's one seam for code that reacts to training. The engine steps
/// problems and computes hypergradients; whatever watches it (logs, metrics files, checkpoints,
/// a progress bar, a stop rule of the program's) is a callback added with
/// `Engine::add_callback`. A run folder (`mlo::Run`, io/run.h) is such a set of callbacks.
///
/// Order and ranks. `Engine::run` calls every callback in the order they were added:
///   1. `on_start`, once, after initialization (a resumed run's state is loaded by then);
///   2. per global step, after the step and after its validation (if one was due):
///      `on_validation` (with that validation's metrics), then `on_step_end`;
///   3. `on_end`, once, when the loop ends: at `train_iters`, on early stopping, or when a
///      callback asked to stop.
/// `on_start`, `on_step_end` and `on_end` run on every rank of a distributed run;
/// `on_validation` on the ranks that validate (rank 0; every rank when a level shards its
/// parameters under zero3). An exception from a callback ends `run` (`on_end` is not called).
///
/// ```
/// struct FinishOnLoss : mlo::Callback {     // training is done once the loss is below 0.1
///   std::shared_ptr<mlo::Problem> classifier;
///   mlo::StepDecision on_step_end(mlo::Engine&, const mlo::StepEnd&) override {
///     return classifier->last_loss() < 0.1 ? mlo::StepDecision::kFinish
///                                           : mlo::StepDecision::kContinue;
///   }
/// };
/// engine.add_callback(std::make_shared<FinishOnLoss>(...));
/// ```

#include <mlo/core/metrics.h>

#include <cstdint>
#include <string>
#include <vector>

namespace torch {
namespace serialize {
class InputArchive;
class OutputArchive;
}  // namespace serialize
}  // namespace torch

namespace mlo {

class Engine;

/// What the engine says of the global step it just took.
struct StepEnd {
  /// The global step just taken (1 for the first).
  int64_t step = 0;
  /// Whether a state saved now resumes exactly. False only for strategy `distributed` on several
  /// ranks while a data-parallel level is inside an accumulation window (rank 0 saves for every
  /// rank, and its partial gradients and micro-batches are its own shard's): a saver then waits
  /// for the window's end.
  bool resumable = true;
};

/// What a callback asks of the engine after a global step (`Callback::on_step_end`).
enum class StepDecision {
  kContinue,  ///< go on
  /// End training here, finished, as early stopping does (`Engine::stopped_early`): a run then
  /// evaluates and writes its results, and resuming it has nothing left to do.
  kFinish,
  /// Stop here to go on later, as Ctrl-C does: a run saves its state and `--resume` continues
  /// from this step. (When one callback asks to pause and another to finish, the engine pauses.)
  kPause,
};

/// One validation (`Engine::validation`'s hook, run every `valid_step` global steps).
struct Validation {
  /// The global step it follows.
  int64_t step = 0;
  /// The hook's metrics, with the memory meter's (`Engine::memory_metrics`) merged in.
  Metrics metrics;
  /// The names the engine's log line shows, in order (the hook's headline, then the
  /// early-stopping metric): what a console of a callback's own should show too.
  std::vector<std::string> headline;
};

/// Code that reacts to the engine's progress (see the file comment). Every method has an empty
/// default; override what you need.
class Callback {
 public:
  virtual ~Callback() = default;

  /// Once, when `Engine::run` starts, after initialization, on every rank.
  virtual void on_start(Engine& engine) { (void)engine; }
  /// After every global step (and after its validation), on every rank: whether to go on,
  /// finish or pause (`StepDecision`). Under a distributed strategy every rank then stops at the
  /// same step. Every callback is called even when an earlier one asked to stop.
  virtual StepDecision on_step_end(Engine& engine, const StepEnd& step) {
    (void)engine;
    (void)step;
    return StepDecision::kContinue;
  }
  /// After each validation, on the ranks that validate.
  virtual void on_validation(Engine& engine, const Validation& validation) {
    (void)engine;
    (void)validation;
  }
  /// Once, when the loop of `Engine::run` ends; `last` is the last global step taken (step 0
  /// and resumable when no step was taken).
  virtual void on_end(Engine& engine, const StepEnd& last) {
    (void)engine;
    (void)last;
  }

  /// The name its state is saved under in the engine's state (`Engine::state_dict`); "" (the
  /// default): it keeps no state. Names must differ between an engine's callbacks.
  virtual std::string state_name() const { return ""; }
  /// Writes its state (called with the engine's state, when `state_name` is not empty).
  virtual void save(torch::serialize::OutputArchive& archive) const { (void)archive; }
  /// Restores what `save` wrote (called when a saved state holds a record under its name; a
  /// callback added after the state was saved keeps its initial state).
  virtual void load(torch::serialize::InputArchive& archive) { (void)archive; }
};

}  // namespace mlo
