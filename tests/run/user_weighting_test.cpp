// A weighting scheme defined outside libmlo (examples/self_paced_weighting/self_paced.h): its
// loss in closed form, selected by its name from YAML with its own keys and checks, and its
// pace growing with the classifier's steps.
#include "examples/self_paced_weighting/self_paced.h"

#include <mlo/base/error.h>
#include <mlo/run/experiment.h>
#include <mlo/run/yaml.h>

#include <support/three_samples.h>

#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <cmath>
#include <memory>
#include <tuple>

namespace user_weighting_test {

using Catch::Contains;
namespace rw = mlo::problems::reweighting;

namespace {

const char* kYaml = R"(experiment: reweighting
name: user_weighting_test
seed: 2
threads: 1
engine: {train_iters: 2, valid_step: 0, log_step: 0, save_step: 0}
data: {dataset: synthetic, synthetic_size: 60, synthetic_test_size: 3, imbalance: 10,
       meta_size: 20, valid_size: 50, batch_size: 8, meta_batch_size: 10}
reweighting: {method: self_paced, self_paced: {start: 0.25, ramp_steps: 4}}
problems:
  classifier:
    model: {name: cnn}
    optimizer: {name: sgd, lr: 0.05}
)";

// -log softmax(z)_y for two logits.
double cross_entropy(double z0, double z1, int64_t y) {
  return std::log(std::exp(z0) + std::exp(z1)) - (y == 0 ? z0 : z1);
}

}  // namespace

TEST_CASE("User weighting: self-paced learning trains on the easiest fraction of a batch",
          "[run][reweighting]") {
  rw::Classifier c("classifier");
  c.module(mlo_test::identity_chain());
  c.num_classes = 2;
  self_paced::SelfPacedWeighting spl;
  spl.ramp_steps = 250;
  spl.start = 0.6;  // ceil(0.6 * 3) = 2 of the losses 0.313, 0.693 and 2.127: the third waits
  c.weighting(spl);
  const double l0 = cross_entropy(1, 0, 0), l1 = cross_entropy(0, 0, 1);
  const at::Tensor loss = c.training_step(mlo_test::three_samples());
  CHECK(loss.item<double>() == Approx((l0 + l1) / 2).epsilon(1e-14));
  CHECK(c.metrics().at("weight_mean") == Approx(2.0 / 3).epsilon(1e-14));
  CHECK(c.metrics().at("wclass/1") == Approx(1 / (2.0 / 3)).epsilon(1e-14));
  // Its gradient is that of the kept samples: d/dbias = sum_kept (softmax - onehot) / 2.
  loss.backward();
  const auto x = mlo_test::three_samples().data.slice(0, 0, 2);
  const auto y = mlo_test::three_samples().target.slice(0, 0, 2);
  const auto want = (torch::softmax(x, 1) - torch::one_hot(y, 2).to(torch::kDouble)).sum(0) / 2;
  const at::Tensor bias = c.module_as<mlo::nn::ChainImpl>()->named_parameters()["fc.bias"];
  CHECK(torch::allclose(bias.grad(), want, 1e-14, 1e-14));
  // The pace: linear from start to 1 over ramp_steps.
  CHECK(spl.fraction(0) == 0.6);
  CHECK(spl.fraction(125) == Approx(0.8).epsilon(1e-14));
  CHECK(spl.fraction(250) == 1.0);
  CHECK(spl.fraction(1000) == 1.0);
  spl.start = 0;
  CHECK_THROWS_AS(c.weighting(spl), mlo::Error);
}

TEST_CASE("User weighting: selected by name in YAML, its keys reach the classifier",
          "[run][reweighting]") {
  auto experiment = mlo::run::make_experiment(mlo::run::parse_run_config(kYaml, "spl.yaml"));
  CHECK_THAT(experiment->describe(), Contains("self-paced learning"));
  experiment->engine().run();
  const auto c = std::dynamic_pointer_cast<rw::Classifier>(experiment->engine().problems().front());
  REQUIRE(c);
  REQUIRE(c->weighting_as<self_paced::SelfPacedWeighting>() != nullptr);
  // The first step trains on start = 0.25 of its batch, the second on 0.25 + 0.75 / 4.
  REQUIRE(c->step_count() == 2);
  CHECK(c->metrics().at("spl_fraction") == Approx(0.4375).epsilon(1e-14));
  // Evaluated again after it, the loss is the mean of the ceil(0.4375 * 8) = 4 smallest losses.
  const mlo::Batch batch = c->current_batch();
  const at::Tensor losses = torch::nn::functional::cross_entropy(
      c->logits(batch.data).to(torch::kDouble), batch.target,
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  REQUIRE(losses.size(0) == 8);
  const double want = std::get<0>(losses.sort()).slice(0, 0, 4).mean().item<double>();
  CHECK(c->training_step(batch).item<double>() == Approx(want).epsilon(1e-5));
  // Its checks name the key.
  CHECK_THROWS_WITH(
      mlo::run::parse_run_config(kYaml, "spl.yaml", {"reweighting.self_paced.start=1.5"}),
      Contains("reweighting.self_paced.start"));
}

}  // namespace user_weighting_test
