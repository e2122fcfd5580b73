// The reweighting pair under the forward-mode routes (mlo/hypergrad/forward_mode.h): darts jvp
// through the separable loss of a weight net on a CNN with batch norm, over an accumulation
// window; Hessian-vector products forward-over-reverse on the CNN without and with batch norm
// (which a Chain runs in elementary operations when a backward pass of a tangent follows:
// LibTorch's batch-norm backward has no forward-mode formula).

#include "problems/reweighting/class_mwn.h"
#include "problems/reweighting/reweighting.h"

#include "support/relative_error.h"
#include <mlo/hypergrad/forward_mode.h>
#include <mlo/mlo.h>
#include <mlo/nn/chain.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

namespace reweighting_forward_mode_test {

namespace rw = mlo::problems::reweighting;
using Catch::Matchers::Contains;
using TensorList = std::vector<torch::Tensor>;
using mlo::testing::relative_error;

namespace {

// A small CNN (conv 3x3, [batch norm], relu, max pool, linear to 3 classes) in float64 under a
// class-aware weight net with normalized weights, after one window of `accumulation` batches of
// 8 images (6x6) each; both optimizers have learning rate 0, so the frozen losses are those at
// the current parameters.
struct CnnPair {
  std::vector<mlo::Batch> train;
  mlo::Batch meta;
  mlo::nn::Chain chain;
  rw::ClassMWN net{nullptr};
  std::shared_ptr<rw::Classifier> classifier;
  std::shared_ptr<rw::Reweighter> reweighter;
  std::unique_ptr<mlo::Engine> engine;

  CnnPair(mlo::ProblemConfig config, bool batch_norm, int64_t accumulation, bool freeze = true) {
    torch::manual_seed(21);
    for (int64_t i = 0; i < accumulation; ++i) {
      train.emplace_back(torch::randn({8, 1, 6, 6}, torch::kDouble), torch::randint(3, {8}));
    }
    meta = mlo::Batch(torch::randn({6, 1, 6, 6}, torch::kDouble), torch::randint(3, {6}));
    chain->push_back("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)));
    if (batch_norm) chain->push_back("bn", torch::nn::BatchNorm2d(4));
    chain->push_back("act", torch::nn::Functional(torch::relu))
        .push_back("pool", torch::nn::Functional([](const torch::Tensor& x) {
                     return torch::max_pool2d(x, 2);
                   }))
        .push_back("flat", torch::nn::Flatten())
        .push_back("head", torch::nn::Linear(16, 3));
    chain->to(torch::kDouble);
    net = rw::ClassMWN(8, std::vector<int64_t>{100, 10, 1});
    net->to(torch::kDouble);
    classifier = std::make_shared<rw::Classifier>(
        "classifier", config.gradient_accumulation(accumulation));
    classifier->module(chain)
        .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.0))
        .data(train);
    reweighter = std::make_shared<rw::Reweighter>("reweighter");
    reweighter->module(net)
        .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.0))
        .data(std::vector<mlo::Batch>{meta});
    classifier->weighting(
        rw::WeightNetOptions(reweighter.get()).normalize(true).freeze_inputs(freeze));
    engine = std::make_unique<mlo::Engine>(mlo::EngineConfig().train_iters(accumulation));
    engine->add(reweighter).add(classifier).link(reweighter, classifier);
    engine->run();
  }

  TensorList random_direction() const {
    TensorList v;
    for (const auto& t : classifier->parameters()) v.push_back(torch::randn_like(t));
    return v;
  }

  // The window's loss, computed in the test: the mean over its batches of
  // sum_i c_i l_i / sum_i c_i, c_i = net(l_i frozen, y_i).
  torch::Tensor window_loss() {
    torch::Tensor total = torch::zeros({}, torch::kDouble);
    for (const auto& b : train) {
      const auto losses = torch::cross_entropy_loss(chain->forward(b.data), b.target, {},
                                                    at::Reduction::None);
      const auto c = net->forward(losses.detach().clone().unsqueeze(1), b.target).squeeze(1);
      total = total + (c * losses).sum() / c.sum();
    }
    return total / static_cast<double>(train.size());
  }

  // -d/dphi (dL/dw . v) and H v by double backward.
  TensorList mixed(const TensorList& v) {
    const auto w = classifier->parameters();
    const auto g = torch::autograd::grad({window_loss()}, w, {}, true, true);
    torch::Tensor gv = torch::zeros({}, torch::kDouble);
    for (size_t i = 0; i < g.size(); ++i) gv = gv + (g[i] * v[i]).sum();
    const auto phi = reweighter->parameters();
    auto out = torch::autograd::grad({gv}, phi, {}, false, false, true);
    for (size_t i = 0; i < out.size(); ++i) {
      out[i] = out[i].defined() ? -out[i] : torch::zeros_like(phi[i]);
    }
    return out;
  }
  TensorList hvp(const TensorList& v) {
    const auto w = classifier->parameters();
    const auto g = torch::autograd::grad({window_loss()}, w, {}, true, true);
    torch::Tensor gv = torch::zeros({}, torch::kDouble);
    for (size_t i = 0; i < g.size(); ++i) gv = gv + (g[i] * v[i]).sum();
    return torch::autograd::grad({gv}, w);
  }

  TensorList apply(const TensorList& v) {
    auto method = classifier->config().method().make();
    return method->apply(v, engine->level(*classifier), engine->level(*reweighter));
  }
};

}  // namespace

