#include "problems/hpo/logreg.h"

#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

namespace mlo {
namespace problems {
namespace hpo {

L2WeightsImpl::L2WeightsImpl(int64_t features, double init) {
  MLO_CHECK(features > 0, "L2Weights: features must be > 0, got ", features);
  weights = register_parameter("weights", torch::full({features}, init));
}

at::Tensor LogRegInner::logits(const at::Tensor& x) const {
  return module_as<torch::nn::LinearImpl>()->forward(x).squeeze(-1);
}

at::Tensor LogRegInner::training_step(const Batch& batch) {
  auto linear = module_as<torch::nn::LinearImpl>();
  const at::Tensor bce =
      torch::nn::functional::binary_cross_entropy_with_logits(logits(batch.data), batch.target);
  const at::Tensor penalty = 0.5 * (outer->weights() * linear->weight.squeeze(0).pow(2)).sum();
  return bce + penalty;
}

void LogRegInner::on_inner_loop_start() {
  torch::NoGradGuard no_grad;
  for (auto& p : module().parameters()) p.zero_();
}

at::Tensor LogRegOuter::training_step(const Batch& batch) {
  return torch::nn::functional::binary_cross_entropy_with_logits(inner->logits(batch.data),
                                                                 batch.target);
}

void LogRegOuter::param_callback() {
  torch::NoGradGuard no_grad;
  module_as<L2WeightsImpl>()->weights.clamp_min_(kMinWeight);
}

at::Tensor LogRegOuter::weights() const { return module_as<L2WeightsImpl>()->weights; }

LogRegData make_logreg_data(int64_t samples, int64_t features, double noise, uint64_t seed,
                            int64_t test_samples) {
  MLO_CHECK(samples >= 2, "make_logreg_data: samples must be >= 2, got ", samples);
  MLO_CHECK(test_samples >= 0, "make_logreg_data: test_samples must be >= 0, got ", test_samples);
  torch::manual_seed(seed);
  const at::Tensor w_true = torch::randn({features});
  const at::Tensor x = torch::randn({samples, features});
  const at::Tensor y = ((x.matmul(w_true) + noise * torch::randn({samples})) > 0).to(torch::kFloat);
  const int64_t half = samples / 2;
  LogRegData data{Batch(x.slice(0, 0, half), y.slice(0, 0, half)),
                  Batch(x.slice(0, half), y.slice(0, half)), Batch()};
  if (test_samples > 0) {
    const at::Tensor x_test = torch::randn({test_samples, features});
    const at::Tensor y_test =
        ((x_test.matmul(w_true) + noise * torch::randn({test_samples})) > 0).to(torch::kFloat);
    data.test = Batch(x_test, y_test);
  }
  return data;
}

LogRegHpo make_logreg_hpo(const LogRegData& data, ProblemConfig inner_config,
                          const LogRegHpoOptions& options) {
  const int64_t features = data.train.data.size(1);
  auto inner = std::make_shared<LogRegInner>("inner", std::move(inner_config));
  auto outer = std::make_shared<LogRegOuter>("outer");
  inner->module(torch::nn::Linear(features, 1))
      .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(options.inner_lr()))
      .data(std::vector<Batch>{data.train});
  outer->module(L2Weights(features, options.initial_weight()));
  // Frozen weights: the same pair with a zero learning rate, so lambda never moves.
  const double outer_lr = options.freeze_weights() ? 0.0 : options.outer_lr();
  outer->optimizer<torch::optim::SGD>(
      torch::optim::SGDOptions(outer_lr).momentum(options.outer_momentum()));
  outer->data(std::vector<Batch>{data.valid});
  // (linked here too, so the pair works outside an engine; an engine links them the same way)
  inner->outer.link(outer.get());
  outer->inner.link(inner.get());
  return {inner, outer};
}

double validation_loss(const LogRegHpo& hpo, const LogRegData& data) {
  torch::NoGradGuard no_grad;
  return hpo.outer->training_step(data.valid).item<double>();
}

}  // namespace hpo
}  // namespace problems
}  // namespace mlo
