// A hypergradient method defined outside libmlo (examples/fixed_point_method/fixed_point.h):
// exact on the quadratic closed form, selected by its name from YAML with its own keys and
// checks, refused on a top-level problem like a built-in method, and training the HPO
// experiment as well as the built-in implicit methods do.
#include "examples/fixed_point_method/fixed_point.h"

#include <mlo/base/error.h>
#include <mlo/run/yaml.h>
#include <mlo/run/builders.h>
#include <mlo/run/experiment.h>

#include <support/quadratic.h>

#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <string>

namespace user_method_test {

using Catch::Contains;
using fixed_point::FixedPoint;
using fixed_point::FixedPointOptions;

namespace {

const char* kHpo = R"(experiment: hpo
name: user_method_test
seed: 0
threads: 1
engine: {train_iters: 2000, valid_step: 0, log_step: 0, save_step: 0}
data: {samples: 1000, test_samples: 500, features: 20, noise: 0.1}
problems:
  inner:
    optimizer: {name: sgd, lr: 0.1}
    unroll_steps: 100
    method: fixed_point
    fixed_point: {alpha: 1.0, max_iterations: 20, tolerance: 0.001}
  outer:
    optimizer: {name: sgd, lr: 1.0, momentum: 0.9}
)";

}  // namespace

TEST_CASE("User method: fixed-point iteration reaches the closed form B^T A^{-1} v",
          "[run][method]") {
  // Eigenvalues of H in [0.5, 2]: alpha 0.5 contracts by at most 0.75 per iteration.
  auto q = mlo::testing::Quadratic::make(
      mlo::ProblemConfig().method(FixedPointOptions().alpha(0.5).tolerance(1e-10).max_iterations(200)));
  auto method = q.lower->config().method().make();
  auto* fixed = dynamic_cast<FixedPoint*>(method.get());
  REQUIRE(fixed != nullptr);
  const auto out = method->apply({q.v}, *q.lower_level, *q.upper_level);
  REQUIRE(out.size() == 1);
  const double err = mlo::testing::relative_error(out[0], q.exact());
  CAPTURE(err, fixed->last_iterations(), fixed->last_residual());
  CHECK(err < 1e-8);
  CHECK(fixed->last_residual() <= 1e-10);
  // 0.75^k <= 1e-10 needs k >= 81; the iteration stops on the residual, well before 200.
  CHECK(fixed->last_iterations() >= 40);
  CHECK(fixed->last_iterations() < 200);
}

TEST_CASE("User method: selected in YAML by name, with its own keys and checks",
          "[run][method]") {
  const auto config = mlo::run::parse_run_config(kHpo, "fp.yaml");
  const auto& built = config.problems.at("inner").config;
  CHECK(built.method().name() == "fixed_point");
  const auto* options = built.method_as<FixedPointOptions>();
  REQUIRE(options != nullptr);
  CHECK(options->alpha() == 1.0);
  CHECK(options->max_iterations() == 20);
  CHECK(options->tolerance() == 0.001);
  // The resolved config writes the method's section back, and it reads back the same.
  const std::string written = mlo::run::to_yaml(config);
  CHECK_THAT(written, Contains("fixed_point:"));
  const auto again = mlo::run::parse_run_config(written, "resolved.yaml");
  CHECK(again.problems.at("inner").config.method_as<FixedPointOptions>()
            ->tolerance() == 0.001);
  // Its own checks, with the file position of the key.
  REQUIRE_THROWS_WITH(
      mlo::run::parse_run_config(kHpo, "fp.yaml", {"problems.inner.fixed_point.alpha=-1"}),
      Contains("problems.inner.fixed_point.alpha: must be > 0, got -1"));
  REQUIRE_THROWS_WITH(
      mlo::run::parse_run_config(kHpo, "fp.yaml", {"problems.inner.fixed_point.max_iter=3"}),
      Contains("problems.inner.fixed_point.max_iter"));
  // Like any method's keys, they act only on a lower problem.
  REQUIRE_THROWS_WITH(
      mlo::run::parse_run_config(kHpo, "fp.yaml", {"problems.outer.fixed_point.tolerance=0.01"}),
      Contains("problems.outer.fixed_point.tolerance: acts only on a lower problem"));
  REQUIRE_THROWS_WITH(
      mlo::run::parse_run_config(kHpo, "fp.yaml", {"problems.inner.method=fixed_pont"}),
      Contains("problems.inner.method: must be one of") && Contains("fixed_point"));
}

TEST_CASE("User method: options set in code get the same checks at engine start",
          "[run][method]") {
  auto q = mlo::testing::Quadratic::make(
      mlo::ProblemConfig().method(FixedPointOptions().tolerance(-1)));
  q.lower->optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
  q.upper->optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
  mlo::Engine engine(mlo::EngineConfig().train_iters(1));
  engine.add(q.upper).add(q.lower).link(q.upper, q.lower);
  REQUIRE_THROWS_WITH(engine.initialize(),
                      Contains("problem 'lower': fixed_point.tolerance: must be in [0, 1], got -1"));
}

TEST_CASE("User method: a resolved config names only the sections it needs", "[run][method]") {
  // Another method selected: the written file has no fixed_point section, so `mlo` (which does
  // not register this method) reads it.
  std::string yaml = kHpo;
  const std::string section = "    fixed_point: {alpha: 1.0, max_iterations: 20, tolerance: 0.001}\n";
  yaml.replace(yaml.find(section), section.size(), "");
  const auto config = mlo::run::parse_run_config(yaml, "fp.yaml", {"problems.inner.method=neumann"});
  const std::string written = mlo::run::to_yaml(config);
  CHECK_THAT(written, !Contains("fixed_point"));
  CHECK_THAT(written, Contains("neumann:"));
  CHECK_THAT(written, !Contains("unrolled:"));
}

TEST_CASE("User method: trains the HPO experiment well below the frozen weights",
          "[run][method]") {
  const auto config = mlo::run::parse_run_config(kHpo, "fp.yaml");
  const auto experiment = mlo::run::make_experiment(config);
  REQUIRE(experiment->problem("inner")->config().method().name() == "fixed_point");
  experiment->engine().run();
  const auto valid = experiment->evaluate(mlo::run::EvalSet::kValid);
  const double learned = valid.at("valid/loss"), frozen = valid.at("valid/frozen_loss");
  CAPTURE(learned, frozen);
  // The margin the built-in methods meet in hpo_experiment_test: 20% below frozen weights.
  CHECK(learned < 0.8 * frozen);
}

}  // namespace user_method_test
