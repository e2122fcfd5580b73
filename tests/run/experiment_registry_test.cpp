// Experiments are plug-ins: registered by name (the ready-made ones and one defined here), picked
// by `experiment:` in YAML, and each validates its own keys with file, line and column.
#include <mlo/base/error.h>
#include <mlo/run/yaml.h>
#include <mlo/run/builders.h>
#include <mlo/run/experiment.h>
#include <mlo/base/fields.h>

#include "support/names.h"
#include "support/toy.h"

#include <catch2/catch.hpp>

#include <algorithm>

namespace experiment_registry_test {

using Catch::Matchers::Contains;
using mlo::run::parse_run_config;

namespace {

// A chain of `toy.levels` scalar problems "p0" (bottom) .. "p<levels-1>" (top), each pulled
// towards `toy.target`; every problem takes its optimizer from problems.p<i>.
class ChainExperiment : public mlo::run::Experiment {
 public:
  static constexpr const char* kName = "test_chain";  // `experiment: test_chain` in YAML
  struct Settings : mlo::run::SettingsFor<Settings> {
    int64_t levels = 2;
    double target = 1.0;
    void visit(mlo::Fields& f) override {
      f.section("toy", [&](mlo::Fields& s) {
        s("levels", levels, mlo::at_least(2));
        s("target", target);
      });
    }
    void check(const mlo::run::RunConfig& c) const override {
      for (int64_t i = 0; i < levels; ++i) {
        const std::string name = "p" + std::to_string(i);
        if (!c.problems.count(name)) c.fail("problems", "needs problem '" + name + "'");
      }
    }
    mlo::run::DependencyConfig default_dependencies(
        const mlo::run::RunConfig& c) const override {
      (void)c;
      mlo::run::DependencyConfig graph;
      for (int64_t i = 0; i + 1 < levels; ++i) {
        graph.u2l["p" + std::to_string(i + 1)] = {"p" + std::to_string(i)};
        graph.l2u["p" + std::to_string(i)] = {"p" + std::to_string(i + 1)};
      }
      return graph;
    }
  };

  explicit ChainExperiment(const mlo::run::RunConfig& config)
      : engine_(config.engine) {
    const auto& settings = config.settings_as<Settings>();
    std::vector<std::shared_ptr<mlo_test::Toy>> chain;
    for (int64_t i = 0; i < settings.levels; ++i) {
      const std::string name = "p" + std::to_string(i);
      const auto& p = config.problems.at(name);
      auto toy = std::make_shared<mlo_test::Toy>(
          name, p.config, nullptr);
      toy->optimizer(mlo::run::make_optimizer(p.optimizer, toy->module(), "problems." + name));
      toy->target = settings.target;
      engine_.add(toy);
      if (!chain.empty()) mlo_test::link(engine_, toy, chain.back());
      chain.push_back(toy);
    }
  }
  mlo::Engine& engine() override { return engine_; }
  mlo::Metrics evaluate(mlo::run::EvalSet set) override {
    return {{set == mlo::run::EvalSet::kValid ? "valid/levels" : "levels",
             static_cast<double>(engine_.problems().size())}};
  }
  std::vector<std::string> metric_names() const override { return {"levels"}; }
  std::string describe() const override { return "a chain of scalar problems"; }

 private:
  mlo::Engine engine_;
};

MLO_REGISTER_EXPERIMENT(ChainExperiment);

const char* kChain = R"(experiment: test_chain
toy:
  levels: 3
  target: 2.5
engine: {train_iters: 4, valid_step: 0}
problems:
  p0: {optimizer: {name: sgd, lr: 0.1}}
  p1: {optimizer: {name: sgd, lr: 0.1}}
  p2: {optimizer: {name: adam, lr: 0.01}}
)";

}  // namespace

TEST_CASE("Registry: the ready-made experiments and a program's own are registered by name",
          "[run][registry]") {
  const auto names = mlo::run::experiment_names();
  for (const char* name : {"hpo", "reweighting", "test_chain"}) {
    INFO(name);
    CHECK(std::count(names.begin(), names.end(), name) == 1);
    CHECK(mlo::run::is_experiment(name));
  }
  CHECK_FALSE(mlo::run::is_experiment("Reweighting"));
  CHECK(std::is_sorted(names.begin(), names.end()));
}

