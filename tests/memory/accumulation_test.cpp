// Gradient accumulation: G micro-batches of b/G equal one batch of b (models without batch norm),
// for a lower and an upper level, and lower the peak activation memory.
#include "support/toy.h"

#include <mlo/memory/meter.h>

#include <catch2/catch.hpp>

namespace accumulation_test {

using mlo::ProblemConfig;

namespace {

// Splits `batch` into `parts` consecutive micro-batches.
std::vector<mlo::Batch> split(const mlo::Batch& batch, int64_t parts) {
  std::vector<mlo::Batch> out;
  const int64_t size = batch.size() / parts;
  for (int64_t i = 0; i < parts; ++i) {
    out.emplace_back(batch.data.slice(0, i * size, (i + 1) * size),
                     batch.target.slice(0, i * size, (i + 1) * size));
  }
  return out;
}

struct Regression : mlo::Problem {
  using mlo::Problem::Problem;
  torch::Tensor training_step(const mlo::Batch& b) override {
    auto out = module_as<torch::nn::SequentialImpl>()->forward(b.data);
    return torch::mse_loss(out, b.target);
  }
};

std::shared_ptr<Regression> regression(int64_t accumulation, std::vector<mlo::Batch> data,
                                       int64_t width = 16) {
  torch::manual_seed(3);
  auto p = std::make_shared<Regression>("reg", ProblemConfig().gradient_accumulation(accumulation));
  p->module(torch::nn::Sequential(torch::nn::Linear(8, width), torch::nn::Tanh(),
                                  torch::nn::Linear(width, 2)))
      .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1).momentum(0.9))
      .data(std::move(data));
  return p;
}

void require_same(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b,
                  double tol) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double diff = (a[i] - b[i]).abs().max().item<double>();
    INFO("parameter " << i << ": max |difference| " << diff);
    CHECK(diff <= tol);
  }
}

}  // namespace

TEST_CASE("Accumulation: 4 micro-batches of 8 equal one batch of 32 (lower level)",
          "[memory][accumulation]") {
  torch::manual_seed(0);
  std::vector<mlo::Batch> big;
  std::vector<mlo::Batch> micro;
  for (int i = 0; i < 3; ++i) {
    mlo::Batch b(torch::randn({32, 8}), torch::randn({32, 2}));
    big.push_back(b);
    for (auto& m : split(b, 4)) micro.push_back(m);
  }
  auto one = regression(1, big);
  auto four = regression(4, micro);
  for (auto [p, steps] : {std::pair{one, 3}, std::pair{four, 12}}) {
    mlo::Engine engine(mlo::EngineConfig().train_iters(steps));
    engine.add(p);
    engine.run();
  }
  CHECK(four->optimizer_steps() == 3);
  require_same(one->parameters(), four->parameters(), 1e-5);
}

namespace {

// Upper level: per-output weights of the lower's penalty, trained on validation data.
struct Weights : mlo::Problem {
  using mlo::Problem::Problem;
  mlo::Problem* lower = nullptr;
  torch::Tensor lambda() const { return module().parameters()[0]; }
  torch::Tensor training_step(const mlo::Batch& b) override {
    auto out = lower->module_as<torch::nn::LinearImpl>()->forward(b.data);
    return torch::mse_loss(out, b.target);
  }
};

struct Penalized : mlo::Problem {
  using mlo::Problem::Problem;
  Weights* upper = nullptr;
  mlo::Batch train;
  torch::Tensor training_step(const mlo::Batch&) override {
    auto linear = module_as<torch::nn::LinearImpl>();
    return torch::mse_loss(linear->forward(train.data), train.target) +
           (upper->lambda().reshape({3, 1}) * linear->weight.pow(2)).sum();
  }
};

}  // namespace

TEST_CASE("Accumulation: an upper level steps with the mean of its micro-step hypergradients",
          "[memory][accumulation]") {
  torch::manual_seed(1);
  const mlo::Batch train(torch::randn({32, 6}), torch::randn({32, 3}));
  const mlo::Batch valid(torch::randn({16, 6}), torch::randn({16, 3}));
  auto run = [&](int64_t accumulation) {
    torch::manual_seed(2);
    // The lower level does not move (lr 0), so every micro-step of the upper level sees the same
    // lower weights and the comparison isolates the upper level's accumulation.
    auto lower = std::make_shared<Penalized>(
        "lower", ProblemConfig().method(mlo::NeumannOptions().iterations(3).alpha(0.1)));
    lower->module(torch::nn::Linear(6, 3))
        .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.0));
    lower->train = train;
    auto upper =
        std::make_shared<Weights>("upper", ProblemConfig().gradient_accumulation(accumulation));
    upper->module(torch::nn::Linear(torch::nn::LinearOptions(3, 1).bias(false)))
        .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.5).momentum(0.5))
        .data(accumulation == 1 ? std::vector<mlo::Batch>{valid} : split(valid, accumulation));
    lower->upper = upper.get();
    upper->lower = lower.get();
    mlo::Engine engine(mlo::EngineConfig().train_iters(2 * accumulation));
    engine.add(upper).add(lower).link(upper, lower);
    engine.run();
    REQUIRE(upper->optimizer_steps() == 2);
    return upper->parameters();
  };
  require_same(run(1), run(4), 1e-5);
}

