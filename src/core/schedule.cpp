#include "schedule.h"

#include <mlo/base/archive.h>
#include <mlo/base/error.h>
#include <mlo/core/graph.h>
#include <mlo/core/problem.h>
#include <mlo/core/method.h>

#include <torch/serialize/archive.h>

namespace mlo {
namespace detail {

Schedule::Schedule(const Graph& graph, int64_t engine_log_step) {
  for (Problem* p : graph.problems()) {
    auto node = std::make_unique<ScheduleNode>();
    node->problem = p;
    const ProblemConfig& c = p->config();
    node->period = c.unroll_steps() * c.gradient_accumulation();
    node->log_step = c.log_step() > 0 ? c.log_step() : engine_log_step;
    by_problem_[p] = node.get();
    nodes_.push_back(std::move(node));
  }
  for (auto& node : nodes_) {
    for (Problem* parent : graph.parents(node->problem)) node->parents.push_back(&this->node(parent));
    for (Problem* child : graph.children(node->problem)) node->children.push_back(&this->node(child));
    node->ready.assign(node->children.size(), false);
  }
  // A problem needs a hypergradient method when it is a hop of some path (an intermediate node
  // of [U, P1, ..., L, U]); one instance serves all its hops.
  std::map<const Problem*, Hypergradient*> method_of;
  for (auto& node : nodes_) {
    for (const auto& path : graph.paths(node->problem)) {
      std::vector<Hop> hops;
      for (size_t i = 1; i + 1 < path.size(); ++i) {
        auto& method = method_of[path[i]];
        if (!method) {
          // The method validates its own options; name the problem they belong to.
          try {
            methods_.push_back(path[i]->config().method().make());
          } catch (const Error& e) {
            throw Error("problem '" + path[i]->name() + "': " + e.what());
          }
          method = methods_.back().get();
          this->node(path[i]).method = method;
        }
        hops.push_back({path[i], path[i + 1], method});
      }
      node->paths.emplace_back(std::move(hops));
    }
  }
  for (Problem* leaf : graph.leaves()) leaves_.push_back(&node(leaf));
}

Schedule::~Schedule() = default;

ScheduleNode& Schedule::node(const Problem* problem) {
  const auto it = by_problem_.find(problem);
  MLO_INTERNAL_ASSERT(it != by_problem_.end(), "a problem without a schedule node");
  return *it->second;
}

void Schedule::save(torch::serialize::OutputArchive& archive) const {
  for (const auto& node : nodes_) {
    torch::serialize::OutputArchive sub;
    sub.write("ready", c10::IValue(std::vector<int64_t>(node->ready.begin(), node->ready.end())));
    sub.write("unroll_start", c10::IValue(node->unroll_start));
    archive.write(node->problem->name(), sub);
  }
}

void Schedule::load(torch::serialize::InputArchive& archive) {
  for (auto& node : nodes_) {
    torch::serialize::InputArchive sub;
    MLO_CHECK(archive.try_read(node->problem->name(), sub), "engine state: no schedule for ",
              "problem '", node->problem->name(), "' (saved from a different experiment?)");
    const std::string owner = "schedule of problem '" + node->problem->name() + "'";
    const auto ready = mlo::archive::read_ints(sub, "ready", owner);
    MLO_CHECK(ready.size() == node->ready.size(), "engine state: problem '",
              node->problem->name(), "' was saved with ", ready.size(), " children, not ",
              node->ready.size(), " (saved from a different experiment?)");
    node->ready.assign(ready.begin(), ready.end());
    node->unroll_start = mlo::archive::read_bool(sub, "unroll_start", owner);
  }
}

}  // namespace detail
}  // namespace mlo
