// The classifier's three weightings (plain, weight net, L2RW), each against a closed form on a
// tiny batch, and the protocol it follows: its own step freezes the weight net's inputs, a
// hypergradient's re-evaluation reads them and leaves the step's metrics.
#include "problems/reweighting/reweighting.h"

#include <mlo/mlo.h>
#include <mlo/nn/chain.h>
#include <mlo/nn/mwn.h>
#include <torch/torch.h>

#include "support/in_memory_state.h"
#include "support/levels.h"
#include "support/three_samples.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

namespace weighting_test {

namespace rw = mlo::problems::reweighting;
using Catch::Matchers::Contains;

namespace {

// Three samples of two features and two classes. With the identity model the logits are the
// features, so l_i = log(exp x_i0 + exp x_i1) - x_i,y_i.
const std::vector<std::vector<double>> kX = {{1.0, 0.0}, {0.0, 0.0}, {0.0, 2.0}};
const std::vector<int64_t> kY = {0, 1, 0};


std::vector<double> closed_form_losses() {
  std::vector<double> l;
  for (size_t i = 0; i < kX.size(); ++i) {
    l.push_back(std::log(std::exp(kX[i][0]) + std::exp(kX[i][1])) - kX[i][kY[i]]);
  }
  return l;  // {log(1 + e^-1), log 2, log(1 + e^2)}
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }


// A weight net computing w = sigmoid(relu(l)) = sigmoid(l) for l >= 0 (one hidden unit, unit
// weights, zero biases).
mlo::nn::MWN sigmoid_net() {
  mlo::nn::MWN net(1);
  torch::NoGradGuard no_grad;
  for (auto& p : net->parameters()) p.fill_(1.0);
  net->fc1->bias.zero_();
  net->fc2->bias.zero_();
  net->to(torch::kDouble);
  return net;
}

struct Pair {
  std::shared_ptr<rw::Classifier> classifier;
  std::shared_ptr<rw::Reweighter> reweighter;
  // The classifier as a level, with the reweighter as its peer (made by floored_after_one).
  std::shared_ptr<mlo::detail::LevelRuntime> classifier_level;
};

Pair make_pair(const mlo::ProblemConfig& config, double lr) {
  Pair p;
  p.classifier = std::make_shared<rw::Classifier>("classifier", config);
  p.classifier->module(mlo_test::identity_chain())
      .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(lr))
      .data(std::vector<mlo::Batch>{mlo_test::three_samples()});
  p.reweighter = std::make_shared<rw::Reweighter>("reweighter");
  p.reweighter->module(sigmoid_net())
      .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.0))
      .data(std::vector<mlo::Batch>{mlo_test::three_samples()});
  p.classifier->weighting(rw::WeightNetOptions(p.reweighter.get()));
  return p;
}

// A pair of learning rate 0 whose classifier takes the floor 0.5 after its first step, resolved.
Pair floored_after_one(const mlo::ProblemConfig& config) {
  auto p = make_pair(config, 0.0);
  p.classifier->weighting(
      rw::WeightNetOptions(p.reweighter.get()).weight_floor(0.5).weight_floor_after(1));
  p.classifier_level = mlo::testing::make_level(*p.classifier, {p.reweighter.get()});
  return p;
}

// Two own steps of `classifier` (a level), the first starting an unroll.
void two_steps(mlo::detail::LevelRuntime& classifier) {
  for (int64_t step = 1; step <= 2; ++step) {
    mlo::detail::StepContext context;
    context.unroll_start = step == 1;
    classifier.step(context);
  }
}

}  // namespace

