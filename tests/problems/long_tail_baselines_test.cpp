// The one-level long-tail baselines: class-balanced cross-entropy (inverse frequency and the
// effective number of samples) and logit adjustment, each against its closed form, their
// refusals, and the YAML that selects them.
#include "problems/reweighting/class_priors.h"
#include "problems/reweighting/experiment.h"
#include "problems/reweighting/reweighting.h"
#include "problems/reweighting/scheme.h"
#include "support/names.h"
#include "support/tiny_reweighting.h"

#include <mlo/mlo.h>
#include <mlo/nn/chain.h>
#include <mlo/run/experiment.h>
#include <mlo/run/yaml.h>
#include <torch/torch.h>

#include "support/three_samples.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

namespace long_tail_baselines_test {

namespace rw = mlo::problems::reweighting;
using Catch::Matchers::Contains;

namespace {

// The samples are mlo_test::three_samples(); with the identity model the logits are the features.

// -log softmax(z)_y for two logits.
double cross_entropy(double z0, double z1, int64_t y) {
  return std::log(std::exp(z0) + std::exp(z1)) - (y == 0 ? z0 : z1);
}

template <typename W>
std::unique_ptr<rw::Classifier> classifier(W weighting) {
  auto c = std::make_unique<rw::Classifier>("classifier", mlo::ProblemConfig(), std::move(weighting));
  c->module(mlo_test::identity_chain());
  c->num_classes = 2;
  return c;
}

// The weight-net options the tiny reweighting experiment gives its classifier under `overrides`.
rw::WeightNetOptions weight_net_options_of(const std::vector<std::string>& overrides) {
  const auto config =
      mlo::run::parse_run_config(mlo_test::kTinyReweighting, "tiny.yaml", overrides);
  auto experiment = mlo::run::make_experiment(config);
  for (const auto& p : experiment->engine().problems()) {
    if (const auto c = std::dynamic_pointer_cast<rw::Classifier>(p)) {
      const auto* o = c->weighting_as<rw::WeightNetOptions>();
      REQUIRE(o != nullptr);
      return *o;
    }
  }
  FAIL("no classifier");
  return rw::WeightNetOptions(nullptr);
}

}  // namespace

TEST_CASE("Class priors: effective-number weights, inverse frequency and the log prior",
          "[problems][reweighting]") {
  // beta = 1: inverse frequency, 1/100 and 1/10 scaled to sum to 2.
  const auto inverse = rw::class_balanced_weights({100, 10}, 1.0);
  CHECK(inverse[0].item<double>() == Approx(2 * 0.01 / 0.11).epsilon(1e-14));
  CHECK(inverse[1].item<double>() == Approx(2 * 0.1 / 0.11).epsilon(1e-14));
  // beta = 0.9: E(n) = (1 - 0.9^n) / 0.1.
  const double e100 = (1 - std::pow(0.9, 100)) / 0.1, e10 = (1 - std::pow(0.9, 10)) / 0.1;
  const auto effective = rw::class_balanced_weights({100, 10}, 0.9);
  const double total = 1 / e100 + 1 / e10;
  CHECK(effective[0].item<double>() == Approx(2 / e100 / total).epsilon(1e-12));
  CHECK(effective[1].item<double>() == Approx(2 / e10 / total).epsilon(1e-12));
  // beta = 0: every class weighs 1; beta just below 1 is inverse frequency to 1e-6.
  CHECK(torch::equal(rw::class_balanced_weights({100, 10, 1}, 0.0),
                     torch::ones({3}, torch::kDouble)));
  CHECK(torch::allclose(rw::class_balanced_weights({100, 10}, 1 - 1e-9), inverse, 1e-6, 0));
  // log pi = log(n / sum n).
  const auto prior = rw::log_class_prior({30, 10});
  CHECK(prior[0].item<double>() == Approx(std::log(0.75)).epsilon(1e-14));
  CHECK(prior[1].item<double>() == Approx(std::log(0.25)).epsilon(1e-14));

  CHECK_THROWS_WITH(rw::class_balanced_weights({5, 0}, 0.9),
                    Contains("class 1 has 0 training samples"));
  CHECK_THROWS_WITH(rw::class_balanced_weights({5, 5}, 1.5),
                    Contains("beta must be in [0, 1], got 1.5"));
  CHECK_THROWS_WITH(rw::log_class_prior({}), Contains("no classes"));
}

TEST_CASE("Classifier: class-balanced cross-entropy in closed form", "[problems][reweighting]") {
  // Class weights (2, 0.5): the samples (classes 0, 1, 0) weigh 2, 0.5, 2.
  const double l0 = cross_entropy(1, 0, 0), l1 = cross_entropy(0, 0, 1), l2 = cross_entropy(0, 2, 0);
  auto c = classifier(rw::ClassWeightOptions(torch::tensor({2.0, 0.5}, torch::kDouble)));
  const double weighted = 2 * l0 + 0.5 * l1 + 2 * l2;
  CHECK(c->training_step(mlo_test::three_samples()).item<double>() == Approx(weighted / 4.5).epsilon(1e-14));
  const auto& m = c->metrics();
  CHECK(m.at("weight_mean") == Approx(1.5).epsilon(1e-14));
  CHECK(m.at("weight_peak") == Approx(2 / 1.5).epsilon(1e-14));
  // (sum w)^2 / (N sum w^2) = 4.5^2 / (3 * 8.25).
  CHECK(m.at("weight_ess") == Approx(20.25 / 24.75).epsilon(1e-14));
  CHECK(m.at("wclass/1") == Approx(0.5 / 1.5).epsilon(1e-14));
  CHECK(m.count("weight_saturated") == 0);  // a weight net's instrument only
  c->weighting(rw::ClassWeightOptions(torch::tensor({2.0, 0.5}, torch::kDouble)).normalize(false));
  CHECK(c->training_step(mlo_test::three_samples()).item<double>() == Approx(weighted / 3).epsilon(1e-14));
}

TEST_CASE("Classifier: logit adjustment trains on shifted logits and predicts with plain ones",
          "[problems][reweighting]") {
  // log prior (log 0.75, log 0.25), tau 2: the loss is CE(x + 2 log pi, y).
  const double s0 = 2 * std::log(0.75), s1 = 2 * std::log(0.25);
  auto c = classifier(rw::LogitAdjustmentOptions(rw::log_class_prior({30, 10})).tau(2.0));
  const double want = (cross_entropy(1 + s0, s1, 0) + cross_entropy(s0, s1, 1) +
                       cross_entropy(s0, 2 + s1, 0)) / 3;
  const at::Tensor loss = c->training_step(mlo_test::three_samples());
  CHECK(loss.item<double>() == Approx(want).epsilon(1e-14));
  // The gradient is that of the shifted loss: d/dbias = mean(softmax(x + s) - onehot(y)).
  loss.backward();
  const auto x = mlo_test::three_samples().data, y = mlo_test::three_samples().target;
  const auto shift = torch::tensor({s0, s1}, torch::kDouble);
  const auto want_grad =
      (torch::softmax(x + shift, 1) - torch::one_hot(y, 2).to(torch::kDouble)).mean(0);
  const auto chain = c->module_as<mlo::nn::ChainImpl>();
  const at::Tensor bias = chain->named_parameters()["fc.bias"];  // (a copy: the dict is a temporary)
  CHECK(torch::allclose(bias.grad(), want_grad, 1e-14, 1e-14));
  // Prediction: the logits are the model's own (here the features).
  CHECK(torch::equal(c->logits(x).detach(), x));
  // "acc" from the plain logits: sample 0 only (sample 2 is predicted 1).
  CHECK(c->metrics().at("acc") == Approx(1.0 / 3).epsilon(1e-7));
  // tau 0 is plain cross-entropy.
  c->weighting(rw::LogitAdjustmentOptions(rw::log_class_prior({30, 10})).tau(0.0));
  const double plain = (cross_entropy(1, 0, 0) + cross_entropy(0, 0, 1) + cross_entropy(0, 2, 0)) / 3;
  CHECK(c->training_step(mlo_test::three_samples()).item<double>() == Approx(plain).epsilon(1e-14));
}

TEST_CASE("Classifier: baseline options that cannot work are refused where they enter",
          "[problems][reweighting]") {
  auto c = classifier(rw::PlainOptions());
  CHECK_THROWS_WITH(c->weighting(rw::ClassWeightOptions(torch::tensor({1.0, -1.0}))),
                    Contains("problem 'classifier': ClassWeightOptions class weights must be "
                             "finite, >= 0 and not all 0"));
  CHECK_THROWS_WITH(c->weighting(rw::ClassWeightOptions(torch::zeros({2}))),
                    Contains("not all 0"));
  CHECK_THROWS_WITH(c->weighting(rw::ClassWeightOptions(at::Tensor())),
                    Contains("needs a vector of class weights"));
  CHECK_THROWS_WITH(
      c->weighting(rw::LogitAdjustmentOptions(rw::log_class_prior({3, 1})).tau(-1)),
      Contains("LogitAdjustmentOptions tau must be >= 0, got -1"));
  CHECK_THROWS_WITH(c->weighting(rw::LogitAdjustmentOptions(
                        torch::tensor(std::vector<double>{0.0, INFINITY}))),
                    Contains("needs a finite vector log prior"));
  CHECK(c->weighting_as<rw::PlainOptions>() != nullptr);
  // Sizes that do not match the logits fail at the step, naming both.
  c->weighting(rw::ClassWeightOptions(torch::ones({3}, torch::kDouble)));
  CHECK_THROWS_WITH(c->training_step(mlo_test::three_samples()), Contains("3 class weights for 2 logits"));
  c->weighting(rw::LogitAdjustmentOptions(rw::log_class_prior({1, 1, 1})));
  CHECK_THROWS_WITH(c->training_step(mlo_test::three_samples()),
                    Contains("a log prior of 3 classes for 2 logits"));
}

TEST_CASE("Experiment: class_balanced and logit_adjusted from YAML, on the training counts",
          "[problems][reweighting][run]") {
  const char* yaml = R"(experiment: reweighting
name: tiny
seed: 2
threads: 1
engine: {train_iters: 2, valid_step: 0, log_step: 0, save_step: 0}
data: {dataset: synthetic, synthetic_size: 60, synthetic_test_size: 3, imbalance: 10,
       meta_size: 20, valid_size: 50, batch_size: 8, meta_batch_size: 10}
reweighting: {method: class_balanced, class_balanced: {beta: 0.99}}
problems:
  classifier:
    model: {name: cnn}
    optimizer: {name: sgd, lr: 0.05}
)";
  auto classifier_of = [](mlo::run::Experiment& e) {
    return std::dynamic_pointer_cast<rw::Classifier>(e.engine().problems().front());
  };
  {
    const auto config = mlo::run::parse_run_config(yaml, "cb.yaml");
    auto experiment = mlo::run::make_experiment(config);
    auto& ex = dynamic_cast<rw::ReweightingExperiment&>(*experiment);
    const auto c = classifier_of(ex);
    REQUIRE(c);
    const auto* o = c->weighting_as<rw::ClassWeightOptions>();
    REQUIRE(o != nullptr);
    CHECK(torch::equal(o->class_weights(), rw::class_balanced_weights(ex.train_counts(), 0.99)));
    CHECK(o->normalize());
    ex.engine().run();
    CHECK(c->metrics().at("weight_peak") >= 1.0);
    CHECK_THAT(ex.describe(), Contains("class-balanced cross-entropy (beta 0.99, normalized)"));
  }
  {
    const auto config = mlo::run::parse_run_config(
        yaml, "la.yaml",
        {"reweighting.method=logit_adjusted", "reweighting.logit_adjusted.tau=1.5"});
    auto experiment = mlo::run::make_experiment(config);
    auto& ex = dynamic_cast<rw::ReweightingExperiment&>(*experiment);
    const auto* o = classifier_of(ex)->weighting_as<rw::LogitAdjustmentOptions>();
    REQUIRE(o != nullptr);
    CHECK(o->tau() == 1.5);
    CHECK(torch::equal(o->log_prior(), rw::log_class_prior(ex.train_counts())));
  }
  CHECK_THROWS_WITH(
      mlo::run::parse_run_config(yaml, "cb.yaml", {"reweighting.class_balanced.beta=2"}),
      Contains("reweighting.class_balanced.beta: must be in [0, 1] (1 = inverse class "
               "frequency), got 2"));
  CHECK_THROWS_WITH(
      mlo::run::parse_run_config(yaml, "la.yaml", {"reweighting.logit_adjusted.tau=-1"}),
      mlo_test::Names({"reweighting.logit_adjusted.tau:", ">= 0"}));
  // A weight net has no place in a one-level baseline.
  const std::string with_reweighter =
      std::string(yaml) + "  reweighter:\n    model: {name: mwn}\n    optimizer: {name: adam, lr: 0.001}\n";
  CHECK_THROWS_WITH(mlo::run::parse_run_config(with_reweighter, "cb.yaml"),
                    Contains("reweighting.method: class_balanced has no weight net: remove "
                             "problems.reweighter"));
}

