// Every generic key of a problem (`problems.<name>.*`, including every registered method's
// section) and of the engine (`engine.*`) reaches what the experiment builds: the test walks the
// keys the configs describe (`ProblemConfig::visit`, `EngineConfig::visit`, `RunOptions::visit`,
// the optimizer's and the schedule's) and, for each, sets a value that is not the default and
// checks it on the built problem (its ProblemConfig, its optimizer, its schedule's learning rates
// after real steps, its method's options) or engine. A key the reader accepts without a check
// here fails the test, so a new key cannot be validated and then silently ignored. And the
// defaults a YAML file gets are the C++ defaults, key for key.
#include <mlo/base/fields.h>
#include <mlo/core/problem.h>
#include <mlo/run/experiment.h>
#include <mlo/run/yaml.h>
#include "support/tiny_reweighting.h"

#include <catch2/catch.hpp>

#include <torch/optim.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace generic_keys_test {

namespace {

// The classifier's learning rate in the tiny pair (tests/support/tiny_reweighting.h).
constexpr double kLr = 0.05;

struct Case {
  std::vector<std::string> overrides;  // besides the key's own value, what makes it act (keys of
                                       // the problem, or "engine.<key>")
  std::string value;                   // the key's value
  bool run = false;                    // check after training `engine.train_iters` steps
  std::function<void(mlo::Problem&)> check;
};

double lr(mlo::Problem& p) { return p.optimizer().param_groups()[0].options().get_lr(); }
const torch::optim::SGDOptions& sgd(mlo::Problem& p) {
  return static_cast<const torch::optim::SGDOptions&>(p.optimizer().param_groups()[0].options());
}
const torch::optim::AdamOptions& adam(mlo::Problem& p) {
  return static_cast<const torch::optim::AdamOptions&>(p.optimizer().param_groups()[0].options());
}

std::map<std::string, Case> cases() {
  using P = mlo::Problem;
  return {
      {"optimizer.name",
       {{}, "adam", false, [](P& p) { CHECK(dynamic_cast<torch::optim::Adam*>(&p.optimizer())); }}},
      {"optimizer.lr", {{}, "0.03", false, [](P& p) { CHECK(lr(p) == 0.03); }}},
      {"optimizer.momentum", {{}, "0.5", false, [](P& p) { CHECK(sgd(p).momentum() == 0.5); }}},
      {"optimizer.weight_decay",
       {{}, "0.01", false, [](P& p) { CHECK(sgd(p).weight_decay() == 0.01); }}},
      {"optimizer.nesterov",
       {{"optimizer.momentum=0.5"}, "true", false, [](P& p) { CHECK(sgd(p).nesterov()); }}},
      {"optimizer.beta1",
       {{"optimizer.name=adam"},
        "0.8",
        false,
        [](P& p) { CHECK(std::get<0>(adam(p).betas()) == 0.8); }}},
      {"optimizer.beta2",
       {{"optimizer.name=adam"},
        "0.99",
        false,
        [](P& p) { CHECK(std::get<1>(adam(p).betas()) == 0.99); }}},
      {"optimizer.eps",
       {{"optimizer.name=adam"}, "0.001", false, [](P& p) { CHECK(adam(p).eps() == 0.001); }}},
      // Schedules: the learning rate after the 2 optimizer steps of a 2-step run.
      {"scheduler.name",
       {{"scheduler.milestones=[1]"},
        "multistep",
        true,
        [](P& p) { CHECK(lr(p) == Approx(kLr * 0.1)); }}},
      {"scheduler.milestones",
       {{"scheduler.name=multistep"},
        "[1, 2]",
        true,
        [](P& p) { CHECK(lr(p) == Approx(kLr * 0.01)); }}},
      {"scheduler.gamma",
       {{"scheduler.name=multistep", "scheduler.milestones=[1]"},
        "0.5",
        true,
        [](P& p) { CHECK(lr(p) == Approx(kLr * 0.5)); }}},
      {"scheduler.t_max",
       {{"scheduler.name=cosine"},
        "4",
        true,  // halfway through a period of 4: the mean
        [](P& p) { CHECK(lr(p) == Approx(kLr * 0.5)); }}},
      {"scheduler.eta_min",
       {{"scheduler.name=cosine"},
        "0.2",
        true,  // the run's 2 steps are cosine's whole period
        [](P& p) { CHECK(lr(p) == Approx(kLr * 0.2)); }}},
      {"unroll_steps", {{}, "3", false, [](P& p) { CHECK(p.config().unroll_steps() == 3); }}},
      {"warmup_steps", {{}, "4", false, [](P& p) { CHECK(p.config().warmup_steps() == 4); }}},
      {"roll_back", {{}, "true", false, [](P& p) { CHECK(p.config().roll_back()); }}},
      {"gradient_clipping",
       {{}, "2.5", false, [](P& p) { CHECK(p.config().gradient_clipping() == 2.5); }}},
      {"gradient_accumulation",
       {{}, "2", false, [](P& p) { CHECK(p.config().gradient_accumulation() == 2); }}},
      {"precision",
       {{}, "bf16", false, [](P& p) { CHECK(p.config().precision() == mlo::Precision::kBF16); }}},
      {"checkpointing.strategy",
       {{},
        "sqrt",
        false,
        [](P& p) { CHECK(p.config().checkpointing().strategy() == mlo::Checkpointing::kSqrt); }}},
      {"checkpointing.segments",
       {{}, "3", false, [](P& p) { CHECK(p.config().checkpointing().segments() == 3); }}},
      {"checkpointing.budget_bytes",
       {{}, "4096", false, [](P& p) { CHECK(p.config().checkpointing().budget_bytes() == 4096); }}},
      {"checkpointing.budget_fraction",
       {{},
        "0.25",
        false,
        [](P& p) { CHECK(p.config().checkpointing().budget_fraction() == 0.25); }}},
      {"checkpointing.max_overhead",
       {{}, "0.5", false, [](P& p) { CHECK(p.config().checkpointing().max_overhead() == 0.5); }}},
      {"checkpointing.cost_model.keep_param_grads",
       {{},
        "false",
        false,
        [](P& p) { CHECK_FALSE(p.config().checkpointing().cost_model().keep_param_grads()); }}},
      {"checkpointing.profile.repeats",
       {{}, "3", false, [](P& p) { CHECK(p.config().checkpointing().profile().repeats() == 3); }}},
      {"checkpointing.profile.process_cpu_time",
       {{},
        "true",
        false,
        [](P& p) { CHECK(p.config().checkpointing().profile().process_cpu_time()); }}},
      {"loss_scaling.enabled", {{}, "true", false, [](P& p) {
         REQUIRE(p.config().loss_scaling());
         CHECK(p.config().loss_scaling()->init_scale() == mlo::LossScaling().init_scale());
       }}},
      {"loss_scaling.init_scale",
       {{"loss_scaling.enabled=true"},
        "1024.0",
        false,
        [](P& p) { CHECK(p.config().loss_scaling().value().init_scale() == 1024); }}},
      {"loss_scaling.growth_factor",
       {{"loss_scaling.enabled=true"},
        "4.0",
        false,
        [](P& p) { CHECK(p.config().loss_scaling().value().growth_factor() == 4); }}},
      {"loss_scaling.backoff_factor",
       {{"loss_scaling.enabled=true"},
        "0.25",
        false,
        [](P& p) { CHECK(p.config().loss_scaling().value().backoff_factor() == 0.25); }}},
      {"loss_scaling.growth_interval",
       {{"loss_scaling.enabled=true"},
        "10",
        false,
        [](P& p) { CHECK(p.config().loss_scaling().value().growth_interval() == 10); }}},
      {"method", {{}, "cg", false, [](P& p) { CHECK(p.config().method().name() == "cg"); }}},
      {"log_step", {{}, "7", false, [](P& p) { CHECK(p.config().log_step() == 7); }}},
      {"data_parallel",
       {{}, "false", false, [](P& p) { CHECK_FALSE(p.config().data_parallel()); }}},
      {"allow_unused_parameters",
       {{}, "true", false, [](P& p) { CHECK(p.config().allow_unused_parameters()); }}},
      // (built only: the engine refuses it on a CPU model at initialization)
      {"offload",
       {{"engine.strategy=zero3"}, "cpu", false,
        [](P& p) { CHECK(p.config().offload() == mlo::Offload::kCpu); }}},
  };
}

// A value of a method option other than its default, of the same type as `text`.
std::string other_value(const std::string& key, const std::string& text) {
  if (text == "true") return "false";
  if (text == "false") return "true";
  if (key == "unrolled.checkpointing") return text == "none" ? "binomial" : "none";
  if (key == "darts.mode" || key == "sama.mode" || key == "neumann.mode" || key == "cg.mode") {
    return "jvp";
  }
  if (key == "unrolled.budget_bytes") return "100000000";  // room for a few inner states
  if (text.find_first_not_of("0123456789") == std::string::npos) {
    return std::to_string(std::stoll(text) + 2);  // snapshots 0 -> 2, iterations 1 -> 3
  }
  return std::to_string(std::stod(text) * 0.5);
}

// The reweighter's parameters after training the pair with `overrides` (the reweighter on
// plain SGD, so that a hypergradient's scale shows in its step).
std::vector<torch::Tensor> trained_upper(const std::vector<std::string>& overrides) {
  std::vector<std::string> all = {"problems.reweighter.optimizer.name=sgd",
                                  "problems.reweighter.optimizer.lr=0.1"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  auto experiment = mlo::run::make_experiment(
      mlo::run::parse_run_config(mlo_test::kTinyReweighting, "k.yaml", all));
  experiment->engine().run();
  std::vector<torch::Tensor> out;
  for (const auto& t : experiment->problem("reweighter")->parameters())
    out.push_back(t.detach().clone());
  return out;
}

// Options that change how a method computes, not what (memory, exact restoring, forward or
// reverse mode, a size limit the pair is below either way): the trained upper equals the
// default's up to rounding (darts.mode, sama.mode: up to the finite difference's error, checked
// on their own). Every other option changes the hypergradient.
// cg.alpha scales both sides of CG's system, so its iterates do not depend on it (cg.h).
bool same_math(const std::string& key) {
  return key == "darts.exact_restore" || key == "cg.alpha" || key.rfind("unrolled.", 0) == 0 ||
         key == "neumann.mode" || key == "cg.mode" || key == "forward.max_hyperparameters";
}

// The largest |a - b| over the tensors, relative to the largest |b|.
double relative_difference(const std::vector<torch::Tensor>& a,
                           const std::vector<torch::Tensor>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, (a[i] - b[i]).abs().max().item<double>());
    scale = std::max(scale, b[i].abs().max().item<double>());
  }
  return diff / scale;
}

}  // namespace

