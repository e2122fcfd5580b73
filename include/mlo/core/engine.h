#pragma once
/// \file
/// `mlo::Engine`: validates the dependency graph, schedules the problems' steps and runs
/// validation, early stopping and logging.

#include <mlo/core/callback.h>
#include <mlo/core/config.h>
#include <mlo/core/environment.h>
#include <mlo/core/graph.h>
#include <mlo/core/level.h>
#include <mlo/core/problem.h>
#include <mlo/core/schedule.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mlo {

namespace detail {
class BestState;
class EngineNodes;
class LevelRuntime;
struct EngineNode;
}  // namespace detail
namespace dist {
class ProcessGroup;
}  // namespace dist
namespace memory {
class MemoryMeter;
struct CheckpointPlan;
struct LazyPlan;
}  // namespace memory

/// How problems are held: shared by the engine and the program that made them.
using ProblemPtr = std::shared_ptr<Problem>;

/// Both edge maps of the dependency graph, for the one-call constructor:
/// `Dependencies{/*u2l=*/{{outer, {inner}}}, /*l2u=*/{{inner, {outer}}}}`.
struct Dependencies {
  std::vector<std::pair<ProblemPtr, std::vector<ProblemPtr>>> u2l;  ///< upper -> lowers
  std::vector<std::pair<ProblemPtr, std::vector<ProblemPtr>>> l2u;  ///< lower -> uppers
};

/// Runs a multilevel optimization. Each global step steps every leaf problem once; a problem
/// that has taken `unroll_steps` optimizer steps (after `warmup_steps`) marks itself ready in
/// its parents, and a parent whose children are all ready steps, recursively up the graph.
/// Every `log_step` local steps it logs a problem's headline metrics
/// (`Problem::headline_metrics`) at 4 significant digits, one line per problem:
/// `[step 500] classifier  local 500  loss 0.4833  acc 0.84  lr 0.0005  weight_std 0.1079`.
///
/// ```
/// mlo::Engine engine(mlo::EngineConfig().train_iters(2000).valid_step(100));
/// engine.add(outer).add(inner).link(/*upper=*/outer, /*lower=*/inner);
/// engine.validation([&] { return mlo::Metrics{{"loss", outer->last_loss()}}; });
/// engine.run();
/// ```
class Engine {
 public:
  /// An engine with no problems yet; add them with `add` and the edges with `u2l`/`l2u`/`link`.
  explicit Engine(EngineConfig config = EngineConfig());
  /// The one-call form: `add`s every problem in order, then every `u2l` and `l2u` edge of
  /// `dependencies`.
  Engine(EngineConfig config, std::vector<ProblemPtr> problems, const Dependencies& dependencies);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Adds a problem (names must be unique).
  Engine& add(ProblemPtr problem);
  /// `upper`'s parameters enter `lower`'s loss.
  Engine& u2l(const ProblemPtr& upper, const ProblemPtr& lower);
  /// `lower`'s parameters enter `upper`'s loss.
  Engine& l2u(const ProblemPtr& lower, const ProblemPtr& upper);
  /// Both edges between a bilevel pair: `u2l(upper, lower)` and `l2u(lower, upper)`.
  Engine& link(const ProblemPtr& upper, const ProblemPtr& lower);
  /// The program's way to compute metrics: called every `valid_step` global steps (problems
  /// in eval mode) on the ranks that validate (rank 0; every rank when a level shards its
  /// parameters under zero3); returns named metrics, which early stopping watches and every
  /// callback receives (`Callback::on_validation`). The validation log line shows `headline`
  /// (those present, in that order) and the early-stopping metric; an empty `headline` shows
  /// every metric: `engine.validation(hook, {"valid/acc", "valid/loss"})`.
  Engine& validation(std::function<Metrics()> hook, std::vector<std::string> headline = {});
  /// Adds a callback: code that reacts to the engine's progress (core/callback.h, which says
  /// in which order and on which ranks the engine calls them), in the order callbacks were
  /// added; the engine shares its ownership. Not while `run` runs.
  Engine& add_callback(std::shared_ptr<Callback> callback);
  /// Removes a callback `add_callback` added (nothing when it is not one of them). Not while
  /// `run` runs.
  Engine& remove_callback(const Callback& callback);

