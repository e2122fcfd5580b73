// Experiments from a configuration: the data splits they use, and settings that must act or be
// refused (never a silent fallback to a default).
#include "support/names.h"
#include "support/tiny_reweighting.h"
#include <mlo/core/config.h>
#include <mlo/base/error.h>
#include <mlo/hypergrad/cg.h>
#include <mlo/memory/meter.h>
#include <mlo/run/yaml.h>
#include <mlo/run/builders.h>
#include <mlo/run/experiment.h>

#include "problems/reweighting/experiment.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>

namespace experiment_test {

using Catch::Matchers::Contains;
using mlo::problems::reweighting::ReweightingExperiment;
using mlo::run::EvalSet;
using mlo::run::make_experiment;
using Settings = ReweightingExperiment::Settings;

namespace {


mlo::run::RunConfig tiny(const std::vector<std::string>& overrides = {}) {
  return mlo::run::parse_run_config(mlo_test::kTinyReweighting, "tiny.yaml", overrides);
}

}  // namespace

TEST_CASE("Enum name tables: to_string and from_string agree; unknown names list the valid ones",
          "[run][config]") {
  for (const auto& name : mlo::enum_names<mlo::Precision>()) {
    CHECK(mlo::to_string(mlo::from_string<mlo::Precision>(name)) == name);
  }
  for (const auto& name : mlo::enum_names<mlo::Checkpointing>()) {
    CHECK(mlo::to_string(mlo::from_string<mlo::Checkpointing>(name)) == name);
  }
  CHECK(mlo::from_string<mlo::Mode>("min") == mlo::Mode::kMin);
  CHECK(mlo::enum_names<mlo::Precision>() == std::vector<std::string>{"fp32", "bf16", "fp16"});
  CHECK(mlo::from_string<mlo::Checkpointing>("min_memory") == mlo::Checkpointing::kMinMemory);
  REQUIRE_THROWS_WITH(mlo::from_string<mlo::Precision>("fp8", "problems.classifier.precision"),
                      Contains("problems.classifier.precision: unknown precision 'fp8'; valid "
                               "names: fp32, bf16, fp16"));
  // Methods are named by the registry (case-sensitive), which lists them on an unknown name.
  REQUIRE_THROWS_WITH(mlo::ProblemConfig().method("Darts"),
                      Contains("unknown hypergradient method 'Darts'; registered hypergradient methods: cg, "
                               "darts, first_order, forward, neumann, sama, unrolled"));
}

TEST_CASE("Experiment: an unknown name in a config built in code is an error, not a default",
          "[run][config]") {
  // The YAML reader refuses these; a RunConfig filled in by a program must not fall back to
  // sgd or no schedule either. (A model is chosen in code by its options type.) (Precision, method and early-stopping mode are typed
  // in code: an enum, a method's options, an enum.)
  struct Case {
    std::function<void(mlo::run::RunConfig&)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](auto& c) { c.problems["reweighter"].scheduler.name = "step"; },
       "problems.reweighter.scheduler.name: unknown scheduler 'step'; valid names: none, "
       "multistep, cosine"},
      {[](auto& c) { c.problems["reweighter"].optimizer.name = "rmsprop"; },
       "problems.reweighter.optimizer.name: unknown optimizer 'rmsprop'; valid names: sgd, adam, "
       "adamw"},
  };
  for (const auto& test : cases) {
    auto config = tiny({"engine.valid_step=1"});
    test.edit(config);
    INFO(test.message);
    REQUIRE_THROWS_WITH(make_experiment(config), Contains(test.message));
  }
}

TEST_CASE("Experiment: checkpointing options from a program are validated once, at the start",
          "[run][config]") {
  // The YAML reader checks these keys itself; a RunConfig filled in by a program carries the
  // memory area's own CheckpointingOptions, which the engine validates before the first step.
  auto config = tiny();
  config.problems["classifier"].config.checkpointing(
      mlo::CheckpointingOptions(mlo::Checkpointing::kUniform).segments(0));
  const auto experiment = make_experiment(config);
  REQUIRE_THROWS_WITH(experiment->engine().step(),
                      Contains("problem 'classifier': checkpointing.segments: must be >= 1, got 0"));
}