TEST_CASE("Classifier: each weighting's loss in closed form", "[problems][reweighting]") {
  const auto l = closed_form_losses();
  const std::vector<double> w = {sigmoid(l[0]), sigmoid(l[1]), sigmoid(l[2])};
  const double plain = (l[0] + l[1] + l[2]) / 3;
  const double wl = w[0] * l[0] + w[1] * l[1] + w[2] * l[2];
  const double w_sum = w[0] + w[1] + w[2];
  auto p = make_pair(mlo::ProblemConfig(), 0.0);
  const mlo::Batch b = mlo_test::three_samples();

  // Weight net, normalized (the default): sum_i w_i l_i / sum_i w_i = 1.18973... .
  CHECK(p.classifier->training_step(b).item<double>() == Approx(wl / w_sum).epsilon(1e-14));
  CHECK(p.classifier->metrics().at("weight_mean") == Approx(w_sum / 3).epsilon(1e-14));
  CHECK(p.classifier->metrics().at("weight_max") == Approx(sigmoid(l[2])).epsilon(1e-14));
  // Unnormalized: mean_i w_i l_i.
  p.classifier->weighting(rw::WeightNetOptions(p.reweighter.get()).normalize(false));
  CHECK(p.classifier->training_step(b).item<double>() == Approx(wl / 3).epsilon(1e-14));
  // Plain: the mean loss, no weight metrics.
  p.classifier->weighting(rw::PlainOptions());
  const double got = p.classifier->training_step(b).item<double>();
  CHECK(got == Approx(plain).epsilon(1e-14));
  CHECK(plain ==
        Approx((std::log1p(std::exp(-1.0)) + std::log(2.0) + std::log1p(std::exp(2.0))) / 3)
            .epsilon(1e-14));
  // "acc" is a float32 mean: sample 0 only.
  CHECK(p.classifier->metrics().at("acc") == Approx(1.0 / 3).epsilon(1e-7));
}

TEST_CASE("Classifier: bounded relative weights, a weight floor and the weight net's saturation",
          "[problems][reweighting]") {
  // w = sigmoid(l) = (0.578, 0.667, 0.894), mean 0.713: R = 1.1 bounds the third weight at
  // 1.1 * mean, computed before the bound.
  const auto l = closed_form_losses();
  const std::vector<double> w = {sigmoid(l[0]), sigmoid(l[1]), sigmoid(l[2])};
  const double bound = 1.1 * (w[0] + w[1] + w[2]) / 3;
  REQUIRE(w[2] > bound);
  REQUIRE(w[1] < bound);
  auto p = make_pair(mlo::ProblemConfig(), 0.0);
  p.classifier->weighting(rw::WeightNetOptions(p.reweighter.get()).max_relative_weight(1.1));
  const at::Tensor loss = p.classifier->training_step(mlo_test::three_samples());
  const double want = (w[0] * l[0] + w[1] * l[1] + bound * l[2]) / (w[0] + w[1] + bound);
  CHECK(loss.item<double>() == Approx(want).epsilon(1e-14));
  const auto& m = p.classifier->metrics();
  CHECK(m.at("weight_max") == Approx(bound).epsilon(1e-14));
  CHECK(m.at("weight_peak") == Approx(bound / ((w[0] + w[1] + bound) / 3)).epsilon(1e-14));
  CHECK(m.at("weight_saturated") == 0.0);
  // The bounded sample passes no gradient to the weight net: d loss / d fc2.bias is
  // sum_i w_i (1 - w_i) (l_i - loss) / sum w over the two free samples only.
  loss.backward();
  const double sum = w[0] + w[1] + bound;
  double want_grad = 0;
  for (size_t i = 0; i < 2; ++i) want_grad += w[i] * (1 - w[i]) * (l[i] - want) / sum;
  // ... and the bound itself, bound = 1.1 mean(w), is held constant.
  CHECK(p.reweighter->module_as<mlo::nn::MWNImpl>()->fc2->bias.grad().item<double>() ==
        Approx(want_grad).epsilon(1e-12));
  // A floor f: w' = f + (1 - f) w, so max / min <= 1 / f.
  p.classifier->weighting(rw::WeightNetOptions(p.reweighter.get()).weight_floor(0.5));
  std::vector<double> floored;
  for (double x : w) floored.push_back(0.5 + 0.5 * x);
  CHECK(p.classifier->training_step(mlo_test::three_samples()).item<double>() ==
        Approx((floored[0] * l[0] + floored[1] * l[1] + floored[2] * l[2]) /
               (floored[0] + floored[1] + floored[2]))
            .epsilon(1e-14));
  CHECK(p.classifier->metrics().at("weight_min") == Approx(floored[0]).epsilon(1e-14));
  // A net whose sigmoid sits at 1 (fc2 bias 10: every w > 0.99) is saturated on every sample.
  {
    torch::NoGradGuard no_grad;
    p.reweighter->module_as<mlo::nn::MWNImpl>()->fc2->bias.fill_(10.0);
  }
  p.classifier->weighting(rw::WeightNetOptions(p.reweighter.get()));
  p.classifier->training_step(mlo_test::three_samples());
  CHECK(p.classifier->metrics().at("weight_saturated") == 1.0);
  CHECK_THROWS_WITH(
      p.classifier->weighting(rw::WeightNetOptions(p.reweighter.get()).max_relative_weight(0.5)),
      Contains("max_relative_weight must be 0 (no bound) or >= 1, got 0.5"));
  CHECK_THROWS_WITH(
      p.classifier->weighting(rw::WeightNetOptions(p.reweighter.get()).weight_floor(1.0)),
      Contains("weight_floor must be in [0, 1), got 1"));
}