TEST_CASE("Experiment: the weight nets' floor is 0.1 unless the YAML says otherwise",
          "[problems][reweighting][run]") {
  auto floor_of = [](const std::vector<std::string>& overrides) {
    return weight_net_options_of(overrides).weight_floor();
  };
  CHECK(floor_of({}) == 0.1);
  CHECK(floor_of({"reweighting.method=class_mwn"}) == 0.1);
  CHECK(floor_of({"reweighting.mwn.weight_floor=0"}) == 0.0);
  CHECK(floor_of({"reweighting.mwn.weight_floor=0.3"}) == 0.3);
  CHECK_THROWS_WITH(floor_of({"reweighting.mwn.weight_floor=1"}),
                    mlo_test::Names({"reweighting.mwn.weight_floor:", "[0, 1)"}));
}

TEST_CASE("Experiment: reweighting.weight_floor_after reaches the classifier, checked",
          "[problems][reweighting][run]") {
  auto after_of = [](const std::vector<std::string>& overrides) {
    return weight_net_options_of(overrides).weight_floor_after();
  };
  CHECK(after_of({}) == 0);
  CHECK(after_of({"reweighting.mwn.weight_floor_after=500"}) == 500);
  CHECK_THROWS_WITH(
      after_of({"reweighting.mwn.weight_floor_after=-3"}),
      mlo_test::Names({"reweighting.mwn.weight_floor_after:", ">= 0", "got -3"}));
}