// Every key of problems.<name> with its default: the generic ones and each registered method's.
std::map<std::string, std::string> problem_keys() {
  std::map<std::string, std::string> keys;
  for (const auto& method : mlo::method_names()) {
    mlo::run::ProblemSection section;
    section.config.method(method);
    const auto values = mlo::field_values([&](mlo::Fields& f) { section.visit(f); });
    for (const auto& [key, value] : values) {
      if (key == "method") continue;  // (the default's name, below)
      keys.emplace(key, value);
    }
  }
  keys["method"] = mlo::kDefaultMethod;
  return keys;
}

// Whether two key values are the same: numerically where both are numbers ("150" and
// "150.000000"), else as text.
bool same_value(const std::string& a, const std::string& b) {
  char* end_a = nullptr;
  char* end_b = nullptr;
  const double x = std::strtod(a.c_str(), &end_a);
  const double y = std::strtod(b.c_str(), &end_b);
  if (!a.empty() && !b.empty() && *end_a == '\0' && *end_b == '\0') return x == y;
  return a == b;
}

// A value of an engine key other than its default.
std::string other_engine_value(const std::string& key, const std::string& text) {
  if (key == "early_stopping.metric") return "valid/acc";
  if (key == "early_stopping.mode") return "max";
  if (key == "strategy") return "distributed";
  if (key == "backend") return "nccl";
  return other_value(key, text);
}