TEST_CASE("Registry: an unknown or missing experiment names the file, line and the registered "
          "ones",
          "[run][registry]") {
  REQUIRE_THROWS_WITH(
      parse_run_config("name: x\nexperiment: reweigthing\n", "x.yaml"),
      mlo_test::Names({"x.yaml:2:13: experiment:", "'reweigthing'", "fewshot, hpo, nas, nas_retrain, "
                                                                  "reweighting, test_chain"}));
  REQUIRE_THROWS_WITH(parse_run_config("name: x\n", "m.yaml"),
                      Contains("m.yaml: experiment: missing") &&
                          Contains("registered experiments: fewshot, hpo, nas, nas_retrain, "
                                   "reweighting, test_chain"));
  mlo::run::RunConfig in_code;
  in_code.experiment = "nope";
  REQUIRE_THROWS_WITH(mlo::run::make_experiment(in_code),
                      Contains("unknown experiment 'nope'; registered experiments: fewshot, "
                               "hpo, nas, nas_retrain, reweighting, test_chain"));
}

namespace {
struct OtherChain : ChainExperiment {
  using ChainExperiment::ChainExperiment;
};
}  // namespace

TEST_CASE("Registry: the same class again is a no-op; another under a taken name an error naming "
          "both places",
          "[run][registry]") {
  auto create = [](const mlo::run::RunConfig& c) -> std::unique_ptr<mlo::run::Experiment> {
    return std::make_unique<ChainExperiment>(c);
  };
  auto settings = []() -> std::unique_ptr<mlo::run::ExperimentSettings> {
    return std::make_unique<ChainExperiment::Settings>();
  };
  const std::type_index chain(typeid(ChainExperiment));
  mlo::run::register_experiment("test_twice", chain, create, settings, "first.cpp:10");
  mlo::run::register_experiment("test_twice", chain, create, settings, "again.cpp:15");
  CHECK_NOTHROW(mlo::run::make_settings("test_twice"));
  mlo::run::register_experiment("test_twice", std::type_index(typeid(OtherChain)), create,
                                settings, "second.cpp:20");
  REQUIRE_THROWS_WITH(mlo::run::make_settings("test_twice"),
                      Contains("the experiment 'test_twice' is registered twice, by two different "
                               "types (first.cpp:10 and second.cpp:20)"));
}

TEST_CASE("Experiment keys: the experiment's settings read, check and write its own section",
          "[run][registry]") {
  const auto config = parse_run_config(kChain, "chain.yaml");
  CHECK(config.settings_as<ChainExperiment::Settings>().levels == 3);
  CHECK(config.settings_as<ChainExperiment::Settings>().target == 2.5);
  // The experiment's default graph: p2 above p1 above p0, so p0 and p1 may take lower settings.
  CHECK_NOTHROW(parse_run_config(kChain, "chain.yaml", {"problems.p1.unroll_steps=2"}));

  // Its own key, its own check, with file:line:col.
  REQUIRE_THROWS_WITH(parse_run_config(kChain, "chain.yaml", {"toy.levels=1"}),
                      mlo_test::Names({"chain.yaml (--set toy.levels=1): toy.levels:", ">= 2"}));
  const std::string low = std::string(kChain).replace(std::string(kChain).find("levels: 3"), 9,
                                                      "levels: 0");
  REQUIRE_THROWS_WITH(parse_run_config(low, "chain.yaml"),
                      mlo_test::Names({"chain.yaml:3:11: toy.levels:", ">= 2"}));
  const std::string typo = std::string(kChain).replace(std::string(kChain).find("target:"), 7,
                                                       "traget:");
  REQUIRE_THROWS_WITH(parse_run_config(typo, "chain.yaml"),
                      mlo_test::Names({"chain.yaml:4:3: toy.traget:", "'target'"}));
  // Its rule across keys names where (the problems' mapping): four levels need p3.
  REQUIRE_THROWS_WITH(parse_run_config(kChain, "chain.yaml", {"toy.levels=4"}),
                      mlo_test::Names({"chain.yaml:7:3: problems:", "'p3'"}));
  // Another experiment's sections are unknown keys here.
  REQUIRE_THROWS_WITH(parse_run_config(std::string(kChain) + "data: {dataset: synthetic}\n",
                                       "chain.yaml"),
                      Contains("chain.yaml:10:1: data: unknown key"));
  // Generic keys are still checked generically inside the experiment's problems.
  REQUIRE_THROWS_WITH(parse_run_config(kChain, "chain.yaml", {"problems.p2.optimizer.lr=0"}),
                      mlo_test::Names({"problems.p2.optimizer.lr:", "> 0"}));

  // The resolved config carries the experiment's section and reads back the same.
  const std::string resolved = mlo::run::to_yaml(config);
  CHECK_THAT(resolved, Contains("toy:") && Contains("levels: 3") && Contains("target: 2.5"));
  CHECK(mlo::run::to_yaml(parse_run_config(resolved, "resolved.yaml")) == resolved);
}