  /// An environment that the engine steps once at the start of every global step, before any
  /// problem (core/environment.h), and saves with its state; one per engine, set before
  /// `initialize`.
  Engine& environment(std::shared_ptr<Environment> environment);
  /// The environment (null when none was set).
  Environment* environment() const { return environment_.get(); }

  /// The process group of a distributed strategy, for a program that connects it itself (tests,
  /// a launcher of its own); otherwise `initialize` connects from the environment variables.
  Engine& process_group(std::shared_ptr<dist::ProcessGroup> group);

  /// Validates the graph and configs, resolves derived settings and builds the hypergradient
  /// methods. Called by `run` if not called before; throws `mlo::Error` on a bad setup.
  void initialize();
  /// Runs global steps until `train_iters` (continuing from `global_step()`, e.g. after
  /// `load_state_dict`), early stopping, or a callback asking to stop, calling the callbacks
  /// as core/callback.h says. Under a distributed strategy rank 0 decides early stopping, and a
  /// callback asking to stop on any rank stops every rank at the same step.
  void run();
  /// One global step: steps every leaf once (and whatever becomes ready above them).
  void step();

  /// Global steps taken so far (restored by `load_state_dict`).
  int64_t global_step() const { return global_step_; }
  /// Whether training ended before `train_iters`, finished: by early stopping, or by a callback
  /// (`StepDecision::kFinish`). Restored by `load_state_dict`.
  bool stopped_early() const { return stopped_early_; }
  /// The latest validation metrics (empty before the first validation).
  const Metrics& last_validation() const { return last_validation_; }
  /// The best value of the early-stopping metric seen so far.
  std::optional<double> best_metric() const { return best_metric_; }
  /// Runs the validation hook once now, outside the schedule (after training, after
  /// `restore_best`), as `run` does: problems in eval mode, on the ranks that validate. Its
  /// metrics (without the memory meter's); empty metrics on a rank that does not validate;
  /// nullopt when there is no hook. Logs "<title>: <headline>" (nothing when `title` is empty).
  std::optional<Metrics> validate(const std::string& title = "");
  /// Runs `hook` (a final test evaluation, say) as the validation hook runs: problems in eval
  /// mode, on the ranks that validate (every rank under zero3, whose forward gathers the
  /// parameters from all). Its metrics; empty on the other ranks.
  Metrics evaluate(const std::function<Metrics()>& hook);
  /// With `EarlyStopping::restore_best`: puts back every problem's parameters and buffers of
  /// the best validation and returns its global step; -1 (and nothing changes) when there is
  /// none (no validation yet, or restore_best off). Call it after training and after saving
  /// the final state (a resumed run continues from the last step, not the best).
  int64_t restore_best();
  /// The configuration the engine was built with.
  const EngineConfig& config() const { return config_; }
  /// Writes the engine's counters and early-stopping state, and every problem's state under its
  /// name, to `archive`.
  void state_dict(torch::serialize::OutputArchive& archive) const;
  /// Restores what `state_dict` wrote (the engine must hold the same problems). A state saved
  /// under zero1/zero2/zero3 (each rank's own) resumes only with the same strategy and world size; a
  /// complete one under default or distributed at any world size; otherwise this throws.
  void load_state_dict(torch::serialize::InputArchive& archive);
  /// The memory meter when `track_memory` is on (after initialization), else null.
  memory::MemoryMeter* memory_meter() const { return meter_.get(); }
  /// The activation-checkpointing plan of `problem` once made (at its model's first forward),
  /// or null (no checkpointing, or not planned yet).
  const memory::CheckpointPlan* checkpoint_plan(const Problem& problem) const;
  /// Peak tensor bytes of the latest global step ("meta-iteration"), when tracking memory.
  int64_t last_step_peak_bytes() const { return last_step_peak_; }
  /// "mem_peak_mb/<problem>" (latest local step of each) and "mem_peak_mb/iteration" (latest
  /// global step); empty unless `track_memory` is on. Merged into the validation metrics.
  Metrics memory_metrics() const;
  /// The dependency graph of the added problems and edges.
  const Graph& graph() const { return graph_; }
  /// This process's rank: its rank in the process group, 0 without one.
  int rank() const;
  /// The number of ranks: the process group's size, 1 without one.
  int world_size() const;
  /// Rank 0: the rank that validates, decides, logs and saves (true in one process).
  bool is_main() const { return rank() == 0; }
  /// The process group (after initialization, under a distributed strategy), else null.
  dist::ProcessGroup* group() const { return group_.get(); }
  /// The problems, in the order they were added.
  const std::vector<ProblemPtr>& problems() const { return problems_; }
  /// `problem` as this engine runs it (after initialization): what hypergradient methods
  /// receive (core/level.h), e.g. to apply a method by hand.
  Level& level(const Problem& problem);

