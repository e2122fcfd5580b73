#include <mlo/base/error.h>
#include <mlo/run/config.h>

#include <algorithm>

namespace mlo {
namespace run {

DependencyConfig ExperimentSettings::default_dependencies(const RunConfig& config) const {
  (void)config;
  return {};
}

std::string RunConfig::where(const std::string& path) const {
  for (std::string key = path; !key.empty();) {
    const auto found = locations.find(key);
    if (found != locations.end()) return found->second;
    const auto dot = key.rfind('.');
    key = dot == std::string::npos ? std::string() : key.substr(0, dot);
  }
  return source.empty() ? std::string("(config)") : source;
}

void RunConfig::fail(const std::string& path, const std::string& what) const {
  throw Error(where(path) + ": " + (path.empty() ? std::string("(top level)") : path) + ": " +
              what);
}

void RunConfig::settings_error() const {
  throw Error(settings ? "the settings of this configuration are not those of experiment '" +
                             experiment + "' (was it read for another experiment?)"
                       : "this configuration has no settings for experiment '" + experiment +
                             "'; read it with run::load_run_config, or set them with "
                             "run::make_settings");
}

DependencyConfig resolved_dependencies(const RunConfig& config) {
  if (!config.dependencies.u2l.empty() || !config.dependencies.l2u.empty()) {
    return config.dependencies;
  }
  return config.settings ? config.settings->default_dependencies(config) : DependencyConfig{};
}

std::vector<std::string> parents_of(const DependencyConfig& graph, const std::string& name) {
  const auto found = graph.l2u.find(name);
  return found == graph.l2u.end() ? std::vector<std::string>{} : found->second;
}

std::shared_ptr<MethodOptions> method_options(const ProblemSettings& settings,
                                              const std::string& name) {
  const auto found = settings.methods.find(name);
  if (found != settings.methods.end() && found->second) return found->second->clone();
  return mlo::method_options(name);
}

std::string changed_method_key(const ProblemSettings& s, const std::string& name) {
  const auto found = s.methods.find(name);
  if (found == s.methods.end() || !found->second) return "";
  MethodOptions* options = found->second.get();
  const auto given = field_values([&](Fields& f) { options->visit(f); });
  const auto defaults = mlo::method_options(name);
  const auto expected = field_values([&](Fields& f) { defaults->visit(f); });
  for (const auto& [key, value] : given) {
    const auto other = expected.find(key);
    if (other == expected.end() || other->second != value) return key;
  }
  return "";
}

std::string lower_only_setting(const ProblemSettings& s) {
  const ProblemSettings d;  // the defaults
  if (s.unroll_steps != d.unroll_steps) return "unroll_steps";
  if (s.warmup_steps != d.warmup_steps) return "warmup_steps";
  if (s.roll_back != d.roll_back) return "roll_back";
  if (s.method != d.method) return "method";
  for (const auto& entry : s.methods) {
    const std::string key = changed_method_key(s, entry.first);
    if (!key.empty()) return entry.first + "." + key;
  }
  return "";
}

namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + ("'" + names[i] + "'");
  }
  return out;
}

void check_problem_names(const RunConfig& c) {
  const auto required = c.settings->required_problems();
  const auto optional = c.settings->optional_problems();
  if (required.empty() && optional.empty()) return;
  const std::string has = "the " + c.experiment + " experiment has problems " + joined(required) +
                          (optional.empty() ? "" : " (optionally " + joined(optional) + ")");
  for (const auto& name : required) {
    if (!c.problems.count(name)) c.fail("problems", has + "; '" + name + "' is missing");
  }
  for (const auto& [name, p] : c.problems) {
    const bool known = std::count(required.begin(), required.end(), name) +
                           std::count(optional.begin(), optional.end(), name) > 0;
    if (!known) c.fail("problems." + name, has + ", not '" + name + "'");
  }
}

}  // namespace

void check_config(const RunConfig& c) {
  if (c.settings) {
    check_problem_names(c);
    c.settings->check(c);
  }
  // A setting that acts only on a lower problem, on a problem with nothing above it, would be
  // accepted and silently ignored: refuse it, naming where it was set.
  const DependencyConfig graph = resolved_dependencies(c);
  for (const auto& [name, p] : c.problems) {
    const std::string key = lower_only_setting(p);
    if (key.empty() || !parents_of(graph, name).empty()) continue;
    bool has_children = false;
    for (const auto& [lower, uppers] : graph.l2u) {
      for (const auto& upper : uppers) has_children = has_children || upper == name;
    }
    c.fail("problems." + name + "." + key,
           "acts only on a lower problem (one with a problem above it), and '" + name +
               "' has no problem above it in the dependency graph" +
               (has_children ? " (it is the top level)" : "") + ", so it would have no effect; "
               "remove it");
  }
  // Each method's rules across its keys, here where keys still have their file positions (the
  // method's constructor checks the same for a configuration built in code). A section of a
  // method the problem does not run is accepted (kept for switching with --set ...method=)
  // only when `method` was chosen: set without it, the section would be silently ignored for
  // the default method.
  for (const auto& [name, p] : c.problems) {
    const std::string method_key = "problems." + name + ".method";
    for (const auto& [method, options] : p.methods) {
      if (!options) continue;
      const std::string changed = method == p.method ? "" : changed_method_key(p, method);
      if (const auto broken = options->validate()) {
        c.fail("problems." + name + "." + method + "." + broken->key, broken->what);
      }
      // NOTE: only for a configuration read from YAML (it has key locations): one built in code
      // says what it means, and a `method` it set to the default leaves no trace to test.
      if (!changed.empty() && p.method == kDefaultMethod && !c.locations.empty() &&
          !c.locations.count(method_key)) {
        c.fail("problems." + name + "." + method + "." + changed,
               "sets an option of method '" + method + "', but " + method_key +
                   " is not set, so '" + p.method + "' (the default) runs and the '" + method +
                   "' section has no effect; add 'method: " + method + "', or remove the section");
      }
    }
  }
  for (const auto* edges : {&c.dependencies.u2l, &c.dependencies.l2u}) {
    const std::string kind = edges == &c.dependencies.u2l ? "u2l" : "l2u";
    for (const auto& [from, tos] : *edges) {
      if (!c.problems.count(from)) {
        c.fail("dependencies." + kind, "names problem '" + from + "', which is not under problems");
      }
      for (const auto& name : tos) {
        if (!c.problems.count(name)) {
          c.fail("dependencies." + kind + "." + from,
                 "names problem '" + name + "', which is not under problems");
        }
      }
    }
  }
  if (c.engine.early_stopping.enabled && c.engine.valid_step == 0) {
    c.fail("engine.early_stopping", "needs engine.valid_step > 0 (validation supplies its metric)");
  }
  // Validation metrics are "valid/<name>" (Experiment::evaluate).
  if (c.engine.early_stopping.metric.rfind("valid/", 0) != 0) {
    c.fail("engine.early_stopping.metric",
           "must be a validation metric, 'valid/<name>'; got '" + c.engine.early_stopping.metric +
               "'");
  }
}


}  // namespace run
}  // namespace mlo
