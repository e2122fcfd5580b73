// Memory report: the exact meter's table (per problem and phase) and the parameter footprint for
// the HPO pair and for a small-CNN data-reweighting pair. Data: the HPO scenario's synthetic
// logistic-regression data; random "synthetic" Fashion-MNIST-shaped batches for the CNN pair.
#include "problems/hpo/logreg.h"
#include "problems/reweighting/reweighting.h"

#include <mlo/memory/footprint.h>
#include <mlo/memory/meter.h>
#include <mlo/mlo.h>
#include <mlo/nn/cnn.h>
#include <mlo/nn/mwn.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <cstdio>

namespace rw = mlo::problems::reweighting;
namespace hpo = mlo::problems::hpo;

namespace {

void report(const char* title, mlo::Engine& engine) {
  std::printf("== %s\n%s", title, engine.memory_meter()->table().c_str());
  std::vector<std::pair<std::string, mlo::memory::Footprint>> rows;
  for (const auto& p : engine.problems()) rows.emplace_back(p->name(), p->footprint());
  std::printf("%s\n", mlo::memory::footprint_table(rows).c_str());
}

}  // namespace

int main() {
  torch::set_num_threads(1);
  spdlog::set_level(spdlog::level::warn);
  torch::manual_seed(0);
  {
    const auto data = hpo::make_logreg_data();
    auto pair = hpo::make_logreg_hpo(
        data, mlo::ProblemConfig().unroll_steps(100).method(mlo::NeumannOptions().iterations(5)));
    mlo::Engine engine(mlo::EngineConfig().train_iters(200).track_memory(true));
    engine.add(pair.outer).add(pair.inner).link(pair.outer, pair.inner);
    engine.run();
    report("HPO pair (logistic regression, 20 features, 500 samples, neumann 5)", engine);
  }
  {
    const int64_t batch = 64;
    auto batches = [&](int64_t n) {
      std::vector<mlo::Batch> out;
      for (int64_t i = 0; i < n; ++i) {
        out.emplace_back(torch::randn({batch, 1, 28, 28}), torch::randint(10, {batch}));
      }
      return out;
    };
    auto classifier = std::make_shared<rw::Classifier>(
        "classifier", mlo::ProblemConfig().method(mlo::DartsOptions()));
    classifier->module(mlo::nn::cnn())
        .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1).momentum(0.9))
        .data(batches(4));
    auto reweighter = std::make_shared<rw::Reweighter>("reweighter");
    reweighter->module(mlo::nn::MWN(100))
        .optimizer<torch::optim::Adam>(torch::optim::AdamOptions(1e-3))
        .data(batches(2));
    classifier->weighting(rw::WeightNetOptions(reweighter.get()));
    mlo::Engine engine(mlo::EngineConfig().train_iters(5).track_memory(true));
    engine.add(reweighter).add(classifier).link(reweighter, classifier);
    engine.run();
    report("CNN reweighting pair (synthetic 1x28x28, batch 64, darts, unroll 1)", engine);
  }
}
