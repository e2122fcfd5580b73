// Quickstart: learn one L2 weight per feature of a logistic regression (two levels, in code).
//   inner: w = argmin_w BCE(train; w) + 1/2 sum_j lambda_j w_j^2      (restarts every unroll)
//   outer: lambda = argmin BCE(valid; w(lambda))                       (lambda kept positive)
//
//   build/examples/quickstart [DIR] [--resume] [--overwrite]
// writes its run into DIR (default runs/quickstart): config.yaml, log.txt, metrics.csv and
// .jsonl, TensorBoard files in tb/, state.pt, results.json. Ctrl-C saves the state; --resume
// continues from it; `build/mlo plot DIR` draws the curves.
#include <mlo/mlo.h>
#include <torch/torch.h>

#include <cstdio>

struct Inner;
struct Outer : mlo::Problem {
  using mlo::Problem::Problem;
  mlo::Handle<Inner> inner{this, "inner"};  // linked by the engine: a typed, non-owning handle
  torch::Tensor training_step(const mlo::Batch& b) override;
  void param_callback() override {  // keep the weights positive
    torch::NoGradGuard no_grad;
    lambda().clamp_min_(1e-8);
  }
  torch::Tensor lambda() const { return module().parameters()[0]; }
};

struct Inner : mlo::Problem {
  using mlo::Problem::Problem;
  mlo::Handle<Outer> outer{this, "outer"};
  torch::Tensor logits(const torch::Tensor& x) const {
    return module_as<torch::nn::LinearImpl>()->forward(x).squeeze(-1);
  }
  torch::Tensor training_step(const mlo::Batch& b) override {
    const auto& w = module_as<torch::nn::LinearImpl>()->weight;
    return torch::binary_cross_entropy_with_logits(logits(b.data), b.target) +
           0.5 * (outer->lambda() * w.squeeze(0).pow(2)).sum();
  }
  void on_inner_loop_start() override {  // every unroll starts from w = 0
    torch::NoGradGuard no_grad;
    for (auto& p : module().parameters()) p.zero_();
  }
};

torch::Tensor Outer::training_step(const mlo::Batch& b) {
  return torch::binary_cross_entropy_with_logits(inner->logits(b.data), b.target);
}

int main(int argc, char** argv) {
  return mlo::guard([&] {  // an mlo::Error becomes an error line and exit status 2
    torch::manual_seed(0);
    const auto x = torch::randn({1000, 20});
    const auto y =
        (x.matmul(torch::randn({20})) + 0.1 * torch::randn({1000}) > 0).to(torch::kFloat);
    const mlo::Batch train(x.slice(0, 0, 500), y.slice(0, 0, 500));
    const mlo::Batch valid(x.slice(0, 500), y.slice(0, 500));

    auto inner = std::make_shared<Inner>(
        "inner", mlo::ProblemConfig().unroll_steps(100).method(mlo::NeumannOptions().iterations(5)));
    inner->module(torch::nn::Linear(20, 1))
        .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1))
        .data(std::vector<mlo::Batch>{train});
    auto outer = std::make_shared<Outer>("outer");
    outer->module(torch::nn::Linear(torch::nn::LinearOptions(20, 1).bias(false)));
    torch::nn::init::ones_(outer->lambda());
    outer->optimizer<torch::optim::SGD>(torch::optim::SGDOptions(1.0).momentum(0.9))
        .data(std::vector<mlo::Batch>{valid});

    mlo::Engine engine(mlo::EngineConfig().train_iters(2000).valid_step(500));
    engine.add(outer).add(inner).link(/*upper=*/outer, /*lower=*/inner);
    engine.validation([&] {
      torch::NoGradGuard no_grad;
      return mlo::Metrics{{"valid/loss", outer->training_step(valid).item<double>()}};
    });
    mlo::Run run(engine, mlo::RunOptions::from_command_line(argc, argv, "runs/quickstart"));
    const mlo::RunResult result = run.start();  // Ctrl-C saves; --resume continues
    if (!result.interrupted && !result.already_finished) {
      std::printf("validation loss %.4f, mean lambda %.4f\n", result.valid.at("valid/loss"),
                  outer->lambda().mean().item<double>());
    }
  });
}
