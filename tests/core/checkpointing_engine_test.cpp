// Activation checkpointing through the engine: a checkpointed lower level gives the upper level
// the same hypergradients (neumann and cg need exact Hessian-vector products through the
// recomputed blocks), also with gradient accumulation.
#include <mlo/memory/planner.h>
#include <mlo/mlo.h>
#include <mlo/nn/chain.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

namespace checkpointing_engine_test {

namespace {

struct Scale : mlo::Problem {  // upper: per-output scales of the lower's target
  using mlo::Problem::Problem;
  mlo::Problem* lower = nullptr;
  mlo::Batch valid;
  torch::Tensor training_step(const mlo::Batch&) override {
    auto out = lower->module_as<mlo::nn::ChainImpl>()->forward(valid.data);
    return torch::mse_loss(out, valid.target);
  }
};

struct Fit : mlo::Problem {  // lower: a tanh MLP chain fit to targets scaled by the upper
  using mlo::Problem::Problem;
  Scale* upper = nullptr;
  torch::Tensor training_step(const mlo::Batch& b) override {
    auto out = module_as<mlo::nn::ChainImpl>()->forward(b.data);
    return torch::mse_loss(out, b.target * upper->module().parameters()[0]);
  }
};

std::vector<torch::Tensor> run(mlo::ProblemConfig lower_config, int64_t steps,
                               bool* planned = nullptr) {
  torch::manual_seed(0);
  const mlo::Batch train(torch::randn({16, 4}, torch::kDouble),
                         torch::randn({16, 2}, torch::kDouble));
  const mlo::Batch valid(torch::randn({16, 4}, torch::kDouble),
                         torch::randn({16, 2}, torch::kDouble));
  mlo::nn::Chain chain;
  for (int i = 0; i < 6; ++i) {
    chain->push_back("fc" + std::to_string(i), torch::nn::Linear(i == 0 ? 4 : 8, 8))
        .push_back("act" + std::to_string(i), torch::nn::Functional(torch::tanh));
  }
  chain->push_back("head", torch::nn::Linear(8, 2));
  chain->to(torch::kDouble);
  auto lower = std::make_shared<Fit>("lower", lower_config);
  lower->module(chain)
      .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.05))
      .data(std::vector<mlo::Batch>{train});
  auto upper = std::make_shared<Scale>("upper");
  auto scales = std::make_shared<torch::nn::Module>();
  scales->register_parameter("s", torch::ones({2}, torch::kDouble));
  upper->module(scales).optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.5));
  upper->valid = valid;
  lower->upper = upper.get();
  upper->lower = lower.get();
  mlo::Engine engine(mlo::EngineConfig().train_iters(steps));
  engine.add(upper).add(lower).link(upper, lower);
  engine.run();
  if (planned) {
    const auto* plan = engine.checkpoint_plan(*lower);
    *planned = plan != nullptr && plan->num_checkpointed() > 0;
  }
  std::vector<torch::Tensor> out;
  for (const auto& p : upper->parameters()) out.push_back(p.detach().clone());
  for (const auto& p : lower->parameters()) out.push_back(p.detach().clone());
  return out;
}

void require_close(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double diff = (a[i] - b[i]).abs().max().item<double>();
    INFO("parameter " << i << ": max |difference| " << diff);
    CHECK(diff < 1e-10);
  }
}

}  // namespace

TEST_CASE("Checkpointing in the engine: same hypergradients and training as without",
          "[core][checkpointing]") {
  for (const auto& method :
       {mlo::ProblemConfig().method(mlo::NeumannOptions().iterations(3).alpha(0.1)),
        mlo::ProblemConfig().method(mlo::CGOptions().iterations(3))}) {
    const auto plain = run(mlo::ProblemConfig(method).unroll_steps(2), 6);
    bool planned = false;
    const auto checkpointed =
        run(mlo::ProblemConfig(method).unroll_steps(2).checkpointing(mlo::Checkpointing::kSqrt), 6,
            &planned);
    CHECK(planned);
    require_close(plain, checkpointed);
  }
}