TEST_CASE("Experiment: reweighting.<net>.logit_adjustment puts tau log(prior) under the weights",
          "[problems][reweighting][run]") {
  CHECK_FALSE(weight_net_options_of({}).logit_shift().defined());
  const auto config = mlo::run::parse_run_config(
      mlo_test::kTinyReweighting, "tiny.yaml",
      {"reweighting.method=class_mwn", "reweighting.class_mwn.logit_adjustment=0.5"});
  auto experiment = mlo::run::make_experiment(config);
  auto& ex = dynamic_cast<rw::ReweightingExperiment&>(*experiment);
  for (const auto& p : ex.engine().problems()) {
    if (const auto c = std::dynamic_pointer_cast<rw::Classifier>(p)) {
      const auto* o = c->weighting_as<rw::WeightNetOptions>();
      REQUIRE(o != nullptr);
      CHECK(torch::allclose(o->logit_shift(), rw::log_class_prior(ex.train_counts()) * 0.5));
    }
  }
  CHECK_THAT(ex.describe(), Contains("on logit-adjusted losses (tau 0.5)"));
  CHECK_THROWS_WITH(weight_net_options_of({"reweighting.mwn.logit_adjustment=-1"}),
                    mlo_test::Names({"reweighting.mwn.logit_adjustment:", ">= 0"}));
}

