// [cuda] ZeRO-3 on a GPU, one process (a group of one rank): the sharded run equals the plain
// one, also with its shards offloaded to pinned host memory (offload: cpu), where the optimizer
// steps the shards on the CPU (element-wise double arithmetic on either device: 1e-12).
#include <mlo/mlo.h>
#include <mlo/nn/chain.h>
#include <support/chain_fit.h>

#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace {

using mlo_test::ChainFit;  // (tests/support/chain_fit.h)

// A trained fit and the engine that trained it (which holds the problem's level: its trainable
// tensors, this rank's shards under zero3).
struct Trained {
  std::unique_ptr<mlo::Engine> engine;
  std::shared_ptr<ChainFit> problem;
};

// Trains the fit for 6 steps on cuda:0 under `strategy`, with `offload`.
Trained train(mlo::dist::Strategy strategy, mlo::Offload offload) {
  const torch::Device gpu(torch::kCUDA, 0);
  torch::manual_seed(7);
  mlo::nn::Chain chain;
  chain->push_back("first", torch::nn::Linear(3, 8))
      .push_back("act", torch::nn::Functional(torch::tanh))
      .push_back("second", torch::nn::Linear(8, 1));
  chain->to(gpu, torch::kDouble);
  auto p = std::make_shared<ChainFit>("fit", mlo::ProblemConfig().offload(offload));
  p->module(chain).optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.05).momentum(0.9));
  std::vector<mlo::Batch> batches;
  for (int i = 0; i < 3; ++i) {
    batches.emplace_back(torch::randn({6, 3}, torch::TensorOptions(torch::kDouble)).to(gpu));
  }
  p->data(batches);
  auto engine = std::make_unique<mlo::Engine>(
      mlo::EngineConfig().train_iters(6).strategy(strategy));
  engine->add(p);
  engine->run();
  return Trained{std::move(engine), p};
}

}  // namespace

TEST_CASE("CUDA: zero3 on one GPU equals plain training, with and without offload cpu",
          "[cuda][dist]") {
  const auto plain = train(mlo::dist::Strategy::kDefault, mlo::Offload::kNone).problem;
  const auto want = plain->full_parameters();
  for (const auto offload : {mlo::Offload::kNone, mlo::Offload::kCpu}) {
    INFO("offload " << mlo::to_string(offload));
    const Trained trained = train(mlo::dist::Strategy::kZero3, offload);
    const auto& sharded = trained.problem;
    REQUIRE(trained.engine->level(*sharded).shards_parameters());
    for (const auto& shard : sharded->parameters()) {
      CHECK(shard.is_cuda() == (offload == mlo::Offload::kNone));
      if (offload == mlo::Offload::kCpu) CHECK(shard.is_pinned());
    }
    const auto got = sharded->full_parameters();
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      CHECK(got[i].is_cuda());
      const double difference = (got[i] - want[i]).abs().max().item<double>();
      CAPTURE(i, difference);
      CHECK(difference < 1e-12);
    }
  }
}
