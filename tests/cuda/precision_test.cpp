// [cuda] Mixed precision on a GPU: an fp16 level (autocast, dynamic loss scaling, the fused
// unscale) trains as fp32 does, within fp16's rounding; a forced overflow skips the step and
// backs the scale off; a bf16 level runs without a scaler.
#include <mlo/core/engine.h>
#include <mlo/core/problem.h>
#include <mlo/memory/precision.h>

#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <memory>

namespace {

// Least squares with a 64 -> 16 linear layer on a fixed batch: one level, plain SGD.
struct Regression : mlo::Problem {
  Regression(mlo::ProblemConfig config, const torch::Device& device)
      : mlo::Problem("regression", std::move(config)) {
    torch::manual_seed(5);
    module(torch::nn::Linear(64, 16));
    module().to(device);
    optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.05));
    const auto x = torch::randn({128, 64});
    const auto y = torch::randn({128, 16});
    data(std::vector<mlo::Batch>{mlo::Batch(x, y)});  // moved to the device with every draw
  }
  torch::Tensor training_step(const mlo::Batch& batch) override {
    const auto out = module_as<torch::nn::LinearImpl>()->forward(batch.data);
    return torch::mse_loss(out.to(torch::kFloat), batch.target);
  }
  torch::Tensor weight() const { return module_as<torch::nn::LinearImpl>()->weight; }
};

// The weight after `steps` steps at `config`'s precision on cuda:0 (with the problem, for its
// scaler).
std::shared_ptr<Regression> train(const mlo::ProblemConfig& config, int64_t steps) {
  auto problem = std::make_shared<Regression>(config, torch::Device(torch::kCUDA, 0));
  mlo::Engine engine;
  engine.add(problem);
  engine.initialize();
  for (int64_t i = 0; i < steps; ++i) engine.step();
  return problem;
}

double relative(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).norm() / b.norm()).item<double>();
}

}  // namespace

TEST_CASE("CUDA: an fp16 level's 20 steps equal fp32's to 1e-2 relative, none skipped",
          "[cuda][precision]") {
  const auto fp32 = train(mlo::ProblemConfig(), 20);
  const auto fp16 = train(mlo::ProblemConfig().precision(mlo::Precision::kFP16), 20);
  REQUIRE(fp16->loss_scaler() != nullptr);  // fp16 gets the dynamic scaler by default
  CHECK(fp16->loss_scaler()->skipped_steps() == 0);
  CHECK(fp16->loss_scaler()->scale() == 65536.0);
  CHECK(fp16->optimizer_steps() == 20);
  // fp16 keeps 11 significant bits (relative rounding 2^-11, about 5e-4) in the matmuls; the
  // weights themselves stay fp32.
  CHECK(fp16->weight().scalar_type() == torch::kFloat);
  const double error = relative(fp16->weight(), fp32->weight());
  CAPTURE(error);
  CHECK(error < 1e-2);
  CHECK(error > 0);  // fp16 did run: the result is not bit-identical to fp32
  const auto bf16 = train(mlo::ProblemConfig().precision(mlo::Precision::kBF16), 20);
  CHECK(bf16->loss_scaler() == nullptr);
  CHECK(relative(bf16->weight(), fp32->weight()) < 5e-2);  // bf16: 8 bits, 2^-8 = 4e-3
}

TEST_CASE("CUDA: a forced fp16 overflow skips the step and backs the scale off",
          "[cuda][precision]") {
  // A scale of 2^40 makes the fp16 backward of the matmul overflow (its largest value is 65504);
  // one backoff by 2^-30 leaves 2^10, at which the next step is clean.
  const auto config = mlo::ProblemConfig()
                          .precision(mlo::Precision::kFP16)
                          .loss_scaling(mlo::LossScaling()
                                            .init_scale(std::ldexp(1.0, 40))
                                            .backoff_factor(std::ldexp(1.0, -30)));
  auto problem = std::make_shared<Regression>(config, torch::Device(torch::kCUDA, 0));
  const auto before = problem->weight().detach().clone();
  mlo::Engine engine;
  engine.add(problem);
  engine.initialize();
  engine.step();
  CHECK(torch::equal(problem->weight().detach(), before));  // skipped: the weight is untouched
  CHECK(problem->optimizer_steps() == 0);
  CHECK(problem->loss_scaler()->skipped_steps() == 1);
  CHECK(problem->loss_scaler()->scale() == 1024.0);
  engine.step();
  CHECK(problem->optimizer_steps() == 1);
  CHECK(problem->loss_scaler()->skipped_steps() == 1);
  // The clean step is fp32's first step, within fp16's rounding.
  const auto reference = train(mlo::ProblemConfig(), 1);
  CHECK(relative(problem->weight(), reference->weight()) < 1e-3);
}
