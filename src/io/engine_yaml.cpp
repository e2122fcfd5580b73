#include <mlo/io/run.h>

#include <mlo/base/fields.h>
#include <mlo/core/engine.h>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace mlo {

std::string engine_yaml(const Engine& engine) {
  return yaml_text([&](Fields& f) {
    EngineConfig config = engine.config();
    f.section("engine", [&](Fields& s) { config.visit(s); });
    std::vector<std::string> names;
    std::map<std::string, ProblemConfig> configs;
    std::set<std::string> hops;  // the problems whose method a hypergradient path uses
    for (const auto& problem : engine.problems()) {
      names.push_back(problem->name());
      configs.emplace(problem->name(), problem->config());
      for (const auto& path : engine.graph().paths(problem.get())) {
        for (size_t i = 1; i + 1 < path.size(); ++i) hops.insert(path[i]->name());
      }
    }
    f.entries("problems", names, [&](const std::string& name, Fields& s) {
      if (hops.count(name) != 0) {
        configs.at(name).visit(s);
        return;
      }
      visit_without_method(s, [&](Fields& w) { configs.at(name).visit(w); });
    });
    std::map<std::string, std::vector<std::string>> u2l, l2u;
    for (const auto& problem : engine.problems()) {
      for (Problem* lower : engine.graph().lowers(problem.get())) {
        u2l[problem->name()].push_back(lower->name());
      }
      for (Problem* upper : engine.graph().parents(problem.get())) {
        l2u[problem->name()].push_back(upper->name());
      }
    }
    f.section("dependencies", [&](Fields& s) {
      s("u2l", u2l);
      s("l2u", l2u);
    });
  });
}

}  // namespace mlo
