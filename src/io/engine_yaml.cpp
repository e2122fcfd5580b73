#include <mlo/io/run.h>

#include <mlo/base/fields.h>
#include <mlo/core/engine.h>

#include <map>
#include <string>
#include <vector>

namespace mlo {

std::string engine_yaml(const Engine& engine) {
  return yaml_text([&](Fields& f) {
    EngineConfig config = engine.config();
    f.section("engine", [&](Fields& s) { config.visit(s); });
    std::vector<std::string> names;
    std::map<std::string, ProblemConfig> configs;
    for (const auto& problem : engine.problems()) {
      names.push_back(problem->name());
      configs.emplace(problem->name(), problem->config());
    }
    f.entries("problems", names,
              [&](const std::string& name, Fields& s) { configs.at(name).visit(s); });
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
