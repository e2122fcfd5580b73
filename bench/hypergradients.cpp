// Hypergradient methods side by side: wall time and exact peak tensor memory (CPU meter) per
// meta-step (K inner steps of the lower problem, then one step of the upper problem with its
// hypergradient) for darts, neumann, cg, sama and unrolled (none / binomial) at K = 10, 30, 100,
// 1000, on the HPO scenario (problems/hpo) and a small data-reweighting pair
// (problems/reweighting, MLP 32-64-10 with MWN(100)). One run, one thread; times are the
// fastest of `repeats` meta-steps on a fresh pair without metering, memory a separate metered
// meta-step. Prints a Markdown table.
//   build/hypergradients [--repeats N] [--max-k K]
#include "problems/hpo/logreg.h"
#include "problems/reweighting/reweighting.h"

#include <mlo/memory/meter.h>
#include <mlo/mlo.h>
#include <mlo/nn/chain.h>
#include <mlo/nn/mwn.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace hpo = mlo::problems::hpo;
namespace rw = mlo::problems::reweighting;

namespace {

struct Setup {
  std::shared_ptr<mlo::Problem> upper, lower;
};
using Factory = std::function<Setup(const mlo::ProblemConfig&)>;

Setup make_hpo(const mlo::ProblemConfig& config) {
  static const hpo::LogRegData data = hpo::make_logreg_data(1000, 20, 0.1, /*seed=*/0);
  auto pair = hpo::make_logreg_hpo(data, config);
  return {pair.outer, pair.inner};
}

Setup make_reweighting(const mlo::ProblemConfig& config) {
  torch::manual_seed(0);
  static const mlo::Batch train(torch::randn({128, 32}), torch::randint(10, {128}));
  static const mlo::Batch meta(torch::randn({64, 32}), torch::randint(10, {64}));
  mlo::nn::Chain chain;
  chain->push_back("fc1", torch::nn::Linear(32, 64))
      .push_back("act", torch::nn::Functional(torch::tanh))
      .push_back("head", torch::nn::Linear(64, 10));
  auto classifier = std::make_shared<rw::Classifier>("classifier", config);
  classifier->module(chain)
      .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1).momentum(0.9))
      .data(std::vector<mlo::Batch>{train});
  auto reweighter = std::make_shared<rw::Reweighter>("reweighter");
  reweighter->module(mlo::nn::MWN(100))
      .optimizer<torch::optim::Adam>(torch::optim::AdamOptions(1e-3))
      .data(std::vector<mlo::Batch>{meta});
  classifier->weighting(rw::WeightNetOptions(reweighter.get()));
  return {reweighter, classifier};
}

struct Row {
  double ms = 0;         // fastest meta-step
  double peak_mib = 0;   // peak of the metered meta-step
  double hyper_mib = 0;  // the upper's hypergradient phase: its own transient
};

Row measure(const Factory& factory, mlo::ProblemConfig config, int64_t k, int repeats) {
  config.unroll_steps(k);
  Row row;
  {
    Setup s = factory(config);
    mlo::Engine engine(mlo::EngineConfig().train_iters(0));
    engine.add(s.upper).add(s.lower).link(s.upper, s.lower);
    engine.initialize();
    for (int64_t i = 0; i < k; ++i) engine.step();  // warm-up meta-step
    double best = 1e300;
    for (int r = 0; r < repeats; ++r) {
      const auto start = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < k; ++i) engine.step();
      const std::chrono::duration<double, std::milli> took =
          std::chrono::steady_clock::now() - start;
      best = std::min(best, took.count());
    }
    row.ms = best;
  }
  {
    Setup s = factory(config);
    mlo::Engine engine(mlo::EngineConfig().train_iters(0).track_memory(true));
    engine.add(s.upper).add(s.lower).link(s.upper, s.lower);
    engine.initialize();
    for (int64_t i = 0; i < k; ++i) engine.step();
    engine.memory_meter()->reset();
    for (int64_t i = 0; i < k; ++i) engine.step();
    const auto stats = engine.memory_meter()->stats();
    const auto it = stats.find({"engine", "iteration"});
    if (it != stats.end()) row.peak_mib = mlo::memory::to_mib(it->second.peak);
    const auto hyper = stats.find({s.upper->name(), "hypergradient"});
    if (hyper != stats.end()) row.hyper_mib = mlo::memory::to_mib(hyper->second.peak_delta);
  }
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 2;
  int64_t max_k = 1000;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--repeats") == 0)
      repeats = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--max-k") == 0)
      max_k = std::atoll(argv[++i]);
  }
  torch::set_num_threads(1);
  const auto binomial = mlo::UnrolledOptions().checkpointing(mlo::UnrollCheckpointing::kBinomial);
  const std::vector<std::pair<std::string, mlo::ProblemConfig>> methods = {
      {"darts", mlo::ProblemConfig().method(mlo::DartsOptions())},
      {"neumann (5)", mlo::ProblemConfig().method(mlo::NeumannOptions().iterations(5))},
      {"cg (3)", mlo::ProblemConfig().method(mlo::CGOptions().iterations(3).alpha(0.1))},
      {"sama", mlo::ProblemConfig().method(mlo::SamaOptions())},
      {"unrolled none", mlo::ProblemConfig().method(mlo::UnrolledOptions())},
      {"unrolled binomial", mlo::ProblemConfig().method(binomial)},
  };
  const std::vector<std::pair<std::string, Factory>> scenarios = {
      {"hpo (logreg 20 features)", make_hpo},
      {"reweighting (MLP + MWN)", make_reweighting},
  };
  std::printf(
      "| scenario | method | K | ms / meta-step | ms / inner step | peak MiB | "
      "hypergradient MiB |\n|---|---|---|---|---|---|---|\n");
  for (const auto& [scenario, factory] : scenarios) {
    for (int64_t k : {10, 30, 100, 1000}) {
      if (k > max_k) continue;
      for (const auto& [name, config] : methods) {
        const Row row = measure(factory, config, k, repeats);
        std::printf("| %s | %s | %lld | %.2f | %.3f | %.3f | %.3f |\n", scenario.c_str(),
                    name.c_str(), static_cast<long long>(k), row.ms, row.ms / k, row.peak_mib,
                    row.hyper_mib);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
