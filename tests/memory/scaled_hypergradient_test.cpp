// Loss scaling on an upper level whose gradient flows through a hypergradient path: an overflow
// of the scaled upper loss makes the incoming vector non-finite. Every method must then do the
// same thing: skip the upper step, back the scale off, count the skip, and go on.
//
//   lower:  L(w; lambda) = a/2 w^2 - b w lambda        (float32, like a real model)
//   upper:  F(lambda; w) = 1/2 (w - g)^2, times 1e36 at the injected step (overflows once scaled)
#include <mlo/memory/precision.h>
#include <mlo/mlo.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

namespace scaled_hypergradient_test {

namespace {

constexpr double a = 2.0, b = 0.7, g = 3.0;
constexpr int64_t kInjectAt = 2;  // the upper step whose loss overflows

struct ScalarImpl : torch::nn::Module {
  explicit ScalarImpl(double value) { w = register_parameter("w", torch::full({1}, value)); }
  torch::Tensor w;
};
TORCH_MODULE(Scalar);

struct Upper;

struct Lower : mlo::Problem {
  using mlo::Problem::Problem;
  Upper* upper = nullptr;
  torch::Tensor w() const { return module_as<ScalarImpl>()->w; }
  torch::Tensor training_step(const mlo::Batch&) override;
};

struct Upper : mlo::Problem {
  using mlo::Problem::Problem;
  Lower* lower = nullptr;
  std::vector<double> lambdas;  // lambda at the start of each upper step
  int64_t inject_at = kInjectAt;
  torch::Tensor lambda() const { return module_as<ScalarImpl>()->w; }
  torch::Tensor training_step(const mlo::Batch&) override {
    lambdas.push_back(lambda().item<double>());
    torch::Tensor loss = (0.5 * (lower->w() - g).pow(2)).sum();
    if (static_cast<int64_t>(lambdas.size()) == inject_at) loss = loss * 1e36;
    return loss;
  }
};

torch::Tensor Lower::training_step(const mlo::Batch&) {
  return (0.5 * a * w().pow(2) - b * w() * upper->lambda()).sum();
}

struct Pair {
  std::shared_ptr<Lower> lower;
  std::shared_ptr<Upper> upper;
};

Pair make(const mlo::ProblemConfig& method, std::optional<mlo::LossScaling> scaling,
          int64_t upper_accumulation = 1) {
  Pair p;
  p.lower = std::make_shared<Lower>("lower", mlo::ProblemConfig(method).unroll_steps(2));
  p.lower->module(Scalar(0.2)).optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
  p.upper = std::make_shared<Upper>(
      "upper",
      mlo::ProblemConfig().loss_scaling(scaling).gradient_accumulation(upper_accumulation));
  p.upper->module(Scalar(0.5)).optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
  p.lower->upper = p.upper.get();
  p.upper->lower = p.lower.get();
  return p;
}

const std::vector<std::pair<const char*, mlo::ProblemConfig>>& methods() {
  static const std::vector<std::pair<const char*, mlo::ProblemConfig>> all = {
      {"darts", mlo::ProblemConfig().method(mlo::DartsOptions())},
      {"neumann", mlo::ProblemConfig().method(mlo::NeumannOptions().iterations(3).alpha(0.3))},
      {"cg", mlo::ProblemConfig().method(mlo::CGOptions().iterations(1))}};
  return all;
}

}  // namespace

TEST_CASE("Loss scaling through a hypergradient: an overflow skips the step with every method",
          "[memory][precision][hypergrad]") {
  for (const auto& [name, method] : methods()) {
    INFO("method " << name);
    auto p = make(method, mlo::LossScaling().init_scale(65536.0).growth_interval(1000));
    mlo::Engine engine(mlo::EngineConfig().train_iters(8));
    engine.add(p.upper).add(p.lower).link(p.upper, p.lower);
    REQUIRE_NOTHROW(engine.run());
    REQUIRE(p.upper->lambdas.size() == 4);
    const auto& l = p.upper->lambdas;
    // Step 1 moved lambda; the overflowing step 2 did not; steps 3 and 4 went on.
    CHECK(l[1] != l[0]);
    CHECK(l[2] == l[1]);
    CHECK(l[3] != l[2]);
    CHECK(std::isfinite(p.upper->lambda().item<double>()));
    CHECK(std::isfinite(p.lower->w().item<double>()));
    const mlo::memory::LossScaler* scaler = p.upper->loss_scaler();
    REQUIRE(scaler != nullptr);
    CHECK(scaler->skipped_steps() == 1);
    CHECK(scaler->scale() == 65536.0 * 0.5);
    CHECK(p.upper->optimizer_steps() == 3);
    CHECK(p.lower->optimizer_steps() == 8);  // the lower level is not affected
  }
}

TEST_CASE("Loss scaling: each upper step logs the scale and the skips after its own update",
          "[memory][precision][hypergrad]") {
  auto p = make(mlo::ProblemConfig().method(mlo::DartsOptions()),
                mlo::LossScaling().init_scale(65536.0).growth_interval(1000));
  mlo::Engine engine(mlo::EngineConfig().train_iters(8));
  engine.add(p.upper).add(p.lower).link(p.upper, p.lower);
  engine.initialize();
  // The metrics of each upper step, read right after the global step that ran it.
  std::vector<std::pair<double, double>> logged;
  for (int i = 0; i < 8; ++i) {
    engine.step();
    if (p.upper->lambdas.size() == logged.size()) continue;
    logged.emplace_back(p.upper->metrics().at("loss_scale"),
                        p.upper->metrics().at("skipped_steps"));
    // The lower level (fp32) has no scaler and logs neither.
    CHECK(p.lower->metrics().count("loss_scale") == 0);
  }
  // Step 1 steps at the initial scale; step 2 overflows: its own metrics already show the
  // halved scale and the skip; steps 3 and 4 keep them (growth only after 1000 clean steps).
  using Logged = std::vector<std::pair<double, double>>;
  CHECK(logged == Logged{{65536.0, 0.0}, {32768.0, 1.0}, {32768.0, 1.0}, {32768.0, 1.0}});
}

TEST_CASE("Loss scaling through a hypergradient: unscaled steps match the plain run",
          "[memory][precision][hypergrad]") {
  // Without an overflow the scale cancels exactly (a power of two): same lambda as without it.
  for (const auto& [name, method] : methods()) {
    INFO("method " << name);
    auto scaled = make(method, mlo::LossScaling().init_scale(1024.0));
    auto plain = make(method, std::nullopt);
    for (auto* p : {&scaled, &plain}) {
      mlo::Engine engine(mlo::EngineConfig().train_iters(kInjectAt * 2 - 2));
      engine.add(p->upper).add(p->lower).link(p->upper, p->lower);
      engine.run();
    }
    const double diff = std::abs(scaled.upper->lambda().item<double>() -
                                 plain.upper->lambda().item<double>());
    INFO("|lambda scaled - lambda plain| = " << diff);
    CHECK(diff <= 1e-6 * std::abs(plain.upper->lambda().item<double>()));
  }
}

TEST_CASE("Without loss scaling a non-finite incoming vector is a clear error, for every method",
          "[memory][precision][hypergrad]") {
  for (const auto& [name, method] : methods()) {
    INFO("method " << name);
    auto p = make(method, std::nullopt);
    mlo::Engine engine(mlo::EngineConfig().train_iters(8));
    engine.add(p.upper).add(p.lower).link(p.upper, p.lower);
    // 1e36 is finite in float32 without a scale, so force the overflow through the lower model.
    p.lower->w().detach().fill_(std::numeric_limits<float>::infinity());
    try {
      engine.run();
      FAIL("no error for a non-finite incoming vector");
    } catch (const mlo::Error& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(what.find("problem 'upper'") != std::string::npos);
      CHECK(what.find("'lower'") != std::string::npos);
      CHECK(what.find("not finite") != std::string::npos);
      // (the upper steps after the lower's unroll of 2: its first step is global step 2)
      CHECK(what.find("at global step 2;") != std::string::npos);
      CHECK(what.find("loss scaling") != std::string::npos);
    }
  }
}

TEST_CASE("Loss scaling through a hypergradient: an overflow in one micro-step drops the window",
          "[memory][precision][hypergrad][accumulation]") {
  // The upper level accumulates 2 micro-steps; the first one of its first window overflows, the
  // second is finite: the whole window is skipped, once, and the next window steps.
  for (const auto& [name, method] : methods()) {
    INFO("method " << name);
    auto p = make(method, mlo::LossScaling().init_scale(65536.0).growth_interval(1000),
                  /*upper_accumulation=*/2);
    p.upper->inject_at = 1;
    mlo::Engine engine(mlo::EngineConfig().train_iters(8));
    engine.add(p.upper).add(p.lower).link(p.upper, p.lower);
    REQUIRE_NOTHROW(engine.run());
    const auto& l = p.upper->lambdas;
    REQUIRE(l.size() == 4);  // 4 micro-steps: windows {1, 2} and {3, 4}
    CHECK(l[1] == l[0]);     // inside a window nothing moves
    CHECK(l[2] == l[1]);     // window 1 was dropped whole
    CHECK(l[3] == l[2]);
    CHECK(p.upper->lambda().item<double>() != l[3]);  // window 2 stepped
    CHECK(p.upper->loss_scaler()->skipped_steps() == 1);
    CHECK(p.upper->optimizer_steps() == 1);
  }
}

}  // namespace scaled_hypergradient_test