TEST_CASE("Classifier: a weight floor after the first steps, the same in the step and its "
          "re-evaluation", "[problems][reweighting]") {
  // Learning rates 0: every step sees the closed-form losses and weights sigmoid(l_i).
  const auto l = closed_form_losses();
  const std::vector<double> w = {sigmoid(l[0]), sigmoid(l[1]), sigmoid(l[2])};
  auto normalized = [&](double f) {
    double num = 0, den = 0;
    for (size_t i = 0; i < 3; ++i) {
      num += (f + (1 - f) * w[i]) * l[i];
      den += f + (1 - f) * w[i];
    }
    return num / den;
  };
  REQUIRE(std::abs(normalized(0.5) - normalized(0.0)) > 1e-2);
  auto p = make_pair(mlo::ProblemConfig(), 0.0);
  p.classifier->weighting(
      rw::WeightNetOptions(p.reweighter.get()).weight_floor(0.5).weight_floor_after(2));
  const auto level = mlo::testing::make_level(*p.classifier, {p.reweighter.get()});
  // Outside a step, before any: no floor yet.
  CHECK(p.classifier->training_step(mlo_test::three_samples()).item<double>() ==
        Approx(normalized(0.0)).epsilon(1e-14));
  CHECK(p.classifier->metrics().at("weight_floor") == 0.0);
  for (int64_t step = 1; step <= 4; ++step) {
    mlo::detail::StepContext context;
    context.unroll_start = true;
    level->step(context);
    REQUIRE(p.classifier->step_count() == step);
    const double f = step > 2 ? 0.5 : 0.0;
    const auto& m = p.classifier->metrics();
    CHECK(m.at("loss") == Approx(normalized(f)).epsilon(1e-14));
    CHECK(m.at("weight_floor") == f);
    CHECK(m.at("weight_min") == Approx(f + (1 - f) * w[0]).epsilon(1e-14));
    // A hypergradient's re-evaluation of the step's batch (frozen inputs) takes the step's floor.
    CHECK(level->loss().item<double>() == Approx(normalized(f)).epsilon(1e-14));
  }
  // An accumulation window that straddles the start (2 micro-batches, the floor after step 1):
  // its re-evaluation takes each batch's own floor, none for the first, 0.5 for the second,
  // also in a classifier restored from the saved state.
  {
    auto q = floored_after_one(mlo::ProblemConfig().gradient_accumulation(2));
    q.classifier->data(
        std::vector<mlo::Batch>{mlo_test::three_samples(), mlo_test::three_samples()});
    two_steps(*q.classifier_level);
    REQUIRE(q.classifier->current_batches().size() == 2);
    CHECK(q.classifier->metrics().at("weight_floor") == 0.5);
    const double window = (normalized(0.0) + normalized(0.5)) / 2;
    CHECK(q.classifier_level->loss().item<double>() == Approx(window).epsilon(1e-14));
    CHECK(q.classifier_level->loss(0).item<double>() ==
          Approx(normalized(0.0) / 2).epsilon(1e-14));
    const std::string saved = mlo_test::saved_state(*q.classifier);
    auto r = floored_after_one(mlo::ProblemConfig().gradient_accumulation(2));
    mlo_test::load_state(*r.classifier, saved);
    REQUIRE(r.classifier->current_batches().size() == 2);
    CHECK(r.classifier_level->loss().item<double>() == Approx(window).epsilon(1e-14));
  }
  // Unrolled over 2 steps (a replay re-evaluates both batches; no accumulation): the first
  // step's batch keeps its floor after the second step.
  {
    auto q = floored_after_one(mlo::ProblemConfig().unroll_steps(2));
    const std::vector<mlo::Batch> batches{mlo_test::three_samples(), mlo_test::three_samples()};
    q.classifier->data(batches);
    two_steps(*q.classifier_level);
    CHECK(q.classifier_level->loss(batches[0]).item<double>() ==
          Approx(normalized(0.0)).epsilon(1e-14));
    CHECK(q.classifier_level->loss(batches[1]).item<double>() ==
          Approx(normalized(0.5)).epsilon(1e-14));
    // New options forget the old ones' floors.
    q.classifier->weighting(
        rw::WeightNetOptions(q.reweighter.get()).weight_floor(0.5).weight_floor_after(1));
    CHECK(q.classifier_level->loss(batches[0]).item<double>() ==
          Approx(normalized(0.5)).epsilon(1e-14));
  }
  // weight_floor_after 0 (the default): the floor from the first step, outside the steps too.
  p.classifier->weighting(rw::WeightNetOptions(p.reweighter.get()).weight_floor(0.5));
  CHECK(p.classifier->training_step(mlo_test::three_samples()).item<double>() ==
        Approx(normalized(0.5)).epsilon(1e-14));
  CHECK_THROWS_WITH(
      p.classifier->weighting(rw::WeightNetOptions(p.reweighter.get()).weight_floor_after(-1)),
      Contains("weight_floor_after must be >= 0, got -1"));
}

