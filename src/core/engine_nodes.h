#pragma once
// Internal to core (not installed): what the engine keeps per problem besides the schedule's
// counts (mlo/core/schedule.h): its runtime (level_runtime.h), its hypergradient paths, the
// method that serves its hops, its logging period, and the schedule built from the graph.

#include <mlo/core/config.h>
#include <mlo/core/path.h>
#include <mlo/core/schedule.h>

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <string>
#include <vector>

namespace mlo {

class Graph;
class Problem;
class Hypergradient;

namespace detail {

/// One problem as the engine steps it.
class LevelRuntime;

struct EngineNode {
  Problem* problem = nullptr;
  LevelRuntime* level = nullptr;     // made by the engine when it resolves the problem
  size_t index = 0;                  // its level in the schedule
  std::vector<size_t> parents;       // l2u targets: their loss reads this problem's parameters
  std::vector<Path> paths;           // this problem's hypergradient paths (over the levels)
  int64_t log_step = 0;              // 0: never
  Hypergradient* method = nullptr;   // serves this problem's hops (null: no hop)
  // The nodes one hop further along its paths (the `prev` of its method's `apply`), each once.
  std::vector<size_t> hop_parents;
  // The problems whose parameters enter its loss (u2l from above: true; l2u from below: false),
  // checked at its first step of the run (`checked`).
  std::vector<std::pair<const Problem*, bool>> inputs;
  bool checked = false;
};

/// Every problem of an engine in the graph's order, their methods and paths, and the schedule,
/// built once from the validated graph.
class EngineNodes {
 public:
  /// Builds the nodes, the hypergradient methods of every problem that is a hop of some path
  /// and the schedule. `engine_log_step` applies where a problem sets no log_step of its own.
  EngineNodes(const Graph& graph, int64_t engine_log_step);
  /// Builds every node's paths over the levels, once each node has its level.
  void make_paths();
  ~EngineNodes();
  EngineNodes(const EngineNodes&) = delete;
  EngineNodes& operator=(const EngineNodes&) = delete;

  EngineNode& node(const Problem* problem);
  EngineNode& at(size_t index) { return *nodes_.at(index); }
  const std::vector<std::unique_ptr<EngineNode>>& nodes() const { return nodes_; }
  Schedule& schedule() { return *schedule_; }
  const Schedule& schedule() const { return *schedule_; }
  /// The problems' names, by level (for the schedule's state).
  std::vector<std::string> names() const;
  /// Whether `problem` is a hop of some path (it has a method) or has paths of its own.
  bool has_paths(const Problem* problem) const;

 private:
  std::vector<std::unique_ptr<EngineNode>> nodes_;
  std::map<const Problem*, EngineNode*> by_problem_;
  std::vector<std::unique_ptr<Hypergradient>> methods_;
  std::map<const Problem*, std::vector<std::vector<Problem*>>> problem_paths_;
  std::unique_ptr<Schedule> schedule_;
};

}  // namespace detail
}  // namespace mlo
