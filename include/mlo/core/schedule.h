#pragma once
/// \file
/// `mlo::Schedule`: the engine's rule of who steps when, on counts alone (docs/architecture.md,
/// "Scheduling rules"). The engine steps its problems through it, and whoever needs to know in
/// advance how many optimizer steps a level takes in a run (a cosine schedule's period) runs
/// the same rule with nothing behind it (`count_optimizer_steps`).
///
/// With U = unroll_steps, G = gradient_accumulation, W = warmup_steps of a level: every global
/// step steps each leaf (a level with no level below it) once; a level takes an optimizer step
/// every G local steps; after each local step whose count is a multiple of U·G and larger than
/// W it marks itself ready in each parent and asks each to step, and a parent steps once all its
/// children are ready (recursively up the graph); with roll-back the level then redoes one step
/// from the state of its unroll's start.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace torch {
namespace serialize {
class InputArchive;
class OutputArchive;
}  // namespace serialize
}  // namespace torch

namespace mlo {

struct ProblemConfig;

/// The scheduling state of a graph of levels, by index.
class Schedule {
 public:
  /// What the schedule reads of one level: `ProblemConfig`'s unroll_steps,
  /// gradient_accumulation, warmup_steps and roll_back.
  struct Level {
    int64_t unroll_steps = 1;           ///< Steps of this level per step of its parent.
    int64_t gradient_accumulation = 1;  ///< Micro-batches per optimizer step.
    int64_t warmup_steps = 0;           ///< Local steps before the parents start stepping.
    bool roll_back = false;             ///< After the parents step, restore and redo one step.
    /// The counts of `config`.
    static Level of(const ProblemConfig& config);
  };
  /// One step the schedule asks for.
  struct Step {
    size_t level = 0;           ///< which level steps
    bool unroll_start = false;  ///< the first step of an unroll
    bool redo = false;          ///< roll-back: the step again, from the unroll's start
  };

  /// `parents[i]`: the levels directly above level i (its `l2u` targets), in order.
  Schedule(std::vector<Level> levels, std::vector<std::vector<size_t>> parents);

  /// One global step: every leaf once, and every level that becomes ready above them;
  /// `take(step)` performs each step as the schedule decides it (before the schedule counts it).
  void global_step(const std::function<void(const Step&)>& take);

  /// Levels without a level below them, in index order.
  const std::vector<size_t>& leaves() const { return leaves_; }
  /// Local steps level `i` has taken (micro-steps under accumulation; a redo is not one).
  int64_t local_steps(size_t i) const { return nodes_.at(i).local; }
  /// Optimizer steps level `i` has taken (a roll-back rewinds to the unroll's start + 1).
  int64_t optimizer_steps(size_t i) const { return nodes_.at(i).optimizer; }

  /// The ready flags and unroll starts (a run may be saved between a child's unroll and its
  /// parent's step). The counts are the problems' own, which they save themselves.
  void save(torch::serialize::OutputArchive& archive, const std::vector<std::string>& names) const;
  /// Restores what `save` wrote, and the counts: `local[i]` and `optimizer[i]` of level i.
  void load(torch::serialize::InputArchive& archive, const std::vector<std::string>& names,
            const std::vector<int64_t>& local, const std::vector<int64_t>& optimizer);

 private:
  struct Node {
    Level level;
    int64_t period = 1;  // U·G local steps
    std::vector<size_t> parents;
    std::vector<size_t> children;
    std::vector<bool> ready;  // per child: has it finished its unroll?
    bool unroll_start = true;
    int64_t local = 0;
    int64_t optimizer = 0;
    int64_t optimizer_at_unroll_start = 0;
  };
  void step(size_t i, const std::function<void(const Step&)>& take);

  std::vector<Node> nodes_;
  std::vector<size_t> leaves_;
};

/// The optimizer steps each level takes in `global_steps` global steps (the rule above, run on
/// counts): what a learning-rate schedule over a whole run needs to know.
std::vector<int64_t> count_optimizer_steps(const std::vector<Schedule::Level>& levels,
                                           const std::vector<std::vector<size_t>>& parents,
                                           int64_t global_steps);

}  // namespace mlo
