#pragma once
// Internal to core (not installed): the engine's scheduling state, in one place.

#include <mlo/core/config.h>
#include <mlo/core/path.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

namespace torch {
namespace serialize {
class InputArchive;
class OutputArchive;
}  // namespace serialize
}  // namespace torch

namespace mlo {

class Graph;
class Problem;

class Hypergradient;

namespace detail {

/// What the engine knows about one problem to decide when it steps (docs/architecture.md,
/// "Scheduling rules"). The problem itself only counts its own steps.
struct ScheduleNode {
  Problem* problem = nullptr;
  std::vector<ScheduleNode*> parents;   // l2u targets: their loss reads this problem's parameters
  std::vector<ScheduleNode*> children;  // l2u sources: problems below this one
  std::vector<bool> ready;              // per child: has it finished its unroll?
  std::vector<Path> paths;   // this problem's hypergradient paths
  int64_t period = 1;                   // unroll_steps * gradient_accumulation local steps
  int64_t log_step = 0;                 // 0: never
  bool unroll_start = true;             // the next step starts an unroll
  Hypergradient* method = nullptr;  // serves this problem's hops (null: no hop)
};

/// The scheduling state of every problem of an engine, built once from the validated graph.
class Schedule {
 public:
  /// Builds the nodes, the hypergradient methods of every problem that is a hop of some path,
  /// and the paths. `engine_log_step` applies where a problem sets no log_step of its own.
  Schedule(const Graph& graph, int64_t engine_log_step);
  ~Schedule();
  Schedule(const Schedule&) = delete;
  Schedule& operator=(const Schedule&) = delete;

  ScheduleNode& node(const Problem* problem);
  const std::vector<ScheduleNode*>& leaves() const { return leaves_; }
  const std::vector<std::unique_ptr<ScheduleNode>>& nodes() const { return nodes_; }

  /// Ready flags and unroll starts of every node (a run may be saved between a child's unroll
  /// and its parent's step).
  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive);

 private:
  std::vector<std::unique_ptr<ScheduleNode>> nodes_;
  std::map<const Problem*, ScheduleNode*> by_problem_;
  std::vector<ScheduleNode*> leaves_;
  std::vector<std::unique_ptr<Hypergradient>> methods_;
};

}  // namespace detail
}  // namespace mlo
