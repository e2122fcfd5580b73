#pragma once
// The one description of the configuration's generic YAML keys, shared by the reader and the
// writer (src/run/yaml.cpp, src/run/yaml_writer.cpp): `visit(f, config)` calls `f(key, member,
// check)` for every scalar, `f.section(key, fn)` for every nested mapping and `f.entries(...)` for
// mappings keyed by user names. The experiment's own keys come from its settings
// (`run::ExperimentSettings::visit`, `visit_problem`), described the same way.

#include <mlo/core/config.h>
#include <mlo/run/config.h>
#include <mlo/run/device.h>
#include <mlo/run/experiment.h>
#include <mlo/base/fields.h>

#include <string>
#include <vector>

namespace mlo {
namespace run {
namespace schema {


inline void visit(Fields& v, run::OptimizerConfig& c) {
  v("name", c.name, one_of(run::optimizer_names()));
  v("lr", c.lr, positive());
  v("momentum", c.momentum, in_range(0, 1));
  v("weight_decay", c.weight_decay, non_negative());
  v("nesterov", c.nesterov);
  v("beta1", c.beta1, in_range(0, 1));
  v("beta2", c.beta2, in_range(0, 1));
  v("eps", c.eps, positive());
}

inline void visit(Fields& v, run::SchedulerConfig& c) {
  v("name", c.name, one_of(run::scheduler_names()));
  v("milestones", c.milestones);
  v("gamma", c.gamma, positive());
  v("t_max", c.t_max, at_least(0));
  v("eta_min", c.eta_min, in_range(0, 1));
}

// `every_method`: describe every registered method's section (reading: any may be set); false
// describes the sections `c.methods` holds (writing: the selected method's and those set).
inline void visit(Fields& v, run::ProblemSettings& c, bool every_method = true) {
  v.section("optimizer", [&](Fields& s) { visit(s, c.optimizer); });
  v.section("scheduler", [&](Fields& s) { visit(s, c.scheduler); });
  v("unroll_steps", c.unroll_steps, at_least(1));
  v("warmup_steps", c.warmup_steps, at_least(0));
  v("roll_back", c.roll_back);
  v("gradient_clipping", c.gradient_clipping, non_negative());
  v("gradient_accumulation", c.gradient_accumulation, at_least(1));
  v("precision", c.precision, one_of(enum_names<Precision>()));
  v.section("checkpointing", [&](Fields& s) {
    s.enumeration("strategy", c.checkpointing.strategy());
    s("segments", c.checkpointing.segments(), at_least(1));
    s("budget_bytes", c.checkpointing.budget_bytes(), at_least(0));
    s("budget_fraction", c.checkpointing.budget_fraction(), in_range(1e-6, 1));
    s("max_overhead", c.checkpointing.max_overhead(), non_negative());
  });
  const std::vector<std::string> methods = method_names();
  v("method", c.method, one_of(methods));
  // Each method's section, described by its options type; a section absent from the YAML
  // keeps the method's defaults.
  for (const auto& name : methods) {
    if (!every_method && !c.methods.count(name)) continue;
    auto& options = c.methods[name];
    if (!options) options = ValuePtr<MethodOptions>(run::method_options(c, name));
    v.section(name.c_str(), [&](Fields& s) { options->visit(s); });
  }
  v("log_step", c.log_step, at_least(0));
  v("data_parallel", c.data_parallel);
  v("allow_unused_parameters", c.allow_unused_parameters);
  v("offload", c.offload, one_of(enum_names<Offload>()));
}

inline void visit(Fields& v, run::EngineSettings& c) {
  v("train_iters", c.train_iters, at_least(0));
  v("valid_step", c.valid_step, at_least(0));
  v("log_step", c.log_step, at_least(0));
  v("save_step", c.save_step, at_least(0));
  v("track_memory", c.track_memory);
  v.section("early_stopping", [&](Fields& s) {
    s("enabled", c.early_stopping.enabled);
    s("metric", c.early_stopping.metric);
    s("mode", c.early_stopping.mode, one_of(enum_names<Mode>()));
    s("tolerance", c.early_stopping.tolerance, at_least(1));
    s("min_delta", c.early_stopping.min_delta, non_negative());
    s("restore_best", c.early_stopping.restore_best);
  });
  v.enumeration("strategy", c.strategy);
  v.enumeration("backend", c.backend);
  v("timeout_s", c.timeout_s, positive());
  v("cudnn_benchmark", c.cudnn_benchmark);
  v("deterministic", c.deterministic);
  v("channels_last", c.channels_last);
}

// Everything after `experiment` (read first: it decides which settings describe the rest).
// `c.settings` must hold the experiment's settings.
// `every_method`: as for a problem's keys (reading true, writing false).
inline void visit_after_experiment(Fields& v, run::RunConfig& c, bool every_method = true) {
  v("name", c.name);
  v("seed", c.seed, at_least(0));
  v("threads", c.threads, at_least(0));
  v("device", c.device, [](const std::string& name) { return device_name_error(name); });
  v.section("engine", [&](Fields& s) { visit(s, c.engine); });
  v.section("logging", [&](Fields& s) { s("tensorboard", c.logging.tensorboard); });
  c.settings->visit(v);
  std::vector<std::string> names;
  for (const auto& entry : c.problems) names.push_back(entry.first);
  v.entries("problems", names, [&](const std::string& name, Fields& s) {
    visit(s, c.problems[name], every_method);
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
