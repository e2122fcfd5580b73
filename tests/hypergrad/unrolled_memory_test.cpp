// Memory of unrolled differentiation, measured with the exact CPU meter: with binomial
// checkpointing the peak of K = 1000 inner steps stays within a small factor of K = 10 (and
// below what keeping every state needs for K = 30), while keeping every state grows linearly.
#include <mlo/hypergrad.h>
#include <mlo/memory/meter.h>
#include <support/inner_steps.h>
#include <support/quadratic.h>

#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <memory>

namespace unrolled_memory_test {

namespace {

using mlo::testing::ParameterModule;

// Upper: lambda (m values). Lower: L(w, lambda) = 1/2 sum_i a_i w_i^2 - w . (X lambda), with a
// large w (n = 8192 floats, 32 KiB per inner state) so that stored states dominate the peak.
struct Upper : mlo::Problem {
  using mlo::Problem::Problem;
  torch::Tensor lambda() const { return module_as<ParameterModule>()->tensors.at(0); }
  torch::Tensor training_step(const mlo::Batch&) override { return lambda().pow(2).sum(); }
};
struct Lower : mlo::Problem {
  using mlo::Problem::Problem;
  Upper* upper = nullptr;
  torch::Tensor a, x;
  torch::Tensor w() const { return module_as<ParameterModule>()->tensors.at(0); }
  torch::Tensor training_step(const mlo::Batch&) override {
    return 0.5 * (a * w() * w()).sum() - w().dot(x.mv(upper->lambda()));
  }
};

struct Measured {
  int64_t peak = 0;  // bytes above the level at the start of apply
  torch::Tensor result;
};

Measured measure(int64_t steps, const mlo::UnrolledOptions& options) {
  const int64_t n = 8192, m = 4;
  torch::manual_seed(0);
  auto upper = std::make_shared<Upper>("upper");
  upper->module(std::make_shared<ParameterModule>(
      std::vector<std::pair<std::string, torch::Tensor>>{{"lambda", torch::randn({m})}}));
  upper->optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
  auto lower = std::make_shared<Lower>("lower", mlo::ProblemConfig().method(options));
  lower->module(std::make_shared<ParameterModule>(
      std::vector<std::pair<std::string, torch::Tensor>>{{"w", torch::randn({n})}}));
  lower->optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1));
  lower->upper = upper.get();
  lower->a = torch::rand({n}) + 0.5;
  lower->x = torch::randn({n, m}) / 100.0;
  mlo::hypergrad::Unrolled method(options);
  const auto lower_level = mlo::testing::make_level(*lower, {lower.get(), upper.get()});
  const auto upper_level = mlo::testing::make_level(*upper);
  mlo::testing::run_unroll(*lower_level, &method, steps);
  const torch::Tensor v = torch::randn({n});

  mlo::memory::MemoryMeter meter;
  Measured out;
  {
    mlo::memory::MemoryMeter::Active on(meter);
    const int64_t before = meter.current();
    meter.reset_peak();
    out.result = method.apply({v}, *lower_level, *upper_level)[0];
    out.peak = meter.peak() - before;
  }
  return out;
}

}  // namespace

TEST_CASE("Unrolled memory: binomial O(log K) states, none O(K)", "[hypergrad][unrolled][memory]") {
  torch::set_num_threads(1);
  const auto none = mlo::UnrolledOptions();
  const auto binomial = mlo::UnrolledOptions().checkpointing(mlo::UnrollCheckpointing::kBinomial);
  const Measured none_10 = measure(10, none);
  const Measured none_30 = measure(30, none);
  const Measured none_100 = measure(100, none);
  const Measured binomial_10 = measure(10, binomial);
  const Measured binomial_1000 = measure(1000, binomial);
  const double kib = 1024.0;
  WARN("peak KiB: none K=10 " << none_10.peak / kib << ", K=30 " << none_30.peak / kib << ", K=100 "
                              << none_100.peak / kib << "; binomial K=10 " << binomial_10.peak / kib
                              << ", K=1000 " << binomial_1000.peak / kib << " (one state: 32 KiB)");
  // Keeping every state: linear in K (K = 100 needs more than 5x K = 10).
  CHECK(none_100.peak > 5 * none_10.peak);
  // Binomial: 100x the steps within 3x the memory (ceil(log2 K) snapshots: 4 vs 10).
  CHECK(binomial_1000.peak < 3 * binomial_10.peak);
  // And K = 1000 with binomial fits in what K = 30 needs without checkpointing.
  CHECK(binomial_1000.peak <= none_30.peak);
  // Same numbers with and without checkpointing (K = 10).
  CHECK((binomial_10.result - none_10.result).abs().max().item<double>() <=
        1e-5 * none_10.result.abs().max().item<double>());
}

}  // namespace unrolled_memory_test
