#pragma once
// The one description of the configuration's YAML keys, shared by the reader and the writer
// (src/io/yaml.cpp): `visit(v, config)` calls `v(key, member, check)` for every scalar,
// `v.section(key, fn)` for every nested mapping and `v.map(key, member, fn)` for mappings keyed by
// user names. Checks return an empty string when the value is fine, else what is wrong.

#include <mlo/core/config.h>
#include <mlo/run/config.h>

#include <algorithm>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace mlo {
namespace io {
namespace schema {

template <typename T>
using Check = std::function<std::string(const T&)>;

// Keeps a check's type out of template deduction (a lambda is not a std::function).
template <typename T>
struct Id {
  using type = T;
};

template <typename T>
Check<T> at_least(T low) {
  return [low](const T& v) {
    std::ostringstream out;
    if (v < low) out << "must be >= " << low << ", got " << v;
    return out.str();
  };
}

inline Check<double> positive() {
  return [](const double& v) {
    std::ostringstream out;
    if (!(v > 0)) out << "must be > 0, got " << v;
    return out.str();
  };
}

inline Check<double> non_negative() {
  return [](const double& v) {
    std::ostringstream out;
    if (!(v >= 0)) out << "must be >= 0, got " << v;
    return out.str();
  };
}

inline Check<double> in_range(double low, double high) {
  return [low, high](const double& v) {
    std::ostringstream out;
    if (!(v >= low && v <= high)) out << "must be in [" << low << ", " << high << "], got " << v;
    return out.str();
  };
}

inline Check<std::string> one_of(std::vector<std::string> choices) {
  return [choices](const std::string& v) {
    if (std::find(choices.begin(), choices.end(), v) != choices.end()) return std::string();
    std::string out = "must be one of ";
    for (size_t i = 0; i < choices.size(); ++i) out += (i ? ", " : "") + choices[i];
    return out + "; got '" + v + "'";
  };
}

template <typename V>
void visit(V& v, run::ModelConfig& c) {
  v("name", c.name, one_of(run::model_names()));
  v("hidden", c.hidden, at_least<int64_t>(1));
}

template <typename V>
void visit(V& v, run::OptimizerConfig& c) {
  v("name", c.name, one_of(run::optimizer_names()));
  v("lr", c.lr, positive());
  v("momentum", c.momentum, in_range(0, 1));
  v("weight_decay", c.weight_decay, non_negative());
  v("nesterov", c.nesterov);
  v("beta1", c.beta1, in_range(0, 1));
  v("beta2", c.beta2, in_range(0, 1));
  v("eps", c.eps, positive());
}

template <typename V>
void visit(V& v, run::SchedulerConfig& c) {
  v("name", c.name, one_of(run::scheduler_names()));
  v("milestones", c.milestones);
  v("gamma", c.gamma, positive());
  v("t_max", c.t_max, at_least<int64_t>(0));
  v("eta_min", c.eta_min, in_range(0, 1));
}

template <typename V>
void visit(V& v, run::ProblemSettings& c) {
  v.section("model", [&](V& s) { visit(s, c.model); });
  v.section("optimizer", [&](V& s) { visit(s, c.optimizer); });
  v.section("scheduler", [&](V& s) { visit(s, c.scheduler); });
  v("unroll_steps", c.unroll_steps, at_least<int64_t>(1));
  v("warmup_steps", c.warmup_steps, at_least<int64_t>(0));
  v("roll_back", c.roll_back);
  v("gradient_clipping", c.gradient_clipping, non_negative());
  v("gradient_accumulation", c.gradient_accumulation, at_least<int64_t>(1));
  v("precision", c.precision, one_of(enum_names<Precision>()));
  v.section("checkpointing", [&](V& s) {
    s("strategy", c.checkpointing.strategy, one_of(enum_names<Checkpointing>()));
    s("segments", c.checkpointing.segments, at_least<int64_t>(1));
    s("budget_bytes", c.checkpointing.budget_bytes, at_least<int64_t>(0));
    s("budget_fraction", c.checkpointing.budget_fraction, in_range(1e-6, 1));
    s("max_overhead", c.checkpointing.max_overhead, non_negative());
  });
  v("method", c.method, one_of(enum_names<Method>()));
  v.section("darts", [&](V& s) { s("alpha", c.darts_alpha, positive()); });
  v.section("neumann", [&](V& s) {
    s("iterations", c.neumann_iterations, at_least<int64_t>(0));
    s("alpha", c.neumann_alpha, positive());
  });
  v.section("cg", [&](V& s) {
    s("iterations", c.cg_iterations, at_least<int64_t>(1));
    s("alpha", c.cg_alpha, positive());
  });
  v("log_step", c.log_step, at_least<int64_t>(0));
}

template <typename V>
void visit(V& v, run::DataConfig& c) {
  v("dataset", c.dataset, one_of(run::dataset_names()));
  v("root", c.root);
  v("imbalance", c.imbalance, [](const double& x) {
    return x >= 1 ? std::string() : "must be >= 1 (1 = balanced), got " + std::to_string(x);
  });
  v("meta_size", c.meta_size, at_least<int64_t>(1));
  v("valid_size", c.valid_size, at_least<int64_t>(0));
  v("shuffle_classes", c.shuffle_classes);
  v("batch_size", c.batch_size, at_least<int64_t>(1));
  v("meta_batch_size", c.meta_batch_size, at_least<int64_t>(1));
  v("test_batch_size", c.test_batch_size, at_least<int64_t>(1));
  v("augment", c.augment);
  v("synthetic_fallback", c.synthetic_fallback);
  v("synthetic_size", c.synthetic_size, at_least<int64_t>(1));
  v("synthetic_test_size", c.synthetic_test_size, at_least<int64_t>(1));
}

template <typename V>
void visit(V& v, run::EngineSettings& c) {
  v("train_iters", c.train_iters, at_least<int64_t>(0));
  v("valid_step", c.valid_step, at_least<int64_t>(0));
  v("log_step", c.log_step, at_least<int64_t>(0));
  v("save_step", c.save_step, at_least<int64_t>(0));
  v("track_memory", c.track_memory);
  v.section("early_stopping", [&](V& s) {
    s("enabled", c.early_stopping.enabled);
    s("metric", c.early_stopping.metric);
    s("mode", c.early_stopping.mode, one_of(enum_names<Mode>()));
    s("tolerance", c.early_stopping.tolerance, at_least<int64_t>(1));
    s("min_delta", c.early_stopping.min_delta, non_negative());
  });
}

template <typename V>
void visit(V& v, run::RunConfig& c) {
  v("experiment", c.experiment, one_of({"reweighting"}));
  v("name", c.name);
  v("seed", c.seed, at_least<int64_t>(0));
  v("threads", c.threads, at_least<int64_t>(0));
  v.section("engine", [&](V& s) { visit(s, c.engine); });
  v.section("data", [&](V& s) { visit(s, c.data); });
  v.map("problems", c.problems, [](V& s, run::ProblemSettings& p) { visit(s, p); });
  v.section("reweighting", [&](V& s) { s("normalize_weights", c.reweighting.normalize_weights); });
  v.section("dependencies", [&](V& s) {
    s("u2l", c.dependencies.u2l);
    s("l2u", c.dependencies.l2u);
  });
}

}  // namespace schema
}  // namespace io
}  // namespace mlo
