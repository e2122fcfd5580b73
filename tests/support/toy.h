#pragma once
// A tiny problem for engine tests: one scalar parameter w and the loss
//   (w - target)^2 + sum over `inputs` of w * input.w
// where `inputs` are the problems whose parameters enter this loss (u2l uppers and l2u lowers).
// Every optimizer step is appended to a shared trace as (name, local step).

#include <mlo/mlo.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mlo_test {

struct ScalarImpl : torch::nn::Module {
  explicit ScalarImpl(double value) {
    w = register_parameter("w", torch::full({1}, value, torch::kDouble));
  }
  torch::Tensor w;
};
TORCH_MODULE(Scalar);

using Trace = std::vector<std::pair<std::string, int64_t>>;

struct Toy : mlo::Problem {
  Toy(std::string name, mlo::ProblemConfig config, std::shared_ptr<Trace> trace, double init = 0.5,
      double lr = 0.1)
      : mlo::Problem(std::move(name), std::move(config)), trace(std::move(trace)) {
    module(Scalar(init)).optimizer<torch::optim::SGD>(torch::optim::SGDOptions(lr));
  }
  torch::Tensor training_step(const mlo::Batch& batch) override {
    torch::Tensor loss = (w() - target).pow(2).sum();
    if (batch.data.defined()) loss = loss + (w() * batch.data).sum();
    for (const auto& input : inputs) loss = loss + (w() * input->w()).sum();
    return loss;
  }
  void param_callback() override {
    if (trace) trace->emplace_back(name(), step_count());
  }
  torch::Tensor w() const { return module_as<ScalarImpl>()->w; }
  double value() const { return w().item<double>(); }

  std::vector<Toy*> inputs;  // non-owning: the engine owns the problems
  std::shared_ptr<Trace> trace;
  double target = 1.0;
};

inline std::shared_ptr<Toy> toy(const std::string& name, mlo::ProblemConfig config,
                                const std::shared_ptr<Trace>& trace) {
  return std::make_shared<Toy>(name, std::move(config), trace);
}

// Links upper and lower both ways, in the engine and in their losses.
inline void link(mlo::Engine& engine, const std::shared_ptr<Toy>& upper,
                 const std::shared_ptr<Toy>& lower) {
  engine.link(upper, lower);
  upper->inputs.push_back(lower.get());
  lower->inputs.push_back(upper.get());
}

// Local steps at which `name` stepped its optimizer, in order.
inline std::vector<int64_t> steps_of(const Trace& trace, const std::string& name) {
  std::vector<int64_t> out;
  for (const auto& [who, step] : trace) {
    if (who == name) out.push_back(step);
  }
  return out;
}

}  // namespace mlo_test
