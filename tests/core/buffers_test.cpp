// Buffers (batch-norm running statistics) change only in their own problem's training step: the
// upper problem's forward through the lower model and every hypergradient re-evaluation (DARTS
// runs two, at perturbed weights) must leave them as the training batches alone would.
//
// The lower model normalizes its input with a BatchNorm1d (no affine part) before a linear
// layer, so its running statistics depend only on which batches went through it, not on any
// weight: after N training steps they are the exponential moving averages of the N training
// batches' means and unbiased variances, and num_batches_tracked is N. The meta batches are
// drawn far from the training ones (mean 5, std 3), so any meta or re-evaluation pass that leaks
// into the running statistics shows up at once.
#include <mlo/mlo.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

namespace buffers_test {

namespace {

constexpr double kMomentum = 0.1;

struct NormedLinearImpl : torch::nn::Module {
  NormedLinearImpl() {
    norm = register_module(
        "norm", torch::nn::BatchNorm1d(
                    torch::nn::BatchNormOptions(4).affine(false).momentum(kMomentum)));
    linear = register_module("linear", torch::nn::Linear(4, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) { return linear->forward(norm->forward(x)); }
  torch::nn::BatchNorm1d norm{nullptr};
  torch::nn::Linear linear{nullptr};
};
TORCH_MODULE(NormedLinear);

struct Upper;

struct Lower : mlo::Problem {
  using mlo::Problem::Problem;
  Upper* upper = nullptr;
  torch::Tensor training_step(const mlo::Batch& b) override;
};

// Learns one L2 weight per input feature of the lower model from the meta batches.
struct Upper : mlo::Problem {
  using mlo::Problem::Problem;
  Lower* lower = nullptr;
  torch::Tensor lambda() const { return module().parameters()[0]; }
  torch::Tensor training_step(const mlo::Batch& b) override {
    auto out = lower->module_as<NormedLinearImpl>()->forward(b.data);
    return torch::mse_loss(out, b.target);
  }
};

torch::Tensor Lower::training_step(const mlo::Batch& b) {
  auto model = module_as<NormedLinearImpl>();
  return torch::mse_loss(model->forward(b.data), b.target) +
         (upper->lambda() * model->linear->weight.pow(2)).sum();
}

struct Result {
  torch::Tensor running_mean, running_var;
  int64_t tracked = 0;
};

Result run(const mlo::ProblemConfig& method, const std::vector<mlo::Batch>& train,
           const std::vector<mlo::Batch>& meta, int64_t steps) {
  torch::manual_seed(0);
  auto lower = std::make_shared<Lower>("lower", mlo::ProblemConfig(method).unroll_steps(2));
  lower->module(NormedLinear())
      .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.05))
      .data(train);
  auto upper = std::make_shared<Upper>("upper");
  upper->module(torch::nn::Linear(torch::nn::LinearOptions(4, 1).bias(false)))
      .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.05))
      .data(meta);
  lower->upper = upper.get();
  upper->lower = lower.get();
  mlo::Engine engine(mlo::EngineConfig().train_iters(steps));
  engine.add(upper).add(lower).link(upper, lower);
  engine.run();
  REQUIRE(upper->step_count() == steps / 2);
  auto norm = lower->module_as<NormedLinearImpl>()->norm;
  return {norm->running_mean.clone(), norm->running_var.clone(),
          norm->num_batches_tracked.item<int64_t>()};
}

}  // namespace

TEST_CASE("Buffers: batch-norm statistics see only the lower problem's training batches",
          "[core][buffers]") {
  torch::manual_seed(1);
  constexpr int64_t kSteps = 6;
  std::vector<mlo::Batch> train, meta;
  for (int64_t i = 0; i < kSteps; ++i) {
    train.emplace_back(torch::randn({16, 4}), torch::randn({16, 1}));
    meta.emplace_back(5.0 + 3.0 * torch::randn({16, 4}), torch::randn({16, 1}));
  }
  // The closed form: running = (1 - m) running + m * batch statistic, from mean 0 and var 1.
  torch::Tensor mean = torch::zeros({4}), var = torch::ones({4});
  for (const auto& b : train) {
    mean = (1 - kMomentum) * mean + kMomentum * b.data.mean(0);
    var = (1 - kMomentum) * var + kMomentum * b.data.var(0, /*unbiased=*/true);
  }

  const std::vector<std::pair<const char*, mlo::ProblemConfig>> methods = {
      {"darts", mlo::ProblemConfig().method(mlo::DartsOptions())},
      {"neumann", mlo::ProblemConfig().method(mlo::NeumannOptions().iterations(3).alpha(0.1))},
      {"cg", mlo::ProblemConfig().method(mlo::CGOptions().iterations(3))}};
  for (const auto& [name, method] : methods) {
    INFO("method " << name);
    const Result r = run(method, train, meta, kSteps);
    CHECK(r.tracked == kSteps);
    const double mean_diff = (r.running_mean - mean).abs().max().item<double>();
    const double var_diff = (r.running_var - var).abs().max().item<double>();
    INFO("max |running_mean - expected| " << mean_diff << ", max |running_var - expected| "
                                          << var_diff);
    CHECK(mean_diff < 1e-6);
    CHECK(var_diff < 1e-5);
  }
}

}  // namespace buffers_test
