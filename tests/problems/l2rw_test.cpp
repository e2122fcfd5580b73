// Learning to Reweight (Ren et al. 2018): the weights are the clamped, normalized alignments of
// each sample's gradient with the meta gradient.
#include "problems/reweighting/l2rw.h"
#include "problems/reweighting/reweighting.h"

#include <mlo/mlo.h>
#include <mlo/memory/precision.h>
#include <mlo/nn/chain.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

namespace l2rw_test {

namespace rw = mlo::problems::reweighting;

namespace {

mlo::nn::Chain tiny_model() {
  torch::manual_seed(3);
  mlo::nn::Chain chain;
  chain->push_back("fc1", torch::nn::Linear(5, 8))
      .push_back("act", torch::nn::Functional(torch::tanh))
      .push_back("head", torch::nn::Linear(8, 3));
  chain->to(torch::kDouble);
  return chain;
}

// u_i = max(grad l_i . grad L_meta, 0), normalized, with every per-sample gradient by autograd.
torch::Tensor oracle(mlo::nn::Chain& chain, const mlo::Batch& train, const mlo::Batch& meta) {
  const auto params = chain->parameters();
  const auto meta_loss = torch::cross_entropy_loss(chain->forward(meta.data), meta.target);
  const auto v = torch::autograd::grad({meta_loss}, params);
  std::vector<double> u;
  for (int64_t i = 0; i < train.data.size(0); ++i) {
    const auto li = torch::cross_entropy_loss(chain->forward(train.data.slice(0, i, i + 1)),
                                              train.target.slice(0, i, i + 1));
    const auto gi = torch::autograd::grad({li}, params);
    double dot = 0;
    for (size_t k = 0; k < gi.size(); ++k) dot += (gi[k] * v[k]).sum().item<double>();
    u.push_back(std::max(dot, 0.0));
  }
  auto t = torch::tensor(u, torch::kDouble);
  return t / t.sum();
}

}  // namespace

TEST_CASE("L2RW: weights are the clamped, normalized gradient alignments with the meta set",
          "[problems][reweighting]") {
  auto chain = tiny_model();
  torch::manual_seed(4);
  const mlo::Batch train(torch::randn({10, 5}, torch::kDouble), torch::randint(3, {10}));
  const mlo::Batch meta(torch::randn({6, 5}, torch::kDouble), torch::randint(3, {6}));
  const auto want = oracle(chain, train, meta);
  std::vector<torch::Tensor> before;
  for (const auto& p : chain->parameters()) before.push_back(p.detach().clone());
  const auto got = rw::l2rw_weights([&](const torch::Tensor& x) { return chain->forward(x); },
                                    chain->parameters(), train, meta, /*alpha=*/1e-4);
  INFO("got " << got << "\nwant " << want);
  REQUIRE(got.sizes() == want.sizes());
  CHECK((got - want).abs().max().item<double>() < 1e-7);
  CHECK(got.sum().item<double>() == Approx(1.0).epsilon(1e-12));
  CHECK(got.min().item<double>() >= 0.0);
  // Some samples disagree with the meta set and get exactly zero weight (the clamp is active).
  CHECK(got.eq(0).sum().item<int64_t>() > 0);
  // The parameters come back bit for bit.
  const auto after = chain->parameters();
  for (size_t i = 0; i < before.size(); ++i) CHECK(torch::equal(before[i], after[i]));
}

TEST_CASE("L2RW: the classifier's loss is sum_i w_i l_i with those weights",
          "[problems][reweighting]") {
  auto chain = tiny_model();
  torch::manual_seed(5);
  const mlo::Batch train(torch::randn({10, 5}, torch::kDouble), torch::randint(3, {10}));
  const mlo::Batch meta(torch::randn({6, 5}, torch::kDouble), torch::randint(3, {6}));
  const auto w = oracle(chain, train, meta);
  rw::Classifier classifier("classifier", mlo::ProblemConfig());
  classifier.module(chain).optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
  classifier.weighting(rw::L2rwOptions([&] { return meta; }).alpha(1e-4));
  classifier.num_classes = 3;
  const auto losses =
      torch::cross_entropy_loss(chain->forward(train.data), train.target, {}, at::Reduction::None);
  const double want = (w * losses).sum().item<double>();
  CHECK(classifier.training_step(train).item<double>() == Approx(want).epsilon(1e-7));
  CHECK(classifier.metrics().at("weight_mean") == Approx(0.1).epsilon(1e-9));  // 1 / N
  CHECK(classifier.metrics().count("wclass/0") == 1);
}

TEST_CASE("L2RW: a zero meta gradient gives zero weights; alpha must be positive",
          "[problems][reweighting]") {
  auto chain = tiny_model();
  const mlo::Batch train(torch::randn({4, 5}, torch::kDouble), torch::randint(3, {4}));
  const mlo::Batch meta(torch::randn({2, 5}, torch::kDouble), torch::randint(3, {2}));
  auto zero = [&](const torch::Tensor& x) { return chain->forward(x) * 0.0; };
  CHECK(rw::l2rw_weights(zero, chain->parameters(), train, meta).abs().sum().item<double>() == 0.0);
  auto model = [&](const torch::Tensor& x) { return chain->forward(x); };
  CHECK_THROWS_AS(rw::l2rw_weights(model, chain->parameters(), train, meta, 0.0), mlo::Error);
}

TEST_CASE("L2RW under bf16: the look-ahead forwards see their perturbations",
          "[problems][reweighting][precision]") {
  // Inside the classifier's autocast region the meta forward casts the (float) weights to bf16
  // and autocast would keep those casts for the region: the look-ahead forwards at w +- h v
  // would then run at w, and every weight would be 0. They must match the float32 weights of
  // the same finite difference up to bf16 rounding.
  // An all-convolution net, as in the review's reproduction (convolutions are autocast to bf16
  // on the CPU with their weight casts cached).
  torch::manual_seed(3);
  mlo::nn::Chain chain;
  chain->push_back("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)))
      .push_back("act", torch::nn::Functional(torch::tanh))
      .push_back("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(4, 3, 3)))
      .push_back("pool", torch::nn::Functional([](const torch::Tensor& x) {
                   return x.mean({2, 3});
                 }));
  torch::manual_seed(4);
  const mlo::Batch train(torch::randn({10, 1, 6, 6}), torch::randint(3, {10}));
  const mlo::Batch meta(torch::randn({6, 1, 6, 6}), torch::randint(3, {6}));
  auto model = [&](const torch::Tensor& x) { return chain->forward(x); };
  // A step of length 1 along the meta gradient: large enough to show through bf16's 8 bits.
  const double alpha = 1.0;
  const auto fp32 = rw::l2rw_weights(model, chain->parameters(), train, meta, alpha);
  torch::Tensor bf16;
  {
    mlo::memory::AutocastGuard autocast(mlo::Precision::kBF16, c10::kCPU);
    bf16 = rw::l2rw_weights(model, chain->parameters(), train, meta, alpha);
  }
  INFO("fp32 " << fp32 << "\nbf16 " << bf16);
  REQUIRE(fp32.sum().item<double>() == Approx(1.0).epsilon(1e-6));
  CHECK(bf16.sum().item<double>() == Approx(1.0).epsilon(1e-6));  // not all zero
  // Each weight within 0.05 of the float32 one (bf16 keeps ~3 significant digits of each loss).
  CHECK((bf16 - fp32).abs().max().item<double>() < 0.05);
}

}  // namespace l2rw_test