 private:
  // Performs one step the schedule decided (Schedule::global_step).
  void step_problem(const Schedule::Step& step);
  // Lets the method of `node` refuse what it cannot serve (`Hypergradient::check`): its graph
  // position, the strategy, the problem's optimizer.
  void check_method(const detail::EngineNode& node) const;
  void check_config(const Problem& problem) const;
  // Links every problem's handles (core/handle.h) to the problems they name; throws naming the
  // problem and the handle when one names no problem, or one of another type.
  void link_handles();
  // Whether a data-parallel level of a run on several ranks is inside an accumulation window:
  // its partial gradients and micro-batches are then this rank's own, not the run's.
  bool partial_window() const;
  // Refuses a saved state this run cannot take back (a ZeRO shard of another split, or one
  // saved inside an accumulation window by rank 0 of a distributed run).
  void check_resumable(torch::serialize::InputArchive& archive) const;
  // Joins the process group of a distributed strategy (after the config checks).
  void connect();
  // Whether this rank runs the validation hook and keeps a best state: rank 0, and every rank
  // when a level shards its parameters (zero3: a forward gathers them with collectives, which
  // every rank must join; each rank then keeps its own shards of the best state).
  bool validating_rank() const;
  // Whether a state saved now resumes exactly (StepEnd::resumable).
  bool resumable_now() const;
  // The validation of a global step: the hook, the log line, the callbacks, early stopping.
  void validate_and_maybe_stop();
  // Runs `body` with every problem in eval mode (back to train mode after, also on an error).
  Metrics in_eval_mode(const std::function<Metrics()>& body);
  // Whether to go on after a global step: not when early stopping (rank 0's decision) or a
  // callback on any rank asked to finish (`stopped_early` then holds), nor when a callback on
  // any rank asked to pause. Under a distributed strategy every rank learns the same.
  bool agree_to_go_on(bool finish, bool pause);
  void log_problem(const Problem& problem) const;

  EngineConfig config_;
  std::vector<ProblemPtr> problems_;
  Graph graph_;
  std::unique_ptr<detail::EngineNodes> nodes_;  // who steps when; built at initialization
  std::vector<std::unique_ptr<detail::LevelRuntime>> levels_;  // one per problem, in order
  std::function<Metrics()> validation_;
  std::vector<std::string> validation_headline_;  // the validation log line's metrics
  std::vector<std::shared_ptr<Callback>> callbacks_;
  bool running_ = false;  // inside run(): callbacks are not added or removed then
  bool initialized_ = false;
  int64_t global_step_ = 0;
  bool stopped_early_ = false;
  Metrics last_validation_;
  std::optional<double> best_metric_;
  int64_t validations_without_improvement_ = 0;
  std::unique_ptr<detail::BestState> best_state_;  // with restore_best
  std::unique_ptr<memory::MemoryMeter> meter_;
  std::map<const Problem*, std::shared_ptr<const memory::LazyPlan>> checkpoint_plans_;
  int64_t last_step_peak_ = 0;
  std::shared_ptr<dist::ProcessGroup> group_;
  std::shared_ptr<Environment> environment_;
};

}  // namespace mlo
