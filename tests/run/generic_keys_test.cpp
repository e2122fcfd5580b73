// Every generic key of a problem (`problems.<name>.*`, including every registered method's
// section) reaches the problem the experiment builds: the test walks the keys the YAML reader
// knows and, for each, sets a value that is not the default and checks it on the built problem
// (its ProblemConfig, its optimizer, its schedule's learning rates after real steps, its
// method's options). A key the reader accepts without a check here fails the test, so a new
// key cannot be validated and then silently ignored.
#include <mlo/base/fields.h>
#include <mlo/core/problem.h>
#include <mlo/run/experiment.h>
#include <mlo/run/yaml.h>

#include <catch2/catch.hpp>

#include <torch/optim.h>
#include <torch/torch.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

// The reweighting pair on small synthetic data: the classifier (lower, a CNN chain, so that
// checkpointing applies) under the reweighter. Two steps take well under a second.
const char* kTiny = R"(experiment: reweighting
name: generic_keys
seed: 2
threads: 1
engine: {train_iters: 2, valid_step: 0, log_step: 0, save_step: 0}
data: {dataset: synthetic, synthetic_size: 60, synthetic_test_size: 3, imbalance: 10,
       meta_size: 20, valid_size: 50, batch_size: 8, meta_batch_size: 10, test_batch_size: 64}
problems:
  classifier:
    model: {name: cnn}
    optimizer: {name: sgd, lr: 0.1}
  reweighter:
    model: {name: mwn, hidden: 4}
    optimizer: {name: adam, lr: 0.01}
)";

struct Case {
  std::vector<std::string> overrides;  // besides the key's own value, what makes it act
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
       {{"optimizer.name=adam"}, "0.8", false,
        [](P& p) { CHECK(std::get<0>(adam(p).betas()) == 0.8); }}},
      {"optimizer.beta2",
       {{"optimizer.name=adam"}, "0.99", false,
        [](P& p) { CHECK(std::get<1>(adam(p).betas()) == 0.99); }}},
      {"optimizer.eps",
       {{"optimizer.name=adam"}, "0.001", false, [](P& p) { CHECK(adam(p).eps() == 0.001); }}},
      // Schedules: the learning rate after the 2 optimizer steps of a 2-step run.
      {"scheduler.name",
       {{"scheduler.milestones=[1]"}, "multistep", true,
        [](P& p) { CHECK(lr(p) == Approx(0.1 * 0.1)); }}},
      {"scheduler.milestones",
       {{"scheduler.name=multistep"}, "[1, 2]", true,
        [](P& p) { CHECK(lr(p) == Approx(0.1 * 0.01)); }}},
      {"scheduler.gamma",
       {{"scheduler.name=multistep", "scheduler.milestones=[1]"}, "0.5", true,
        [](P& p) { CHECK(lr(p) == Approx(0.1 * 0.5)); }}},
      {"scheduler.t_max",
       {{"scheduler.name=cosine"}, "4", true,  // halfway through a period of 4: the mean
        [](P& p) { CHECK(lr(p) == Approx(0.1 * 0.5)); }}},
      {"scheduler.eta_min",
       {{"scheduler.name=cosine"}, "0.2", true,  // the run's 2 steps are cosine's whole period
        [](P& p) { CHECK(lr(p) == Approx(0.1 * 0.2)); }}},
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
       {{}, "sqrt", false,
        [](P& p) { CHECK(p.config().checkpointing().strategy() == mlo::Checkpointing::kSqrt); }}},
      {"checkpointing.segments",
       {{}, "3", false, [](P& p) { CHECK(p.config().checkpointing().segments() == 3); }}},
      {"checkpointing.budget_bytes",
       {{}, "4096", false, [](P& p) { CHECK(p.config().checkpointing().budget_bytes() == 4096); }}},
      {"checkpointing.budget_fraction",
       {{}, "0.25", false,
        [](P& p) { CHECK(p.config().checkpointing().budget_fraction() == 0.25); }}},
      {"checkpointing.max_overhead",
       {{}, "0.5", false,
        [](P& p) { CHECK(p.config().checkpointing().max_overhead() == 0.5); }}},
      {"method", {{}, "cg", false, [](P& p) { CHECK(p.config().method().name() == "cg"); }}},
      {"log_step", {{}, "7", false, [](P& p) { CHECK(p.config().log_step() == 7); }}},
      {"data_parallel", {{}, "false", false, [](P& p) { CHECK_FALSE(p.config().data_parallel()); }}},
      {"allow_unused_parameters",
       {{}, "true", false, [](P& p) { CHECK(p.config().allow_unused_parameters()); }}},
  };
}

