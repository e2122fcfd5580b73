// DifferentiableOptimizer reproduces LibTorch's SGD / Adam / AdamW steps (settings and state
// read from the real optimizer), and refuses optimizers it has no update rule for.
#include <mlo/base/error.h>
#include <mlo/hypergrad/differentiable_optimizer.h>

#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <functional>
#include <memory>

namespace differentiable_optimizer_test {

using mlo::hypergrad::DifferentiableOptimizer;
using mlo::hypergrad::OptimizerState;

TEST_CASE("DifferentiableOptimizer: replayed steps equal the real optimizer's (double)",
          "[hypergrad][optimizer]") {
  using Make = std::function<std::shared_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;
  const std::vector<std::pair<const char*, Make>> optimizers = {
      {"sgd",
       [](auto p) {
         return std::make_shared<torch::optim::SGD>(p, torch::optim::SGDOptions(0.1));
       }},
      {"sgd momentum dampening wd",
       [](auto p) {
         return std::make_shared<torch::optim::SGD>(
             p, torch::optim::SGDOptions(0.1).momentum(0.9).dampening(0.2).weight_decay(0.05));
       }},
      {"sgd nesterov",
       [](auto p) {
         return std::make_shared<torch::optim::SGD>(
             p, torch::optim::SGDOptions(0.1).momentum(0.8).nesterov(true));
       }},
      {"adam amsgrad wd",
       [](auto p) {
         return std::make_shared<torch::optim::Adam>(
             p, torch::optim::AdamOptions(0.01).amsgrad(true).weight_decay(0.1));
       }},
      {"adamw",
       [](auto p) {
         return std::make_shared<torch::optim::AdamW>(p, torch::optim::AdamWOptions(0.01));
       }},
  };
  for (const auto& [name, make] : optimizers) {
    INFO(name);
    torch::manual_seed(0);
    std::vector<torch::Tensor> params = {torch::randn({4, 3}, torch::kDouble).requires_grad_(),
                                         torch::randn({5}, torch::kDouble).requires_grad_()};
    auto real = make(params);
    DifferentiableOptimizer model(*real, params, "test");
    OptimizerState state = model.read_state(*real, params);
    for (int step = 0; step < 4; ++step) {
      std::vector<torch::Tensor> grads = {torch::randn({4, 3}, torch::kDouble),
                                          torch::randn({5}, torch::kDouble)};
      if (step == 2) grads[1].zero_();  // zero gradient entries: sqrt(0) in Adam's denominator
      for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = grads[i].clone();
      const auto lrs = model.learning_rates(*real);
      real->step();
      state = model.step(state, grads, lrs);
      for (size_t i = 0; i < params.size(); ++i) {
        INFO("step " << step << " parameter " << i);
        CHECK((state.params[i] - params[i].detach()).abs().max().item<double>() < 1e-14);
      }
    }
    // The state read back from the real optimizer matches the replayed one.
    const OptimizerState read = model.read_state(*real, params);
    const auto a = read.tensors();
    const auto b = state.tensors();
    for (size_t k = 0; k < a.size(); ++k) {
      INFO("state tensor " << k);
      REQUIRE(a[k].defined() == b[k].defined());
      if (a[k].defined()) CHECK((a[k] - b[k]).abs().max().item<double>() < 1e-14);
    }
  }
}

TEST_CASE("DifferentiableOptimizer: an unsupported optimizer is named", "[hypergrad][optimizer]") {
  std::vector<torch::Tensor> params = {torch::randn({3}).requires_grad_()};
  torch::optim::Adagrad adagrad(params, torch::optim::AdagradOptions(0.1));
  CHECK_THROWS_WITH(DifferentiableOptimizer(adagrad, params, "inner"),
                    Catch::Contains("inner") && Catch::Contains("Adagrad"));
}

namespace {
// A subclass whose step() is not SGD's update: must not be taken for SGD.
struct HalfStepSGD : torch::optim::SGD {
  using torch::optim::SGD::SGD;
  torch::Tensor step(LossClosure closure = nullptr) override {
    torch::NoGradGuard no_grad;
    for (auto& group : param_groups()) {
      for (auto& p : group.params()) {
        if (p.grad().defined()) p.add_(p.grad(), -0.05);
      }
    }
    (void)closure;
    return {};
  }
};
}  // namespace

TEST_CASE("DifferentiableOptimizer: refuses a subclass of SGD (its step may differ)",
          "[hypergrad][differentiable_optimizer]") {
  torch::Tensor w = torch::zeros({2}, torch::kDouble).requires_grad_(true);
  HalfStepSGD subclass({w}, torch::optim::SGDOptions(0.1));
  CHECK_THROWS_WITH(mlo::hypergrad::DifferentiableOptimizer(subclass, {w}, "p"),
                    "problem 'p': its optimizer (a subclass of SGD) has no differentiable update "
                    "rule; supported: exactly SGD (with momentum, Nesterov, weight decay), Adam, "
                    "AdamW");
  torch::optim::SGD exact({w}, torch::optim::SGDOptions(0.1));
  CHECK_NOTHROW(mlo::hypergrad::DifferentiableOptimizer(exact, {w}, "p"));
}

}  // namespace differentiable_optimizer_test