TEST_CASE("Classifier: L2RW on a linear softmax model matches its closed form",
          "[problems][reweighting]") {
  // For logits W x + c the per-sample gradient is a_i x_i^T (and a_i for c), a_i = p_i - e_y_i,
  // so with v the meta gradient grad l_i . v = mean_j (a_i . a_j)(x_i . x_j + 1) over the meta
  // batch; w_i = max(that, 0) / sum.
  const mlo::Batch train = mlo_test::three_samples();
  const mlo::Batch meta(torch::tensor({1.0, -1.0, 0.5, 0.5}, torch::kDouble).view({2, 2}),
                        torch::tensor({0, 0}, torch::kLong));
  auto onehot = [](const at::Tensor& y) {
    return torch::nn::functional::one_hot(y, 2).to(torch::kDouble);
  };
  const auto a = torch::softmax(train.data, 1) - onehot(train.target);
  const auto a_meta = torch::softmax(meta.data, 1) - onehot(meta.target);
  const auto d = (a.mm(a_meta.t()) * (train.data.mm(meta.data.t()) + 1)).mean(1);
  const auto u = d.clamp_min(0);
  const auto weights = u / u.sum();
  const auto l = closed_form_losses();
  double want = 0;
  for (int64_t i = 0; i < 3; ++i) want += weights[i].item<double>() * l[static_cast<size_t>(i)];
  // d = (0.2658, -0.3096, 0.7758): weights (0.2552, 0, 0.7448), the clamp active on sample 1.
  REQUIRE(u.eq(0).sum().item<int64_t>() == 1);
  REQUIRE(weights[2].item<double>() == Approx(0.7448).margin(1e-4));

  rw::Classifier classifier("classifier", mlo::ProblemConfig(),
                            rw::L2rwOptions([&] { return meta; }).alpha(1e-5));
  classifier.module(mlo_test::identity_chain()).optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
  classifier.num_classes = 2;
  INFO("closed-form weights " << weights);
  // The finite difference along v is O(alpha^2) off the directional derivative.
  CHECK(classifier.training_step(train).item<double>() == Approx(want).epsilon(1e-8));
  CHECK(classifier.metrics().at("weight_max") ==
        Approx(weights.max().item<double>()).epsilon(1e-8));
  CHECK(classifier.metrics().at("weight_min") == Approx(0.0).margin(1e-9));
  // Class 0 (samples 0 and 2) holds all the weight: its mean weight 1/2 over the batch mean 1/3.
  CHECK(classifier.metrics().at("wclass/0") == Approx(1.5).epsilon(1e-8));
  CHECK(classifier.metrics().at("wclass/1") == Approx(0.0).margin(1e-8));
}