// A value of a method option other than its default, of the same type as `text`.
std::string other_value(const std::string& key, const std::string& text) {
  if (text == "true") return "false";
  if (text == "false") return "true";
  if (key == "unrolled.checkpointing") return text == "none" ? "binomial" : "none";
  if (text.find_first_not_of("0123456789") == std::string::npos) {
    return std::to_string(std::stoll(text) + 2);  // snapshots 0 -> 2, iterations 1 -> 3
  }
  return std::to_string(std::stod(text) * 0.5);
}

}  // namespace

TEST_CASE("Generic keys: every key of problems.<name> reaches the built problem", "[run][config]") {
  mlo::run::ProblemSettings defaults;
  const auto keys =
      mlo::field_values([&](mlo::Fields& f) { mlo::run::visit_problem_keys(f, defaults); });
  const auto table = cases();
  const auto methods = mlo::method_names();
  int checked = 0;
  for (const auto& entry : keys) {
    const std::string& key = entry.first;
    const std::string default_text = entry.second;
    CAPTURE(key, default_text);
    const std::string section = key.substr(0, key.find('.'));
    const bool method_key =
        key.find('.') != std::string::npos &&
        std::find(methods.begin(), methods.end(), section) != methods.end();
    std::vector<std::string> overrides;
    std::function<void(mlo::Problem&)> check;
    bool run = false;
    if (method_key) {
      // A method's option acts once the method is selected: its built options carry the value.
      const std::string option = key.substr(section.size() + 1);
      const std::string value = other_value(key, default_text);
      overrides = {"problems.classifier.method=" + section, "problems.classifier." + key + "=" + value};
      if (key == "unrolled.snapshots" || key == "unrolled.budget_bytes") {
        overrides.push_back("problems.classifier.unrolled.checkpointing=binomial");
      }
      check = [section, option, default_text](mlo::Problem& p) {
        const auto options = p.config().method().clone();
        REQUIRE(options->name() == section);
        const auto built = mlo::field_values([&](mlo::Fields& f) { options->visit(f); });
        REQUIRE(built.count(option));
        CHECK(built.at(option) != default_text);
      };
    } else {
      const auto found = table.find(key);
      if (found == table.end()) {
        FAIL("generic key problems.<name>." << key << " has no check that it reaches the built "
                                                      "problem: add one to this test");
      }
      for (const auto& o : found->second.overrides) overrides.push_back("problems.classifier." + o);
      overrides.push_back("problems.classifier." + key + "=" + found->second.value);
      check = found->second.check;
      run = found->second.run;
    }
    CAPTURE(overrides);
    auto config = mlo::run::parse_run_config(kTiny, "keys.yaml", overrides);
    // The built value differs from the default's, so the check below sees the key act.
    auto experiment = mlo::run::make_experiment(config);
    if (run) experiment->engine().run();
    check(*experiment->problem("classifier"));
    if (method_key) {
      // The built options hold exactly what the reader read from the override.
      const std::string option = key.substr(section.size() + 1);
      auto& read = config.problems.at("classifier").methods.at(section);
      const auto given = mlo::field_values([&](mlo::Fields& f) { read->visit(f); });
      const auto options = experiment->problem("classifier")->config().method().clone();
      const auto built = mlo::field_values([&](mlo::Fields& f) { options->visit(f); });
      CHECK(built.at(option) == given.at(option));
    }
    ++checked;
  }
  // Every key was visited: the generic ones above and each registered method's options.
  CHECK(checked == static_cast<int>(keys.size()));
  CHECK(checked >= static_cast<int>(table.size()) + 10);
}