TEST_CASE("Accumulation: G=4 lowers the peak activation memory at the same effective batch",
          "[memory][accumulation]") {
  torch::manual_seed(0);
  const mlo::Batch batch(torch::randn({256, 8}), torch::randn({256, 2}));
  auto peak = [&](int64_t accumulation) {
    auto p = regression(accumulation, split(batch, accumulation), /*width=*/512);
    mlo::Engine engine(mlo::EngineConfig().train_iters(accumulation).track_memory(true));
    engine.add(p);
    engine.run();
    return engine.memory_meter()->stats().at({"reg", "forward"}).peak;
  };
  const int64_t g1 = peak(1);
  const int64_t g4 = peak(4);
  const double ratio = static_cast<double>(g4) / static_cast<double>(g1);
  WARN("peak forward memory: G=1 " << g1 << " B, G=4 " << g4 << " B, ratio " << ratio);
  CHECK(ratio < 0.5);
}

namespace {

// Lower level whose loss depends on its batch: ridge regression with per-output L2 weights that
// belong to the upper level.
struct BatchPenalized : mlo::Problem {
  using mlo::Problem::Problem;
  Weights* upper = nullptr;
  torch::Tensor training_step(const mlo::Batch& b) override {
    auto linear = module_as<torch::nn::LinearImpl>();
    return torch::mse_loss(linear->forward(b.data), b.target) +
           (upper->lambda().reshape({3, 1}) * linear->weight.pow(2)).sum();
  }
};

}  // namespace

TEST_CASE("Accumulation: a lower level's hypergradient uses all G micro-batches (large batch)",
          "[memory][accumulation][hypergrad]") {
  // G = 4 micro-batches of 8 against one batch of 32, through 3 upper steps (unroll 2), with
  // each method: the upper level's parameters must match the large-batch run.
  torch::manual_seed(4);
  std::vector<mlo::Batch> big, micro;
  for (int i = 0; i < 6; ++i) {
    mlo::Batch b(torch::randn({32, 6}, torch::kDouble), torch::randn({32, 3}, torch::kDouble));
    big.push_back(b);
    for (auto& m : split(b, 4)) micro.push_back(m);
  }
  const mlo::Batch valid(torch::randn({16, 6}, torch::kDouble),
                         torch::randn({16, 3}, torch::kDouble));
  const std::vector<std::pair<const char*, mlo::ProblemConfig>> methods = {
      {"darts", ProblemConfig().method(mlo::DartsOptions().alpha(0.01))},
      {"neumann", ProblemConfig().method(mlo::NeumannOptions().iterations(3).alpha(0.1))},
      {"cg", ProblemConfig().method(mlo::CGOptions().iterations(3).alpha(0.5))}};
  for (const auto& [name, method] : methods) {
    INFO("method " << name);
    auto run = [&](int64_t accumulation) {
      torch::manual_seed(2);
      auto lower = std::make_shared<BatchPenalized>(
          "lower", ProblemConfig(method).unroll_steps(2).gradient_accumulation(accumulation));
      lower->module(torch::nn::Linear(6, 3))
          .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1).momentum(0.5))
          .data(accumulation == 1 ? big : micro);
      lower->module().to(torch::kDouble);
      auto upper = std::make_shared<Weights>("upper");
      upper->module(torch::nn::Linear(torch::nn::LinearOptions(3, 1).bias(false)))
          .optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.5))
          .data(std::vector<mlo::Batch>{valid});
      upper->module().to(torch::kDouble);
      lower->upper = upper.get();
      upper->lower = lower.get();
      mlo::Engine engine(mlo::EngineConfig().train_iters(6 * accumulation));
      engine.add(upper).add(lower).link(upper, lower);
      engine.run();
      REQUIRE(upper->optimizer_steps() == 3);
      REQUIRE(lower->optimizer_steps() == 6);
      std::vector<torch::Tensor> out = upper->parameters();
      for (const auto& t : lower->parameters()) out.push_back(t);
      return out;
    };
    require_same(run(1), run(4), 1e-5);
  }
}

}  // namespace accumulation_test