TEST_CASE("Forward mode: darts jvp on class_mwn over a CNN with batch norm is the exact product",
          "[problems][reweighting][hypergrad]") {
  const int64_t accumulation = GENERATE(1, 3);
  INFO("accumulation window of " << accumulation);
  CnnPair jvp(mlo::ProblemConfig().method(mlo::DartsOptions().mode(mlo::DartsMode::kJvp)),
              /*batch_norm=*/true, accumulation);
  REQUIRE(jvp.engine->level(*jvp.classifier).batches().size() ==
          static_cast<size_t>(accumulation));
  const TensorList v = jvp.random_direction();
  const TensorList w_before = [&] {
    TensorList out;
    for (const auto& t : jvp.classifier->parameters()) out.push_back(t.detach().clone());
    return out;
  }();
  const auto got = jvp.apply(v);
  const auto want = jvp.mixed(v);
  const double error = relative_error(got, want);
  INFO("jvp: relative error " << error);
  CHECK(error < 1e-10);
  for (size_t i = 0; i < w_before.size(); ++i) {
    CHECK(torch::equal(jvp.classifier->parameters()[i].detach(), w_before[i]));
  }
  // The finite difference of the same product: within its O(eps^2).
  CnnPair fd(mlo::ProblemConfig().method(mlo::DartsOptions().alpha(1e-4)), true, accumulation);
  const double fd_error = relative_error(fd.apply(v), want);
  INFO("finite difference (alpha 1e-4): relative error " << fd_error);
  CHECK(fd_error < 1e-6);
}

TEST_CASE("Forward mode: darts jvp refuses weights on unfrozen inputs; auto takes the difference",
          "[problems][reweighting][hypergrad]") {
  // Without frozen inputs the weights follow w through a detached input: forward mode would
  // miss that dependence, which the finite difference measures.
  CnnPair p(mlo::ProblemConfig().method(mlo::DartsOptions().alpha(1e-4)), /*batch_norm=*/true,
            /*accumulation=*/1, /*freeze=*/false);
  const TensorList v = p.random_direction();
  auto apply = [&](mlo::DartsMode mode) {
    const auto method = mlo::DartsOptions().alpha(1e-4).mode(mode).make();
    return method->apply(v, p.engine->level(*p.classifier), p.engine->level(*p.reweighter));
  };
  CHECK_THROWS_AS(apply(mlo::DartsMode::kJvp), mlo::hypergrad::ForwardModeUnsupported);
  CHECK_THROWS_WITH(apply(mlo::DartsMode::kJvp),
                    Contains("problem 'classifier'") && Contains("the weight net's inputs"));
  const auto want = apply(mlo::DartsMode::kFiniteDifference);
  const auto got = apply(mlo::DartsMode::kAuto);
  for (size_t i = 0; i < want.size(); ++i) CHECK(torch::equal(got[i], want[i]));
}

TEST_CASE("Forward mode: Hessian-vector products of the CNN over an accumulation window",
          "[problems][reweighting][hypergrad]") {
  SECTION("without batch norm: forward-over-reverse equals double backward") {
    CnnPair p(mlo::ProblemConfig().method(mlo::CGOptions()), /*batch_norm=*/false,
              /*accumulation=*/3);
    const TensorList v = p.random_direction();
    const auto got =
        mlo::hypergrad::forward_hvp(p.engine->level(*p.classifier), v, "test");
    const double error = relative_error(got, p.hvp(v));
    INFO("relative error " << error);
    CHECK(error < 1e-10);
  }
  SECTION("with batch norm (the Chain's elementary route): cg jvp equals double backward") {
    CnnPair p(mlo::ProblemConfig().method(mlo::CGOptions().iterations(3)), true, 2);
    const TensorList v = p.random_direction();
    const double hvp_error = relative_error(
        mlo::hypergrad::forward_hvp(p.engine->level(*p.classifier), v, "test"), p.hvp(v));
    auto apply = [&](mlo::HvpMode mode) {
      const auto method = mlo::CGOptions().iterations(3).mode(mode).make();
      return method->apply(v, p.engine->level(*p.classifier), p.engine->level(*p.reweighter));
    };
    const double cg_error =
        relative_error(apply(mlo::HvpMode::kJvp), apply(mlo::HvpMode::kDoubleBackward));
    INFO("relative error: Hessian-vector product " << hvp_error << ", cg " << cg_error);
    CHECK(hvp_error < 1e-10);
    CHECK(cg_error < 1e-10);
  }
}

}  // namespace reweighting_forward_mode_test
