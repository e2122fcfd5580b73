#pragma once
// The layout of an experiment's YAML, shared by the reader and the writer (src/run/yaml.cpp,
// src/run/yaml_writer.cpp): which section holds which config's keys. Each config describes its
// own keys (`EngineConfig::visit`, `ProblemConfig::visit`, `RunOptions::visit`, ...), and the
// experiment's own come from its settings (`run::ExperimentSettings::visit`, `visit_problem`).

#include <mlo/core/config.h>
#include <mlo/run/config.h>
#include <mlo/run/device.h>
#include <mlo/run/experiment.h>
#include <mlo/base/fields.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

namespace mlo {
namespace run {
namespace schema {

// `threads`: 0 (LibTorch's default) up to 4 per hardware thread; more only oversubscribes the
// cores (and LibTorch takes an int).
inline std::string threads_error(const int64_t& threads) {
  const int64_t hardware = std::max(1U, std::thread::hardware_concurrency());
  if (threads >= 0 && threads <= 4 * hardware) return "";
  return "must be in [0, " + std::to_string(4 * hardware) + "] (0: LibTorch's default; at most 4 " +
         "per hardware thread, of which this machine has " + std::to_string(hardware) + "), got " +
         std::to_string(threads);
}

// Everything after `experiment` (read first: it decides which settings describe the rest).
// `c.settings` must hold the experiment's settings. `record`: writing the resolved
// configuration, where a problem with no problem above it (whose hypergradient method nothing
// uses) is written without its `method` and that method's section.
inline void visit_after_experiment(Fields& v, run::RunConfig& c, bool record = false) {
  v("name", c.name, run_name_error);
  v("seed", c.seed, seed_error);
  v("threads", c.threads, threads_error);
  v("device", c.device, [](const std::string& name) { return device_name_error(name); });
  v.section("engine", [&](Fields& s) {
    c.engine.visit(s);
    c.run.visit(s);
    c.device_options.visit(s);
  });
  c.settings->visit(v);
  std::vector<std::string> names;
  for (const auto& entry : c.problems) names.push_back(entry.first);
  const DependencyConfig graph = record ? resolved_dependencies(c) : DependencyConfig();
  v.entries("problems", names, [&](const std::string& name, Fields& s) {
    if (record && parents_of(graph, name).empty()) {
      visit_without_method(s, [&](Fields& w) { c.problems[name].visit(w); });
    } else {
      c.problems[name].visit(s);
    }
    c.settings->visit_problem(name, s);
  });
  v.section("dependencies", [&](Fields& s) {
    s("u2l", c.dependencies.u2l);
    s("l2u", c.dependencies.l2u);
  });
}

}  // namespace schema
}  // namespace run
}  // namespace mlo
