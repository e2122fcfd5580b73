#include "engine_nodes.h"

#include "level_runtime.h"

#include <mlo/base/error.h>
#include <mlo/core/graph.h>
#include <mlo/core/method.h>
#include <mlo/core/problem.h>

#include <algorithm>

namespace mlo {
namespace detail {

EngineNodes::EngineNodes(const Graph& graph, int64_t engine_log_step) {
  std::map<const Problem*, size_t> index;
  for (Problem* p : graph.problems()) {
    auto node = std::make_unique<EngineNode>();
    node->problem = p;
    node->index = nodes_.size();
    const ProblemConfig& c = p->config();
    node->log_step = c.log_step() > 0 ? c.log_step() : engine_log_step;
    index[p] = node->index;
    by_problem_[p] = node.get();
    nodes_.push_back(std::move(node));
  }
  std::vector<Schedule::Level> levels;
  std::vector<std::vector<size_t>> parents;
  for (auto& node : nodes_) {
    for (Problem* parent : graph.parents(node->problem)) node->parents.push_back(index.at(parent));
    for (Problem* upper : graph.uppers(node->problem)) node->inputs.emplace_back(upper, true);
    for (Problem* lower : graph.children(node->problem)) node->inputs.emplace_back(lower, false);
    levels.push_back(Schedule::Level::of(node->problem->config()));
    parents.push_back(node->parents);
  }
  schedule_ = std::make_unique<Schedule>(std::move(levels), std::move(parents));
  // A problem needs a hypergradient method when it is a hop of some path (an intermediate node
  // of [U, P1, ..., L, U]); one instance serves all its hops.
  for (auto& node : nodes_) {
    problem_paths_[node->problem] = graph.paths(node->problem);
    for (const auto& path : problem_paths_[node->problem]) {
      for (size_t i = 1; i + 1 < path.size(); ++i) {
        EngineNode& hop = this->node(path[i]);
        const size_t prev = this->node(path[i + 1]).index;
        if (std::find(hop.hop_parents.begin(), hop.hop_parents.end(), prev) ==
            hop.hop_parents.end()) {
          hop.hop_parents.push_back(prev);
        }
        if (hop.method != nullptr) continue;
        // The method validates its own options; name the problem they belong to.
        try {
          methods_.push_back(path[i]->config().method().make());
        } catch (const Error& e) {
          throw Error("problem '" + path[i]->name() + "': " + e.what());
        }
        hop.method = methods_.back().get();
      }
    }
  }
}

void EngineNodes::make_paths() {
  for (auto& node : nodes_) {
    node->paths.clear();
    for (const auto& path : problem_paths_.at(node->problem)) {
      std::vector<Hop> hops;
      for (size_t i = 1; i + 1 < path.size(); ++i) {
        EngineNode& curr = this->node(path[i]);
        EngineNode& prev = this->node(path[i + 1]);
        MLO_INTERNAL_ASSERT(curr.level && prev.level, "a path before its levels");
        hops.push_back({curr.level, prev.level, curr.method,
                        curr.problem->config().method().reevaluation().upper_gradients_only});
      }
      node->paths.emplace_back(std::move(hops));
    }
  }
  for (auto& node : nodes_) {
    if (!node->level) continue;
    std::vector<Level*> parents;
    for (const size_t i : node->hop_parents) parents.push_back(nodes_.at(i)->level);
    node->level->set_parents(std::move(parents));
  }
}

bool EngineNodes::has_paths(const Problem* problem) const {
  const auto found = problem_paths_.find(problem);
  return found != problem_paths_.end() && !found->second.empty();
}

EngineNodes::~EngineNodes() = default;

EngineNode& EngineNodes::node(const Problem* problem) {
  const auto it = by_problem_.find(problem);
  MLO_INTERNAL_ASSERT(it != by_problem_.end(), "a problem without a schedule node");
  return *it->second;
}

std::vector<std::string> EngineNodes::names() const {
  std::vector<std::string> out;
  for (const auto& node : nodes_) out.push_back(node->problem->name());
  return out;
}

}  // namespace detail
}  // namespace mlo