TEST_CASE("Experiment: the focal scheme weighs samples by (1 - p)^gamma, from YAML by name",
          "[problems][reweighting][run]") {
  // Applied by name on the identity model, gamma 2 (the default):
  // mean_i (1 - p_i)^2 l_i with p_i = exp(-l_i).
  auto c = classifier(rw::PlainOptions());
  rw::make_scheme("focal")->apply(rw::SchemeContext{*c, nullptr, {30, 10}, {}});
  const double l[3] = {cross_entropy(1, 0, 0), cross_entropy(0, 0, 1), cross_entropy(0, 2, 0)};
  double want = 0, w_sum = 0;
  for (double li : l) {
    const double w = std::pow(1 - std::exp(-li), 2);
    want += w * li / 3;
    w_sum += w;
  }
  const at::Tensor loss = c->training_step(mlo_test::three_samples());
  CHECK(loss.item<double>() == Approx(want).epsilon(1e-13));
  CHECK(c->metrics().at("weight_mean") == Approx(w_sum / 3).epsilon(1e-13));
  // The gradient runs through the factor too: against central differences in the bias.
  loss.backward();
  const auto chain = c->module_as<mlo::nn::ChainImpl>();
  const at::Tensor bias = chain->named_parameters()["fc.bias"];
  const at::Tensor grad = bias.grad().clone();
  for (int64_t k = 0; k < 2; ++k) {
    const double h = 1e-6;
    auto loss_at = [&](double d) {
      torch::NoGradGuard no_grad;
      bias[k].add_(d);
      const double v = c->training_step(mlo_test::three_samples()).item<double>();
      bias[k].sub_(d);
      return v;
    };
    CHECK(grad[k].item<double>() == Approx((loss_at(h) - loss_at(-h)) / (2 * h)).epsilon(1e-7));
  }
  // From YAML: the section's gamma reaches the classifier's loss.
  const char* yaml = R"(experiment: reweighting
name: tiny
seed: 2
threads: 1
engine: {train_iters: 2, valid_step: 0, log_step: 0, save_step: 0}
data: {dataset: synthetic, synthetic_size: 60, synthetic_test_size: 3, imbalance: 10,
       meta_size: 20, valid_size: 50, batch_size: 8, meta_batch_size: 10}
reweighting: {method: focal, focal: {gamma: 0.5}}
problems:
  classifier:
    model: {name: cnn}
    optimizer: {name: sgd, lr: 0.05}
)";
  auto experiment = mlo::run::make_experiment(mlo::run::parse_run_config(yaml, "focal.yaml"));
  experiment->engine().run();
  const auto trained =
      std::dynamic_pointer_cast<rw::Classifier>(experiment->engine().problems().front());
  REQUIRE(trained);
  const mlo::Batch batch = trained->current_batch();
  const at::Tensor losses = torch::nn::functional::cross_entropy(
      trained->logits(batch.data).to(torch::kDouble), batch.target,
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  const double focal = ((1 - (-losses).exp()).pow(0.5) * losses).mean().item<double>();
  CHECK(trained->training_step(batch).item<double>() == Approx(focal).epsilon(1e-5));
  // gamma 0 is plain cross-entropy.
  auto plain_run = mlo::run::make_experiment(
      mlo::run::parse_run_config(yaml, "focal.yaml", {"reweighting.focal.gamma=0"}));
  plain_run->engine().run();
  const auto plain =
      std::dynamic_pointer_cast<rw::Classifier>(plain_run->engine().problems().front());
  const at::Tensor plain_losses = torch::nn::functional::cross_entropy(
      plain->logits(batch.data).to(torch::kDouble), batch.target,
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  CHECK(plain->training_step(batch).item<double>() ==
        Approx(plain_losses.mean().item<double>()).epsilon(1e-5));
  // gamma < 0 is refused naming the key.
  CHECK_THROWS_WITH(mlo::run::parse_run_config(yaml, "focal.yaml", {"reweighting.focal.gamma=-1"}),
                    Contains("reweighting.focal.gamma"));
}

}  // namespace long_tail_baselines_test