TEST_CASE("Experiment: a lower-level setting on the top problem is refused, not ignored",
          "[run][config]") {
  auto config = tiny();
  config.problems["reweighter"].config.unroll_steps(4);
  REQUIRE_THROWS_WITH(make_experiment(config),
                      mlo_test::Names({"problems.reweighter.unroll_steps:", "lower problem"}));
  config = tiny();
  config.problems.erase("reweighter");
  config.problems["classifier"].config.method(mlo::CGOptions().iterations(3));
  REQUIRE_THROWS_WITH(make_experiment(config),
                      mlo_test::Names({"problems.classifier.method:", "lower problem"}));
  // Under a reweighter the classifier's unroll and method act.
  config = tiny({"problems.classifier.unroll_steps=2", "problems.classifier.method=cg"});
  const auto experiment = make_experiment(config);
  CHECK(experiment->problem("classifier")->config().unroll_steps() == 2);
  CHECK(experiment->problem("classifier")->config().method().name() == "cg");
}

TEST_CASE("Experiment: validation is a balanced split of the training data, not the test set",
          "[run][data]") {
  ReweightingExperiment experiment(tiny());
  // valid_size 50 over 10 classes: 5 each, whatever the class's long-tailed training count.
  CHECK(experiment.valid_counts() == std::vector<int64_t>(10, 5));
  // Taken before the long tail: the largest class keeps 60 - 2 (meta) - 5 (validation).
  CHECK(*std::max_element(experiment.train_counts().begin(), experiment.train_counts().end()) ==
        53);

  const auto valid = experiment.evaluate(EvalSet::kValid);
  const auto test = experiment.evaluate(EvalSet::kTest);
  for (const auto& [name, value] : valid) {
    INFO(name);
    CHECK(name.rfind("valid/", 0) == 0);
  }
  for (const char* name : {"valid/acc", "valid/balanced_acc", "valid/loss", "valid/acc/class0"}) {
    CHECK(valid.count(name) == 1);
  }
  CHECK(test.count("acc") == 1);
  CHECK(test.count("balanced_acc") == 1);
  CHECK(test.count("valid/acc") == 0);
  // Different images: 50 validation vs 30 test images give different losses.
  CHECK(valid.at("valid/loss") != test.at("loss"));
  CHECK_THAT(experiment.describe(), Contains("balanced validation set of 50"));
}

TEST_CASE("Experiment: a balanced split reports no rarest-3 accuracy and cannot stop early on it",
          "[run][data]") {
  ReweightingExperiment long_tailed(tiny());
  CHECK(long_tailed.evaluate(EvalSet::kTest).count("rare3_acc") == 1);
  CHECK(long_tailed.evaluate(EvalSet::kValid).count("valid/rare3_acc") == 1);
  ReweightingExperiment balanced(tiny({"data.imbalance=1"}));
  const auto test = balanced.evaluate(EvalSet::kTest);
  CHECK(test.count("rare3_acc") == 0);
  CHECK(test.count("balanced_acc") == 1);
  CHECK(balanced.evaluate(EvalSet::kValid).count("valid/rare3_acc") == 0);
  CHECK_THAT(balanced.report(test, {}), !Contains("rarest 3"));
  CHECK_THAT(long_tailed.report(long_tailed.evaluate(EvalSet::kTest), {}), Contains("rarest 3"));
  REQUIRE_THROWS_WITH(
      ReweightingExperiment(tiny({"data.imbalance=1", "engine.valid_step=1",
                                  "engine.early_stopping.enabled=true",
                                  "engine.early_stopping.metric=valid/rare3_acc"})),
      mlo_test::Names({"engine.early_stopping.metric:", "valid/rare3_acc", "rare classes"}));
}

TEST_CASE("Experiment: data.shuffle_classes false gives the conventional split, class 0 largest",
          "[run][data]") {
  ReweightingExperiment fixed(tiny({"data.shuffle_classes=false"}));
  const auto& counts = fixed.train_counts();
  INFO("counts: " << counts[0] << " " << counts[1] << " ... " << counts[9]);
  CHECK(std::is_sorted(counts.rbegin(), counts.rend()));  // non-increasing by label
  CHECK(counts.front() == 53);
  CHECK(counts.back() == 5);  // floor(53 / 10)
  CHECK(counts.front() > counts[1]);

  // The default shuffles which class is rare (for this seed, class 0 is not the largest).
  ReweightingExperiment shuffled(tiny());
  CHECK(shuffled.train_counts() != counts);
}

