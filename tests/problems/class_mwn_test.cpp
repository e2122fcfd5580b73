// The class-aware weight net: its formula, its use of the class, and the hypergradient through it.
#include "problems/reweighting/class_mwn.h"
#include "problems/reweighting/reweighting.h"

#include "support/three_samples.h"

#include <mlo/mlo.h>
#include <mlo/nn/chain.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <cmath>

namespace class_mwn_test {

namespace rw = mlo::problems::reweighting;

TEST_CASE("ClassMWN: w = sigmoid(fc2(relu(fc1([l, log(n_y / n_max)]))))",
          "[problems][reweighting]") {
  torch::manual_seed(1);
  rw::ClassMWN net(6, std::vector<int64_t>{400, 40, 4});
  CHECK(net->log_frequency[0].item<double>() == Approx(0.0));
  CHECK(net->log_frequency[1].item<double>() == Approx(std::log(0.1)).epsilon(1e-6));
  CHECK(net->log_frequency[2].item<double>() == Approx(std::log(0.01)).epsilon(1e-6));
  const auto losses = torch::tensor({0.3, 0.3, 2.0}).unsqueeze(1);
  const auto targets = torch::tensor({0, 2, 1}, torch::kLong);
  const auto got = net->forward(losses, targets);
  REQUIRE(got.sizes() == torch::IntArrayRef({3, 1}));
  const double freq[] = {0.0, std::log(0.01), std::log(0.1)};
  const double loss[] = {0.3, 0.3, 2.0};
  const auto w1 = net->fc1->weight, b1 = net->fc1->bias, w2 = net->fc2->weight, b2 = net->fc2->bias;
  for (int64_t i = 0; i < 3; ++i) {
    double out = b2[0].item<double>();
    for (int64_t h = 0; h < 6; ++h) {
      const double pre = w1[h][0].item<double>() * loss[i] + w1[h][1].item<double>() * freq[i] +
                         b1[h].item<double>();
      out += w2[0][h].item<double>() * std::max(pre, 0.0);
    }
    INFO("sample " << i);
    CHECK(got[i][0].item<double>() == Approx(1.0 / (1.0 + std::exp(-out))).epsilon(1e-5));
  }
  // Same loss, different class: a loss-only net could not tell these two apart.
  CHECK(got[0][0].item<double>() != Approx(got[1][0].item<double>()).epsilon(1e-6));
  CHECK_THROWS_AS(rw::ClassMWN(6, std::vector<int64_t>{10, 0}), mlo::Error);
}

TEST_CASE("ClassMWN: the DARTS hypergradient of the class-aware pair is the frozen-input product",
          "[problems][reweighting][hypergrad]") {
  // Also with a logit adjustment under the weights (the losses of logits + shift).
  const bool shifted = GENERATE(false, true);
  INFO("logit shift: " << shifted);
  const auto shift = torch::tensor({0.0, -1.2, -2.3}, torch::kDouble);
  torch::manual_seed(9);
  const mlo::Batch train(torch::randn({12, 6}, torch::kDouble), torch::randint(3, {12}));
  const mlo::Batch meta(torch::randn({9, 6}, torch::kDouble), torch::randint(3, {9}));
  mlo::nn::Chain chain;
  chain->push_back("fc1", torch::nn::Linear(6, 16))
      .push_back("act", torch::nn::Functional(torch::tanh))
      .push_back("head", torch::nn::Linear(16, 3));
  chain->to(torch::kDouble);
  rw::ClassMWN net(8, std::vector<int64_t>{100, 10, 1});
  net->to(torch::kDouble);
  auto classifier = std::make_shared<rw::Classifier>(
      "classifier", mlo::ProblemConfig().method(mlo::DartsOptions().alpha(1e-4)));
  classifier->module(chain)
      .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.0))
      .data(std::vector<mlo::Batch>{train});
  auto reweighter = std::make_shared<rw::Reweighter>("reweighter");
  reweighter->module(net)
      .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.0))
      .data(std::vector<mlo::Batch>{meta});
  classifier->weighting(rw::WeightNetOptions(reweighter.get())
                            .normalize(true)
                            .logit_shift(shifted ? shift : at::Tensor()));
  mlo::Engine engine(mlo::EngineConfig().train_iters(1));
  engine.add(reweighter).add(classifier).link(reweighter, classifier);
  engine.run();
  CHECK(reweighter->metrics().count("curve/rare/l=1") == 1);
  CHECK(reweighter->metrics().count("meta_grad_norm") == 1);

  std::vector<torch::Tensor> v;
  for (const auto& t : classifier->parameters()) v.push_back(torch::randn_like(t));
  auto method = classifier->config().method().make();
  const auto got = method->apply(v, engine.level(*classifier), engine.level(*reweighter));

  // Oracle: -d/dphi (dL/dw . v), L = sum_i w_i l_i / sum_i w_i with w_i = net(l_i frozen, y_i).
  const auto w = classifier->parameters();
  const auto phi = reweighter->parameters();
  const auto losses = torch::cross_entropy_loss(
      chain->forward(train.data) + (shifted ? shift : torch::zeros({3}, torch::kDouble)),
      train.target, {}, at::Reduction::None);
  const auto weights = net->forward(losses.detach().clone().unsqueeze(1), train.target).squeeze(1);
  const auto loss = (weights * losses).sum() / weights.sum();
  const auto g = torch::autograd::grad({loss}, w, {}, true, true);
  torch::Tensor gv = torch::zeros({}, torch::kDouble);
  for (size_t i = 0; i < g.size(); ++i) gv = gv + (g[i] * v[i]).sum();
  const auto want = torch::autograd::grad({gv}, phi, {}, false, false, true);
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const auto oracle = want[i].defined() ? -want[i] : torch::zeros_like(phi[i]);
    num += (got[i] - oracle).pow(2).sum().item<double>();
    den += oracle.pow(2).sum().item<double>();
  }
  INFO("relative error " << std::sqrt(num / den));
  CHECK(den > 0);
  CHECK(std::sqrt(num / den) < 1e-6);
}

}  // namespace class_mwn_test

namespace class_mwn_test {

TEST_CASE("Weight nets on logit-adjusted losses: the loss, and a shift refused",
          "[problems][reweighting]") {
  torch::manual_seed(3);
  rw::ClassMWN net(5, std::vector<int64_t>{30, 10});
  net->to(torch::kDouble);
  auto reweighter = std::make_shared<rw::Reweighter>("reweighter");
  reweighter->module(net);
  const auto shift = torch::tensor({-0.3, -1.4}, torch::kDouble);
  rw::Classifier classifier("classifier", mlo::ProblemConfig(),
                            rw::WeightNetOptions(reweighter.get()).logit_shift(shift));
  classifier.module(mlo_test::identity_chain());
  const auto batch = mlo_test::three_samples();
  // l_i = CE(x_i + shift, y_i), w_i = net(l_i, y_i), L = sum w_i l_i / sum w_i.
  const auto l = torch::cross_entropy_loss(batch.data + shift, batch.target, {},
                                           at::Reduction::None);
  const auto w = net->forward(l.unsqueeze(1), batch.target).squeeze(1);
  const double want = ((w * l).sum() / w.sum()).item<double>();
  CHECK(classifier.training_step(batch).item<double>() == Approx(want).epsilon(1e-14));
  CHECK_THROWS_WITH(classifier.weighting(rw::WeightNetOptions(reweighter.get())
                                             .logit_shift(torch::tensor({double(INFINITY), 0.0}))),
                    Catch::Matchers::Contains("logit_shift must be a finite vector"));
}

}  // namespace class_mwn_test