TEST_CASE("Generic keys: a YAML file's defaults are the C++ defaults, key for key", "[run][config]") {
  // An experiment without defaults of its own (hpo); only the keys the file sets differ.
  const auto config = mlo::run::parse_run_config(
      "experiment: hpo\nproblems: {inner: {}, outer: {}}\n", "defaults.yaml");
  mlo::EngineConfig engine = config.engine;
  mlo::EngineConfig cpp_engine;
  CHECK(mlo::field_values([&](mlo::Fields& f) { engine.visit(f); }) ==
        mlo::field_values([&](mlo::Fields& f) { cpp_engine.visit(f); }));
  mlo::RunOptions run = config.run;
  mlo::RunOptions cpp_run;
  CHECK(mlo::field_values([&](mlo::Fields& f) { run.visit(f); }) ==
        mlo::field_values([&](mlo::Fields& f) { cpp_run.visit(f); }));
  size_t keys = 0;
  for (const auto& name : {"inner", "outer"}) {
    mlo::ProblemConfig read = config.problems.at(name).config;
    mlo::ProblemConfig cpp;
    const auto read_values = mlo::field_values([&](mlo::Fields& f) { read.visit(f); });
    CHECK(read_values == mlo::field_values([&](mlo::Fields& f) { cpp.visit(f); }));
    keys = read_values.size();
  }
  const size_t engine_keys =
      mlo::field_values([&](mlo::Fields& f) { cpp_engine.visit(f); }).size() +
      mlo::field_values([&](mlo::Fields& f) { cpp_run.visit(f); }).size();
  WARN("keys with the same default in C++ and YAML: " << engine_keys << " of the engine and the "
       "run, " << keys << " of a problem (the default method's)");
  CHECK(engine_keys >= 10);
  CHECK(keys >= 20);
}