TEST_CASE("Classifier: options that cannot work are refused where they enter",
          "[problems][reweighting]") {
  auto p = make_pair(mlo::ProblemConfig(), 0.0);
  CHECK_THROWS_WITH(p.classifier->weighting(rw::WeightNetOptions(nullptr)),
                    Contains("problem 'classifier': WeightNetOptions needs a reweighter"));
  CHECK_THROWS_WITH(p.classifier->weighting(rw::L2rwOptions({})),
                    Contains("L2rwOptions needs a meta-batch function"));
  CHECK_THROWS_WITH(
      rw::Classifier("c", mlo::ProblemConfig(), rw::L2rwOptions([] { return mlo_test::three_samples(); }).alpha(0)),
      Contains("problem 'c': L2rwOptions alpha must be > 0, got 0"));
  // The refused weighting left the previous one in place.
  CHECK(p.classifier->weighting_as<rw::WeightNetOptions>() != nullptr);
}

TEST_CASE(
    "Classifier: the own step freezes the weight net's inputs, re-evaluations keep its "
    "metrics",
    "[problems][reweighting][hypergrad]") {
  // One meta-iteration with Neumann: the classifier steps at w0 (the identity), then the
  // reweighter's hypergradient re-evaluates the classifier's loss at the moved w1. The step's
  // metrics are those at w0; a re-evaluation weights the losses at w1 by sigmoid(l_i(w0)).
  const auto l = closed_form_losses();
  const std::vector<double> w = {sigmoid(l[0]), sigmoid(l[1]), sigmoid(l[2])};
  const double w_sum = w[0] + w[1] + w[2];
  auto p = make_pair(mlo::ProblemConfig().method(mlo::NeumannOptions().iterations(2)), 0.5);
  mlo::Engine engine(mlo::EngineConfig().train_iters(1));
  engine.add(p.reweighter).add(p.classifier).link(p.reweighter, p.classifier);
  engine.run();
  REQUIRE(p.reweighter->optimizer_steps() == 1);
  const auto& m = p.classifier->metrics();
  CHECK(m.at("loss") == Approx((w[0] * l[0] + w[1] * l[1] + w[2] * l[2]) / w_sum).epsilon(1e-14));
  CHECK(m.at("weight_mean") == Approx(w_sum / 3).epsilon(1e-14));
  CHECK(m.at("weight_min") == Approx(sigmoid(l[0])).epsilon(1e-14));
  CHECK(m.at("acc") == Approx(1.0 / 3).epsilon(1e-7));

  // The classifier moved; the losses at w1 differ from the step's.
  const auto chain = p.classifier->module_as<mlo::nn::ChainImpl>();
  torch::Tensor l1;
  {
    torch::NoGradGuard no_grad;
    l1 = torch::cross_entropy_loss(chain->forward(mlo_test::three_samples().data), mlo_test::three_samples().target, {},
                                   at::Reduction::None);
  }
  REQUIRE((l1 - torch::tensor(l, torch::kDouble)).abs().max().item<double>() > 1e-2);
  double want = 0;
  for (int64_t i = 0; i < 3; ++i) want += w[static_cast<size_t>(i)] * l1[i].item<double>();
  CHECK(engine.level(*p.classifier).loss().item<double>() ==
        Approx(want / w_sum).epsilon(1e-12));
  CHECK(m.at("weight_mean") == Approx(w_sum / 3).epsilon(1e-14));  // still the step's

  // An evaluation of another batch reads its own losses: weights sigmoid(l_i(w1)).
  const mlo::Batch other(mlo_test::three_samples().data.clone(), mlo_test::three_samples().target);
  p.classifier->training_step(other);
  CHECK(m.at("weight_mean") == Approx(torch::sigmoid(l1).mean().item<double>()).epsilon(1e-12));
  // It froze nothing: a re-evaluation of the step's batch still reads the step's inputs.
  CHECK(engine.level(*p.classifier).loss().item<double>() ==
        Approx(want / w_sum).epsilon(1e-12));
}

}  // namespace weighting_test
