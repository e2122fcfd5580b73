#include <mlo/base/error.h>
#include <mlo/base/number_text.h>
#include <mlo/run/config.h>
#include <mlo/run/builders.h>

#include <algorithm>
#include <limits>

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

namespace {

// A positive value an optimizer can apply to float32 parameters (LibTorch converts it to the
// parameters' type; past float's range that fails deep inside the step, naming no key).
// A float option: within the bound, and no larger than a float holds (LibTorch keeps these in
// single precision, so a larger value would fail there without naming the key).
Check<double> float_option(bool zero_allowed) {
  return [zero_allowed](const double& v) {
    if (!(zero_allowed ? v >= 0 : v > 0)) {
      return std::string(zero_allowed ? "must be >= 0" : "must be > 0") + ", got " + number_text(v);
    }
    if (v > std::numeric_limits<float>::max()) {
      return "must be at most " + number_text(std::numeric_limits<float>::max()) +
             " (a float), got " + number_text(v);
    }
    return std::string();
  };
}

Check<double> positive_float() { return float_option(false); }
Check<double> non_negative_float() { return float_option(true); }

}  // namespace

void OptimizerConfig::visit(Fields& v) {
  v("name", name, one_of(optimizer_names()));
  v("lr", lr, positive_float());
  v("momentum", momentum, in_range(0, 1));
  v("weight_decay", weight_decay, non_negative_float());
  v("nesterov", nesterov);
  // (at 1 a moment never moves from its start, and Adam divides by 1 - beta^t = 0)
  v("beta1", beta1, at_least_below(0, 1));
  v("beta2", beta2, at_least_below(0, 1));
  v("eps", eps, positive_float());
}

void SchedulerConfig::visit(Fields& v) {
  v("name", name, one_of(scheduler_names()));
  v("milestones", milestones);
  for (size_t i = 0; i < milestones.size(); ++i) {
    if (milestones[i] <= 0 || (i > 0 && milestones[i] <= milestones[i - 1])) {
      v.refuse("milestones", "must be optimizer steps > 0 in increasing order, got " +
                                 std::to_string(milestones[i]) + " at position " +
                                 std::to_string(i));
      break;
    }
  }
  v("gamma", gamma, positive_float());
  v("t_max", t_max, at_least(0));
  v("eta_min", eta_min, in_range(0, 1));
}

void DeviceOptions::visit(Fields& v) {
  v("cudnn_benchmark", cudnn_benchmark);
  v("deterministic", deterministic);
  v("channels_last", channels_last);
}

void ProblemSection::visit(Fields& v) {
  v.section("optimizer", [&](Fields& s) { optimizer.visit(s); });
  v.section("scheduler", [&](Fields& s) { scheduler.visit(s); });
  config.visit(v);
}

std::string seed_error(const int64_t& seed) {
  if (seed >= 0 && seed <= kMaxSeed) return "";
  return "must be in [0, " + std::to_string(kMaxSeed) + "] (LibTorch's generators take 32-bit " +
         "seeds, and an experiment derives a few more from it), got " + std::to_string(seed);
}

std::string run_name_error(const std::string& name) {
  if (name.empty()) return "must not be empty (it names the default output folder runs/<name>)";
  if (name.find('/') != std::string::npos || name == "." || name == "..") {
    return "must be a plain name without '/' (it names the default output folder runs/<name>), "
           "got '" + name + "'; choose where the run goes with --out";
  }
  for (const char c : name) {
    if (static_cast<unsigned char>(c) < 0x20) return "must not hold control characters";
  }
  return "";
}

std::string lower_only_setting(const ProblemConfig& config) {
  ProblemConfig given = config;
  ProblemConfig defaults;
  const auto values = field_values([&](Fields& f) { given.visit(f); });
  const auto expected = field_values([&](Fields& f) { defaults.visit(f); });
  const std::string method = config.method().name();
  for (const char* key : {"unroll_steps", "warmup_steps", "roll_back", "method"}) {
    if (values.at(key) != expected.at(key)) return key;
  }
  // The method's own keys, against that method's defaults.
  ProblemConfig method_defaults = ProblemConfig().method(method);
  const auto default_keys = field_values([&](Fields& f) { method_defaults.visit(f); });
  for (const auto& [key, value] : values) {
    if (key.rfind(method + ".", 0) != 0) continue;
    if (default_keys.at(key) != value) return key;
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
    std::string key = lower_only_setting(p.config);
    const std::string prefix = "problems." + name + ".";
    for (const auto& alternative : c.alternative_keys) {  // (another method's section)
      if (key.empty() && alternative.rfind(prefix, 0) == 0) key = alternative.substr(prefix.size());
    }
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
  // Each problem's rules across its keys (ProblemConfig::validate, the selected method's
  // included), here where keys still have their file positions (the engine applies the same
  // rules to a configuration built in code). A section of a method the problem does not run is
  // read and validated, and has no effect: it is accepted (kept for switching with --set
  // ...method=) only when `method` was chosen, for set without it, the section would be
  // silently ignored for the default method.
  for (const auto& [name, p] : c.problems) {
    const MethodOptions& options = p.config.method();
    if (const auto broken = p.config.validate(c.engine)) {
      c.fail("problems." + name + "." + broken->key, broken->what);
    }
    const std::string method_key = "problems." + name + ".method";
    // NOTE: only for a configuration read from YAML (it has key locations): one built in code
    // says what it means.
    if (c.locations.empty() || c.locations.count(method_key)) continue;
    const std::string prefix = "problems." + name + ".";
    for (const auto& key : c.alternative_keys) {
      if (key.rfind(prefix, 0) != 0) continue;
      const std::string other = key.substr(prefix.size(), key.find('.', prefix.size()) - prefix.size());
      c.fail(key, "sets an option of method '" + other + "', but " + method_key +
                      " is not set, so '" + options.name() + "' (the default) runs and the '" +
                      other + "' section has no effect; add 'method: " + other +
                      "', or remove the section");
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
  // A problem that takes no optimizer step in the whole run would leave training silently
  // undone (exit 0, nothing learned).
  if (c.engine.train_iters() > 0 && !c.problems.empty()) {
    const auto counts = optimizer_steps(c);
    for (const auto& [name, count] : counts) {
      if (count > 0) continue;
      const ProblemConfig& p = c.problems.at(name).config;
      if (p.gradient_accumulation() > 1) {
        c.fail("problems." + name + ".gradient_accumulation",
               "is " + std::to_string(p.gradient_accumulation()) + " micro-steps per optimizer " +
                   "step, so '" + name + "' takes no optimizer step in engine.train_iters = " +
                   std::to_string(c.engine.train_iters()) + " global steps; raise train_iters " +
                   "or lower gradient_accumulation");
      }
      c.fail("engine.train_iters",
             "is " + std::to_string(c.engine.train_iters()) + " global steps, in which problem '" +
                 name + "' takes no optimizer step (the problems below it do not finish an " +
                 "unroll after their warmup in that time); raise train_iters, or lower their " +
                 "unroll_steps, warmup_steps or gradient_accumulation");
    }
  }
  if (const auto broken = c.engine.validate()) c.fail("engine." + broken->key, broken->what);
  const EarlyStopping& rule = c.engine.early_stopping();
  // Validation metrics are "valid/<name>" (Experiment::evaluate).
  if (rule.enabled() && rule.metric().rfind("valid/", 0) != 0) {
    c.fail("engine.early_stopping.metric",
           "must be a validation metric, 'valid/<name>'; got '" + rule.metric() + "'");
  }
}


}  // namespace run
}  // namespace mlo
