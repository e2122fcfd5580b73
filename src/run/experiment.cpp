#include <mlo/run/experiment.h>
#include <mlo/run/memory_target.h>
#include <mlo/run/device.h>
#include <mlo/run/sharding.h>

#include <mlo/base/error.h>
#include <mlo/base/registry.h>

#include <cstdio>
#include <sstream>
#include <utility>

namespace mlo {
namespace run {
namespace {

struct Entry {
  ExperimentFactory create;
  SettingsFactory settings;
};

// NOTE: a function-local static, so registrations from other translation units' static
// initializers (the library's and a user's program's) find it constructed whatever the
// initialization order. libmlo_run is a shared library: every ready-made experiment's object
// is in it, and its registration runs when the library loads.
Registry<Entry>& registry() {
  static Registry<Entry> entries(
      "experiment",
      "a program registers its own with MLO_REGISTER_EXPERIMENT, mlo/run/experiment.h");
  return entries;
}

const Entry& find(const std::string& name) { return registry().at(name); }

}  // namespace

bool register_experiment(const std::string& name, std::type_index type, ExperimentFactory create,
                         SettingsFactory settings, const std::string& where) {
  MLO_CHECK(create && settings, "register_experiment: empty factory for experiment '", name,
            "' (", where, ")");
  return registry().add(name, type, Entry{std::move(create), std::move(settings)}, where);
}

std::vector<std::string> experiment_names() { return registry().names(); }

bool is_experiment(const std::string& name) { return registry().contains(name); }

std::unique_ptr<ExperimentSettings> make_settings(const std::string& name) {
  auto settings = find(name).settings();
  MLO_CHECK(settings, "the settings factory of experiment '", name, "' returned null");
  return settings;
}

std::unique_ptr<Experiment> make_experiment(const RunConfig& config) {
  const Entry& entry = find(config.experiment);
  std::unique_ptr<Experiment> experiment;
  // A config built in code gets the same checks as one read from YAML.
  if (config.settings) {
    check_config(config);
    check_world_size(config, launch_shard(config).world_size);
    apply_device(config);
    experiment = entry.create(config);
  } else {
    RunConfig with_defaults = config;
    with_defaults.settings = SettingsHolder(make_settings(config.experiment));
    check_config(with_defaults);
    check_world_size(with_defaults, launch_shard(with_defaults).world_size);
    apply_device(with_defaults);
    experiment = entry.create(with_defaults);
  }
  MLO_CHECK(experiment, "the factory of experiment '", config.experiment, "' returned null");
  return experiment;
}

std::shared_ptr<Problem> Experiment::problem(const std::string& name) {
  std::string names;
  for (const auto& problem : engine().problems()) {
    if (problem->name() == name) return problem;
    names += (names.empty() ? "" : ", ") + problem->name();
  }
  throw Error("the experiment has no problem '" + name + "'; its problems: " + names);
}

MemoryTarget& memory_target(Experiment& experiment, const std::string& name,
                            const std::string& tool) {
  auto* target = dynamic_cast<MemoryTarget*>(&experiment);
  MLO_CHECK(target != nullptr, tool, ": experiment '", name, "' does not support the memory ",
            "tools (it implements no mlo::run::MemoryTarget, run/memory_target.h)");
  return *target;
}

std::string Experiment::report(const Metrics& test, const Metrics& valid) const {
  std::ostringstream out;
  out << (synthetic() ? "Results (SYNTHETIC data)\n" : "Results\n");
  char line[160];
  std::snprintf(line, sizeof(line), "%-24s %12s %12s\n", "metric", "test", "validation");
  out << line;
  for (const auto& name : metric_names()) {
    const auto t = test.find(name);
    const auto v = valid.find("valid/" + name);
    std::snprintf(line, sizeof(line), "%-24s %12s %12s\n", name.c_str(),
                  t == test.end() ? "-" : std::to_string(t->second).c_str(),
                  v == valid.end() ? "-" : std::to_string(v->second).c_str());
    out << line;
  }
  return out.str();
}

}  // namespace run
}  // namespace mlo