TEST_CASE("Experiment keys: a registered experiment builds and trains from YAML",
          "[run][registry]") {
  const auto experiment =
      mlo::run::make_experiment(parse_run_config(kChain, "chain.yaml", {"toy.target=-1"}));
  CHECK(experiment->evaluate(mlo::run::EvalSet::kValid).at("valid/levels") == 3);
  CHECK(experiment->problem("p2")->optimizer().param_groups().front().options().get_lr() == 0.01);
  const double before = std::static_pointer_cast<mlo_test::Toy>(experiment->problem("p0"))->value();
  experiment->engine().run();
  const double after = std::static_pointer_cast<mlo_test::Toy>(experiment->problem("p0"))->value();
  // p0 is pulled towards toy.target = -1 (from 0.5, its initial value).
  CHECK(after < before);
  REQUIRE_THROWS_WITH(experiment->problem("p9"),
                      Contains("the experiment has no problem 'p9'; its problems: "));
}

TEST_CASE("Experiment keys: the ready-made experiments validate their own sections",
          "[run][registry]") {
  const char* hpo = "experiment: hpo\ndata:\n  features: 0\n";
  REQUIRE_THROWS_WITH(parse_run_config(hpo, "h.yaml"),
                      mlo_test::Names({"h.yaml:3:13: data.features:", ">= 1"}));
  REQUIRE_THROWS_WITH(parse_run_config("experiment: hpo\nproblems:\n  inner: {}\n  outer: {}\n"
                                       "  middle: {}\n",
                                       "h.yaml"),
                      mlo_test::Names({"h.yaml:5:11: problems.middle:", "'inner'", "'outer'", "'middle'"}));
  // The names an experiment declares are checked for it: required ones present, no others.
  REQUIRE_THROWS_WITH(parse_run_config("experiment: hpo\nproblems:\n  inner: {}\n", "h.yaml"),
                      mlo_test::Names({"problems:", "'outer' is missing"}));
  REQUIRE_THROWS_WITH(
      parse_run_config("experiment: reweighting\nproblems:\n  classifier: {}\n  meta: {}\n",
                       "r.yaml"),
      mlo_test::Names({"r.yaml:4:9: problems.meta:", "'classifier'", "'reweighter'", "'meta'"}));
  // Reweighting's model names are its own: the hpo experiment has no `model:` key.
  REQUIRE_THROWS_WITH(
      parse_run_config("experiment: hpo\nproblems:\n  inner:\n    model: {name: cnn}\n", "h.yaml"),
      mlo_test::Names({"h.yaml:4:5: problems.inner.model:", "unknown"}));
  REQUIRE_THROWS_WITH(
      parse_run_config("experiment: reweighting\nproblems:\n  classifier:\n"
                       "    model: {name: vgg}\n",
                       "r.yaml"),
      mlo_test::Names({"r.yaml:4:19: problems.classifier.model.name:", "cnn, mwn, resnet32, resnet50",
                       "'vgg'"}));
  REQUIRE_THROWS_WITH(parse_run_config("experiment: reweighting\ndata: {meta_size: 15}\n"
                                       "problems: {classifier: {}}\n",
                                       "r.yaml"),
                      mlo_test::Names({"r.yaml:2:19: data.meta_size:", "(10)", "15"}));
}

TEST_CASE("Experiment keys: add_problems refuses a configured problem the run does not build",
          "[run][registry]") {
  // The run builds p0..p2 (toy.levels 3); problems.p3 would be validated and then ignored.
  const auto config = parse_run_config(std::string(kChain) + "  p3: {optimizer: {name: sgd}}\n",
                                       "chain.yaml");
  std::vector<mlo::ProblemPtr> built;
  for (int i = 0; i < 3; ++i) {
    const std::string name = "p" + std::to_string(i);
    built.push_back(std::make_shared<mlo_test::Toy>(name, mlo::ProblemConfig(), nullptr));
  }
  mlo::Engine engine(config.engine);
  REQUIRE_THROWS_WITH(mlo::run::add_problems(engine, config, built),
                      Contains("chain.yaml:10:") &&
                          Contains("problems.p3: is configured, but this test_chain run builds "
                                   "no problem of that name (it builds: p0, p1, p2)"));
  // Without p3 they are added and wired from the experiment's default dependencies: p0 under
  // p1 under p2.
  const auto three = parse_run_config(kChain, "chain.yaml");
  mlo::Engine wired(three.engine);
  mlo::run::add_problems(wired, three, built);
  wired.initialize();
  CHECK(wired.problems().size() == 3);
  using Parents = std::vector<mlo::Problem*>;
  CHECK(wired.graph().parents(built[0].get()) == Parents{built[1].get()});
  CHECK(wired.graph().parents(built[1].get()) == Parents{built[2].get()});
  CHECK(wired.graph().parents(built[2].get()).empty());
}

}  // namespace experiment_registry_test
