// The HPO experiment from YAML (experiment: hpo): with every hypergradient method, learning the
// per-feature L2 weights reaches a validation loss well below the same training with the weights
// frozen, which the experiment trains beside it.
#include <mlo/run/yaml.h>
#include <mlo/run/experiment.h>

#include "problems/hpo/experiment.h"
#include "problems/hpo/logreg.h"
#include "runner.h"
#include "support/scratch.h"

#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <cmath>

namespace hpo_experiment_test {

namespace {

// The scenario of tests/problems/hpo_logreg_test.cpp: 2000 global steps, unroll 100 (20 outer
// steps); seconds.
const char* kHpo = R"(experiment: hpo
name: hpo_test
seed: 0
threads: 1
engine: {train_iters: 2000, valid_step: 0, log_step: 0, save_step: 0}
data: {samples: 1000, test_samples: 500, features: 20, noise: 0.1}
problems:
  inner:
    optimizer: {name: sgd, lr: 0.1}
    unroll_steps: 100
    method: darts  # the other sections are for --set problems.inner.method=...
    darts: {alpha: 0.01}
    neumann: {iterations: 5}
    cg: {iterations: 3, alpha: 0.1}
  outer:
    optimizer: {name: sgd, lr: 1.0, momentum: 0.9}
)";

}  // namespace

TEST_CASE("HPO experiment: every method lowers the validation loss well below frozen weights",
          "[run][hpo]") {
  for (const std::string method : {"darts", "neumann", "cg"}) {
    const auto config =
        mlo::run::parse_run_config(kHpo, "hpo.yaml", {"problems.inner.method=" + method});
    const auto experiment = mlo::run::make_experiment(config);
    REQUIRE(experiment->problem("inner")->config().method().name() == method);
    experiment->engine().run();
    const auto valid = experiment->evaluate(mlo::run::EvalSet::kValid);
    const auto test = experiment->evaluate(mlo::run::EvalSet::kTest);
    const double learned = valid.at("valid/loss"), frozen = valid.at("valid/frozen_loss");
    INFO(method << ": validation loss " << learned << " vs frozen weights " << frozen
                << "; test loss " << test.at("loss") << " vs " << test.at("frozen_loss"));
    WARN(method << ": validation loss " << learned << " vs frozen weights " << frozen
                << "; test loss " << test.at("loss") << " vs " << test.at("frozen_loss"));
    // A clear margin: at least 20% lower than the baseline.
    CHECK(learned < 0.8 * frozen);
    // The weights moved away from their initial 1 and stayed positive.
    const auto weights =
        dynamic_cast<mlo::problems::hpo::HpoExperiment&>(*experiment).weights();
    CHECK(weights.min().item<double>() > 0);
    CHECK((weights - 1).abs().max().item<double>() > 0.1);
  }
}

TEST_CASE("HPO experiment: the frozen baseline is the hand-built pair with frozen weights",
          "[run][hpo]") {
  // The same data, settings and schedule built in code (problems/hpo/logreg.h): the
  // experiment's baseline, which trains as its engine runs, must be that run, not an
  // approximation of it.
  namespace hpo = mlo::problems::hpo;
  // 1200 test points: evaluated in chunks of the training set's 500 (500, 500, 200), their mean
  // must be the loss of all 1200 at once.
  const auto experiment = mlo::run::make_experiment(
      mlo::run::parse_run_config(kHpo, "hpo.yaml", {"data.test_samples=1200"}));
  experiment->engine().run();
  const double baseline = experiment->evaluate(mlo::run::EvalSet::kValid).at("valid/frozen_loss");
  const auto test = experiment->evaluate(mlo::run::EvalSet::kTest);

  const auto data = hpo::make_logreg_data(1000, 20, 0.1, /*seed=*/0, /*test_samples=*/1200);
  auto pair = hpo::make_logreg_hpo(data, mlo::ProblemConfig().unroll_steps(100),
                                   hpo::LogRegHpoOptions().freeze_weights(true));
  mlo::Engine engine(mlo::EngineConfig().train_iters(2000));
  engine.add(pair.outer).add(pair.inner).link(pair.outer, pair.inner);
  engine.run();
  CHECK(baseline == Approx(hpo::validation_loss(pair, data)).epsilon(1e-6));
  {
    torch::NoGradGuard no_grad;
    const auto logits = pair.inner->logits(data.test.data);
    const double whole = torch::nn::functional::binary_cross_entropy_with_logits(
                             logits, data.test.target).item<double>();
    const double accuracy =
        logits.gt(0).to(torch::kFloat).eq(data.test.target).to(torch::kDouble).mean().item<double>();
    CHECK(test.at("frozen_loss") == Approx(whole).epsilon(1e-6));
    CHECK(test.at("frozen_acc") == Approx(accuracy).epsilon(1e-12));
  }
  CHECK(baseline < std::log(2.0));  // it did learn something: better than predicting 1/2
}

TEST_CASE("HPO experiment: the baseline trains with the run, stops at --stop-at and resumes bit "
          "for bit",
          "[run][hpo]") {
  // (nothing trains before the run: an experiment of 50000 steps stopped at 100 is quick)
  const auto config = mlo::run::parse_run_config(
      kHpo, "hpo.yaml", {"engine.train_iters=400", "engine.valid_step=100"});
  const auto whole_dir = mlo_test::scratch_path("hpo_baseline_whole");
  const auto part_dir = mlo_test::scratch_path("hpo_baseline_part");
  mlo::RunOptions options;
  options.progress(false).dir(whole_dir.string());
  const mlo::RunResult whole = mlo::cli::run_experiment(config, options);
  REQUIRE(whole.steps == 400);
  options.dir(part_dir.string()).stop_at(150);
  const mlo::RunResult part = mlo::cli::run_experiment(config, options);
  CHECK(part.interrupted);
  CHECK(part.steps == 150);
  options.stop_at(0).resume(true);
  const mlo::RunResult resumed = mlo::cli::run_experiment(config, options);
  REQUIRE(resumed.steps == 400);
  for (const char* name : {"loss", "acc", "frozen_loss", "frozen_acc"}) {
    CAPTURE(name);
    CHECK(resumed.final.at(name) == whole.final.at(name));  // bitwise
    CHECK(resumed.valid.at(std::string("valid/") + name) ==
          whole.valid.at(std::string("valid/") + name));
  }
  // The frozen weights did learn (their inner model is better than chance) and differ from
  // the learned ones' result.
  CHECK(whole.final.at("frozen_loss") < std::log(2.0));
  CHECK(whole.final.at("frozen_loss") != whole.final.at("loss"));
}

}  // namespace hpo_experiment_test
