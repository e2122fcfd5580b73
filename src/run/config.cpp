#include <mlo/run/config.h>

namespace mlo {
namespace run {

DependencyConfig resolved_dependencies(const RunConfig& config) {
  if (!config.dependencies.u2l.empty() || !config.dependencies.l2u.empty()) {
    return config.dependencies;
  }
  DependencyConfig graph;
  if (config.experiment == "reweighting" && config.problems.count("reweighter")) {
    graph.u2l["reweighter"] = {"classifier"};
    graph.l2u["classifier"] = {"reweighter"};
  }
  return graph;
}

std::vector<std::string> parents_of(const DependencyConfig& graph, const std::string& name) {
  const auto found = graph.l2u.find(name);
  return found == graph.l2u.end() ? std::vector<std::string>{} : found->second;
}

std::string lower_only_setting(const ProblemSettings& s) {
  const ProblemSettings d;  // the defaults
  if (s.unroll_steps != d.unroll_steps) return "unroll_steps";
  if (s.warmup_steps != d.warmup_steps) return "warmup_steps";
  if (s.roll_back != d.roll_back) return "roll_back";
  if (s.method != d.method) return "method";
  if (s.darts_alpha != d.darts_alpha) return "darts.alpha";
  if (s.neumann_iterations != d.neumann_iterations) return "neumann.iterations";
  if (s.neumann_alpha != d.neumann_alpha) return "neumann.alpha";
  if (s.cg_iterations != d.cg_iterations) return "cg.iterations";
  if (s.cg_alpha != d.cg_alpha) return "cg.alpha";
  return "";
}

}  // namespace run
}  // namespace mlo
