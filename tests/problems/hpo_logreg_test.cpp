// The HPO scenario: learning per-feature L2 weights through each hypergradient method beats the
// same training with the weights frozen at 1.
#include "problems/hpo/logreg.h"

#include <mlo/mlo.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

namespace hpo_logreg_test {

namespace hpo = mlo::problems::hpo;

namespace {

// Runs the scenario (2000 global steps, unroll 100) and returns the final validation loss.
double run_scenario(const hpo::LogRegData& data, mlo::ProblemConfig inner_config, bool frozen,
                    double outer_lr = 1.0) {
  torch::manual_seed(1);
  auto pair = hpo::make_logreg_hpo(
      data, inner_config.unroll_steps(100),
      hpo::LogRegHpoOptions().freeze_weights(frozen).outer_lr(outer_lr));
  mlo::Engine engine(mlo::EngineConfig().train_iters(2000));
  engine.add(pair.outer).add(pair.inner).link(pair.outer, pair.inner);
  engine.run();
  return hpo::validation_loss(pair, data);
}

}  // namespace

TEST_CASE("HPO: every method lowers the validation loss below frozen weights", "[problems][hpo]") {
  torch::set_num_threads(1);
  const hpo::LogRegData data = hpo::make_logreg_data(1000, 20, 0.1, /*seed=*/0);
  const double baseline = run_scenario(data, mlo::ProblemConfig(), /*frozen=*/true);

  struct Method {
    std::string name;
    mlo::ProblemConfig config;
    double outer_lr = 1.0;
  };
  const std::vector<Method> methods = {
      {"darts", mlo::ProblemConfig().method(mlo::DartsOptions())},
      {"neumann", mlo::ProblemConfig().method(mlo::NeumannOptions().iterations(5))},
      {"cg", mlo::ProblemConfig().method(mlo::CGOptions().iterations(3).alpha(0.1))},
      // NOTE: SAMA's hypergradient carries the inner optimizer's Jacobian, lr = 0.1 for plain
      // SGD: the outer learning rate is scaled by 1 / 0.1 to take the same steps as darts.
      {"sama", mlo::ProblemConfig().method(mlo::SamaOptions()), 10.0},
      {"unrolled", mlo::ProblemConfig().method(mlo::UnrolledOptions())},
      {"unrolled binomial",
       mlo::ProblemConfig().method(
           mlo::UnrolledOptions().checkpointing(mlo::UnrollCheckpointing::kBinomial))},
  };
  for (const auto& [name, config, outer_lr] : methods) {
    const double learned = run_scenario(data, config, /*frozen=*/false, outer_lr);
    INFO(name << ": validation loss " << learned << " vs frozen weights " << baseline);
    WARN(name << ": validation loss " << learned << " vs frozen weights " << baseline);
    // A clear margin: at least 20% lower than the baseline.
    CHECK(learned < 0.8 * baseline);
  }
}

}  // namespace hpo_logreg_test