TEST_CASE("Checkpointing in the engine composes with gradient accumulation",
          "[core][checkpointing]") {
  const auto config =
      mlo::ProblemConfig().method(mlo::CGOptions().iterations(2)).gradient_accumulation(2);
  const auto plain = run(mlo::ProblemConfig(config), 8);
  bool planned = false;
  const auto checkpointed =
      run(mlo::ProblemConfig(config).checkpointing(
              mlo::CheckpointingOptions(mlo::Checkpointing::kUniform).segments(3)),
          8, &planned);
  CHECK(planned);
  require_close(plain, checkpointed);
}

namespace {

struct Regress : mlo::Problem {  // one level: a float32 MLP chain under the level's precision
  using mlo::Problem::Problem;
  torch::Tensor training_step(const mlo::Batch& b) override {
    auto out = module_as<mlo::nn::ChainImpl>()->forward(b.data);
    return torch::mse_loss(out.to(torch::kFloat), b.target);
  }
};

// The parameters after `steps` steps of a float32 MLP trained under `config`.
std::vector<torch::Tensor> train_float(mlo::ProblemConfig config, int64_t steps,
                                       bool* planned = nullptr,
                                       std::vector<torch::Tensor>* initial = nullptr) {
  torch::manual_seed(0);
  const mlo::Batch batch(torch::randn({32, 16}), torch::randn({32, 4}));
  mlo::nn::Chain chain;
  for (int i = 0; i < 6; ++i) {
    chain->push_back("fc" + std::to_string(i), torch::nn::Linear(16, 16))
        .push_back("act" + std::to_string(i), torch::nn::Functional(torch::tanh));
  }
  chain->push_back("head", torch::nn::Linear(16, 4));
  auto problem = std::make_shared<Regress>("regress", config);
  problem->module(chain)
      .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1))
      .data(std::vector<mlo::Batch>{batch});
  if (initial) {
    for (const auto& p : problem->parameters()) initial->push_back(p.detach().clone());
  }
  mlo::Engine engine(mlo::EngineConfig().train_iters(steps));
  engine.add(problem);
  engine.run();
  if (planned) {
    const auto* plan = engine.checkpoint_plan(*problem);
    *planned = plan != nullptr && plan->num_checkpointed() > 0 &&
               plan->num_checkpointed() < plan->segments.size();
  }
  std::vector<torch::Tensor> out;
  for (const auto& p : problem->parameters()) out.push_back(p.detach().clone());
  return out;
}

}  // namespace

TEST_CASE("Checkpointing under bf16: the first step (planned inside autocast) trains every weight",
          "[core][checkpointing][precision]") {
  // The plan is made at the model's first forward, inside the level's autocast region. Its
  // profile's passes (one without grad) must not leave weight casts without autograd history
  // in autocast's cache: the real forward would reuse them and the stored segments' weights
  // would get no gradient (before the fix: silently zero; now that would be an error).
  const auto bf16 = mlo::ProblemConfig().precision(mlo::Precision::kBF16);
  std::vector<torch::Tensor> before;
  const auto plain = train_float(bf16, 1, nullptr, &before);
  bool planned = false;
  const auto checkpointed = train_float(
      mlo::ProblemConfig(bf16).checkpointing(
          mlo::CheckpointingOptions(mlo::Checkpointing::kOptimal).budget_fraction(0.5)),
      1, &planned);
  REQUIRE(planned);  // some segments stored, some recomputed
  REQUIRE(plain.size() == checkpointed.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    // Every weight moved, and by the same step as without checkpointing: the recomputation
    // repeats the forward's bf16 arithmetic exactly (tolerance 1e-6 for the summation order).
    const double moved = (plain[i] - before[i]).abs().max().item<double>();
    const double diff = (plain[i] - checkpointed[i]).abs().max().item<double>();
    INFO("parameter " << i << ": moved " << moved << ", |plain - checkpointed| " << diff);
    CHECK(moved > 1e-4);
    CHECK(diff <= 1e-6);
  }
}

}  // namespace checkpointing_engine_test