TEST_CASE("Generic keys: every key of engine reaches the built engine", "[run][config]") {
  mlo::EngineConfig defaults;
  const auto keys = mlo::field_values([&](mlo::Fields& f) { defaults.visit(f); });
  int checked = 0;
  for (const auto& [key, default_text] : keys) {
    const std::string value = other_engine_value(key, default_text);
    CAPTURE(key, default_text, value);
    REQUIRE(value != default_text);
    std::vector<std::string> overrides = {"engine." + key + "=" + value};
    if (key.rfind("early_stopping.", 0) == 0 && key != "early_stopping.enabled") {
      overrides.push_back("engine.early_stopping.enabled=true");
      overrides.push_back("engine.valid_step=1");
    }
    if (key == "early_stopping.enabled") overrides.push_back("engine.valid_step=1");
    const auto config =
        mlo::run::parse_run_config(mlo_test::kTinyReweighting, "engine.yaml", overrides);
    const auto experiment = mlo::run::make_experiment(config);
    mlo::EngineConfig built = experiment->engine().config();
    const auto values = mlo::field_values([&](mlo::Fields& f) { built.visit(f); });
    CHECK(same_value(values.at(key), value));
    ++checked;
  }
  CHECK(checked == static_cast<int>(keys.size()));
}

TEST_CASE("Generic keys: every key of problems.<name> reaches the built problem", "[run][config]") {
  const auto keys = problem_keys();
  const auto table = cases();
  const auto methods = mlo::method_names();
  std::map<std::string, std::vector<torch::Tensor>> method_defaults;  // trained upper, by method
  int checked = 0;
  for (const auto& entry : keys) {
    const std::string& key = entry.first;
    const std::string default_text = entry.second;
    CAPTURE(key, default_text);
    const std::string section = key.substr(0, key.find('.'));
    const bool method_key = key.find('.') != std::string::npos &&
                            std::find(methods.begin(), methods.end(), section) != methods.end();
    if (method_key) {
      // A method's option acts once the method is selected: the built options carry the value,
      // and the method the engine builds from them computes with it.
      const std::string option = key.substr(section.size() + 1);
      const std::string value = other_value(key, default_text);
      std::vector<std::string> overrides = {"problems.classifier.method=" + section,
                                            "problems.classifier." + key + "=" + value};
      if (key == "unrolled.snapshots" || key == "unrolled.budget_bytes") {
        overrides.push_back("problems.classifier.unrolled.checkpointing=binomial");
      }
      CAPTURE(overrides);
      const auto config =
          mlo::run::parse_run_config(mlo_test::kTinyReweighting, "keys.yaml", overrides);
      const auto experiment = mlo::run::make_experiment(config);
      const auto options = experiment->problem("classifier")->config().method().clone();
      REQUIRE(options->name() == section);
      const auto built = mlo::field_values([&](mlo::Fields& f) { options->visit(f); });
      const auto read = config.problems.at("classifier").config.method().clone();
      const auto given = mlo::field_values([&](mlo::Fields& f) { read->visit(f); });
      REQUIRE(built.count(option));
      CHECK(built.at(option) != default_text);
      CHECK(built.at(option) == given.at(option));

      if (!method_defaults.count(section)) {
        method_defaults[section] = trained_upper({"problems.classifier.method=" + section});
      }
      const double difference =
          relative_difference(trained_upper(overrides), method_defaults[section]);
      INFO("trained reweighter vs the method's defaults: relative difference " << difference);
      if (key == "darts.mode" || key == "sama.mode") {
        // (the exact product against the float32 finite difference at alpha 0.01: the key
        // reaches the method, and both train alike)
        CHECK(difference > 0);
        CHECK(difference < 1e-2);
      } else if (same_math(key)) {
        CHECK(difference < 1e-5);
      } else {
        CHECK(difference > 1e-6);
      }
      ++checked;
      continue;
    }
    const auto found = table.find(key);
    if (found == table.end()) {
      FAIL("generic key problems.<name>." << key
                                          << " has no check that it reaches the built "
                                             "problem: add one to this test");
    }
    const Case& c = found->second;
    // Schedules act on the lower (leaf) problem and on the upper one, whose optimizer steps the
    // engine counts from the lower's unroll: 4 classifier steps unrolled by 2 give the
    // reweighter 2, as the classifier takes in the plain 2-step run.
    const std::vector<std::string> targets =
        c.run ? std::vector<std::string>{"classifier", "reweighter"}
              : std::vector<std::string>{"classifier"};
    for (const auto& target : targets) {
      std::vector<std::string> overrides;
      if (target == "reweighter") {
        overrides = {"engine.train_iters=4", "problems.classifier.unroll_steps=2",
                     "problems.reweighter.optimizer.name=sgd",
                     "problems.reweighter.optimizer.lr=0.05"};
      }
      // A case that only builds the pair runs long enough for every problem to take an
      // optimizer step under any value of its key (the configuration check asks that).
      if (!c.run) overrides.push_back("engine.train_iters=20");
      // (a case's overrides are the problem's keys, or engine keys it needs: "engine.strategy")
      for (const auto& o : c.overrides) {
        overrides.push_back(o.rfind("engine.", 0) == 0 ? o : "problems." + target + "." + o);
      }
      overrides.push_back("problems." + target + "." + key + "=" + c.value);
      CAPTURE(target, overrides);
      auto experiment = mlo::run::make_experiment(
          mlo::run::parse_run_config(mlo_test::kTinyReweighting, "keys.yaml", overrides));
      if (c.run) {
        experiment->engine().run();
        CHECK(experiment->problem(target)->optimizer_steps() == 2);
      }
      c.check(*experiment->problem(target));
    }
    ++checked;
  }
  // Every key was visited: the generic ones above and each registered method's options.
  CHECK(checked == static_cast<int>(keys.size()));
  CHECK(checked >= static_cast<int>(table.size()) + 10);
}

}  // namespace generic_keys_test