TEST_CASE("Experiment: each problem's optimizer steps count warmup, unroll and accumulation, "
          "and its schedule runs over them",
          "[run][config]") {
  // 100 global steps; the classifier unrolls 5 steps after a warmup of 20: the reweighter steps
  // at classifier steps 25, 30, ..., 100, 16 times (not 100 / 5 = 20).
  auto config = tiny({"engine.train_iters=100", "problems.classifier.unroll_steps=5",
                      "problems.classifier.warmup_steps=20"});
  auto steps = mlo::run::optimizer_steps(config);
  CHECK(steps.at("classifier") == 100);
  CHECK(steps.at("reweighter") == 16);
  // Accumulation on both levels: the classifier's period is 5 x 2 = 10 local steps, so the
  // reweighter takes a local step at 30, 40, ..., 100 (8) and an optimizer step every 2.
  config = tiny({"engine.train_iters=100", "problems.classifier.unroll_steps=5",
                 "problems.classifier.warmup_steps=20",
                 "problems.classifier.gradient_accumulation=2",
                 "problems.reweighter.gradient_accumulation=2"});
  steps = mlo::run::optimizer_steps(config);
  CHECK(steps.at("classifier") == 50);
  CHECK(steps.at("reweighter") == 4);

  // Roll-back rewinds each unroll and steps once: the schedule sees one step per unroll.
  config = tiny({"engine.train_iters=12", "problems.classifier.unroll_steps=3",
                 "problems.classifier.roll_back=true"});
  CHECK(mlo::run::optimizer_steps(config).at("classifier") == 4);

  // The counts are the engine's: compare with the steps the built problems really take.
  for (const auto& overrides : std::vector<std::vector<std::string>>{
           {"engine.train_iters=30", "problems.classifier.unroll_steps=4",
            "problems.classifier.warmup_steps=6"},
           {"engine.train_iters=30", "problems.classifier.unroll_steps=2",
            "problems.classifier.gradient_accumulation=3",
            "problems.reweighter.gradient_accumulation=2"},
           {"engine.train_iters=30", "problems.classifier.unroll_steps=4",
            "problems.classifier.warmup_steps=5", "problems.classifier.roll_back=true"}}) {
    CAPTURE(overrides);
    const auto counted = tiny(overrides);
    const auto predicted = mlo::run::optimizer_steps(counted);
    const auto run = make_experiment(counted);
    run->engine().run();
    for (const char* name : {"classifier", "reweighter"}) {
      CAPTURE(name);
      CHECK(run->problem(name)->optimizer_steps() == predicted.at(name));
    }
  }

  // A cosine schedule on the reweighter ends exactly at eta_min with its last optimizer step.
  config = tiny({"engine.train_iters=40", "problems.classifier.unroll_steps=2",
                 "problems.classifier.warmup_steps=10", "problems.reweighter.scheduler.name=cosine",
                 "problems.reweighter.scheduler.eta_min=0.1"});
  REQUIRE(mlo::run::optimizer_steps(config).at("reweighter") == 15);
  const auto experiment = make_experiment(config);
  experiment->engine().run();
  const auto& reweighter = *experiment->problem("reweighter");
  CHECK(reweighter.optimizer_steps() == 15);
  const double lr = reweighter.optimizer().param_groups()[0].options().get_lr();
  CHECK(lr == Approx(0.01 * 0.1).epsilon(1e-12));
}

TEST_CASE("Experiment: evaluation runs in training-sized batches and never sets the memory peak",
          "[run][memory]") {
  // Exact meter around one evaluation of the 50 validation images (no graph), at the default
  // evaluation batch (0: the training batch of 8), at 8 given explicitly, and at 64 (all at once).
  const auto evaluation_peak = [](const std::vector<std::string>& overrides) {
    ReweightingExperiment experiment(tiny(overrides));
    mlo::memory::MemoryMeter meter;
    {
      mlo::memory::MemoryMeter::Active on(meter);
      experiment.evaluate(EvalSet::kValid);
    }
    return meter.peak();
  };
  const int64_t by_default = evaluation_peak({"data.test_batch_size=0"});
  CHECK(by_default == evaluation_peak({"data.test_batch_size=8"}));
  CHECK(by_default < evaluation_peak({"data.test_batch_size=64"}));
  // A training step (forward with a graph and backward on the same batch, and the upper step)
  // holds more than that evaluation: the evaluation is not the run's peak.
  auto experiment = make_experiment(tiny({"engine.track_memory=true"}));
  experiment->engine().initialize();
  for (const auto& p : experiment->engine().problems()) p->train();
  experiment->engine().step();
  INFO("evaluation " << by_default << " B, training step " << experiment->engine().last_step_peak_bytes()
                     << " B");
  CHECK(by_default < experiment->engine().last_step_peak_bytes());
  // The default is 0 (the training batch), not a fixed size.
  CHECK(Settings().data.test_batch_size == 0);
}

}  // namespace experiment_test
