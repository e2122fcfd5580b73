// The data-reweighting pair: the classifier's loss is the (normalized) weighted cross-entropy,
// and the reweighter receives a hypergradient through it.
#include "problems/reweighting/reweighting.h"

#include <mlo/mlo.h>
#include <mlo/nn/chain.h>
#include <mlo/nn/mwn.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

namespace rw = mlo::problems::reweighting;

namespace {

struct Pair {
  std::shared_ptr<rw::Classifier> classifier;
  std::shared_ptr<rw::Reweighter> reweighter;
};

Pair make_pair(const mlo::Batch& train, const mlo::Batch& meta) {
  torch::manual_seed(0);
  mlo::nn::Chain chain;
  chain->push_back("fc1", torch::nn::Linear(6, 16))
      .push_back("act", torch::nn::Functional(torch::tanh))
      .push_back("head", torch::nn::Linear(16, 3));
  Pair p;
  p.classifier = std::make_shared<rw::Classifier>("classifier", mlo::ProblemConfig());
  p.classifier->module(chain)
      .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1))
      .data(std::vector<mlo::Batch>{train});
  p.reweighter = std::make_shared<rw::Reweighter>("reweighter");
  p.reweighter->module(mlo::nn::MWN(8))
      .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(1.0))
      .data(std::vector<mlo::Batch>{meta});
  p.classifier->reweighter = p.reweighter;
  p.reweighter->classifier = p.classifier;
  return p;
}

}  // namespace

TEST_CASE("Reweighting: the classifier loss is the weighted cross-entropy", "[problems][reweighting]") {
  torch::manual_seed(1);
  const mlo::Batch train(torch::randn({12, 6}), torch::randint(3, {12}));
  const mlo::Batch meta(torch::randn({9, 6}), torch::randint(3, {9}));
  auto p = make_pair(train, meta);
  const auto logits = p.classifier->logits(train.data);
  const auto losses = torch::cross_entropy_loss(logits, train.target, {}, at::Reduction::None);
  const auto w = p.reweighter->weights(losses.detach());
  REQUIRE(w.sizes() == losses.sizes());

  p.classifier->normalize_weights = true;
  const double normalized = p.classifier->training_step(train).item<double>();
  CHECK(normalized == Approx(((w * losses).sum() / w.sum()).item<double>()).epsilon(1e-6));
  CHECK(p.classifier->metrics().at("weight_mean") == Approx(w.mean().item<double>()));

  p.classifier->normalize_weights = false;
  const double plain = p.classifier->training_step(train).item<double>();
  CHECK(plain == Approx((w * losses).mean().item<double>()).epsilon(1e-6));

  p.classifier->reweighter = nullptr;  // the baseline: the plain mean
  CHECK(p.classifier->training_step(train).item<double>() ==
        Approx(losses.mean().item<double>()).epsilon(1e-6));
}

TEST_CASE("Reweighting: one meta step moves the reweighter along its DARTS hypergradient",
          "[problems][reweighting]") {
  torch::manual_seed(2);
  const mlo::Batch train(torch::randn({16, 6}), torch::randint(3, {16}));
  const mlo::Batch meta(torch::randn({9, 6}), torch::randint(3, {9}));
  auto p = make_pair(train, meta);
  std::vector<torch::Tensor> before;
  for (const auto& t : p.reweighter->parameters()) before.push_back(t.detach().clone());
  mlo::Engine engine(mlo::EngineConfig().train_iters(1));
  engine.add(p.reweighter).add(p.classifier).link(p.reweighter, p.classifier);
  engine.run();
  REQUIRE(p.reweighter->step_count() == 1);
  std::vector<torch::Tensor> after;
  for (const auto& t : p.reweighter->parameters()) after.push_back(t.detach().clone());

  // Recompute the DARTS hypergradient by hand at the reweighter's old parameters and the
  // classifier's stepped ones: v = dL_meta/dw, eps = 0.01/|v|, g(+-) = dL_train(w +- eps v)/dphi.
  auto phi = p.reweighter->parameters();
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < phi.size(); ++i) phi[i].copy_(before[i]);
  }
  auto w = p.classifier->parameters();
  auto v = torch::autograd::grad({p.reweighter->training_step(meta)}, w);
  double norm = 0;
  for (const auto& t : v) norm += t.pow(2).sum().item<double>();
  const double eps = 0.01 / std::sqrt(norm);
  auto shifted_grad = [&](double sign) {
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < w.size(); ++i) w[i].add_(v[i], sign * eps);
    }
    auto g = torch::autograd::grad({p.classifier->training_step(train)}, phi);
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < w.size(); ++i) w[i].sub_(v[i], sign * eps);
    }
    return g;
  };
  const auto plus = shifted_grad(+1), minus = shifted_grad(-1);
  for (size_t i = 0; i < phi.size(); ++i) {
    const auto hyper = (minus[i] - plus[i]) / (2 * eps);
    const auto expected = before[i] - 1.0 * hyper;  // SGD, lr 1
    const double diff = (after[i] - expected).abs().max().item<double>();
    INFO("reweighter parameter " << i << ": max |difference| " << diff);
    CHECK(diff < 1e-4);
  }
  CHECK((after[0] - before[0]).abs().sum().item<double>() > 0);
  CHECK(p.reweighter->metrics().count("acc") == 1);
}
