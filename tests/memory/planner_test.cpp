// The planner: its dynamic programs are exact (brute force over every plan), its predicted peak
// matches the exact meter on a ResNet, and plans run the model unchanged.
#include <mlo/base/error.h>
#include <mlo/memory/meter.h>
#include <mlo/memory/planner.h>
#include <mlo/memory/precision.h>
#include <mlo/nn/resnet.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace planner_test {

using mlo::Checkpointing;
using mlo::memory::ChainProfile;
using mlo::CheckpointingOptions;
using mlo::memory::CostModel;
using mlo::memory::Segment;

namespace {

ChainProfile random_profile(size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int64_t> size(1, 100);
  std::uniform_real_distribution<double> time(0.1, 2.0);
  ChainProfile p;
  int64_t input = size(rng);
  for (size_t i = 0; i < n; ++i) {
    mlo::memory::BlockProfile b;
    b.input_bytes = input;
    b.output_bytes = input = size(rng);
    b.retained_bytes = b.output_bytes + 3 * size(rng);
    b.forward_peak = b.retained_bytes + size(rng);
    b.nograd_peak = b.output_bytes + size(rng);
    b.backward_peak = b.input_bytes + size(rng);
    b.input_grad_bytes = i == 0 ? 0 : b.input_bytes;
    b.param_grad_bytes = size(rng) / 4;
    b.forward_seconds = time(rng);
    b.nograd_seconds = 0.9 * b.forward_seconds;
    b.backward_seconds = 2 * time(rng);
    p.blocks.push_back(b);
  }
  return p;
}

// Every plan of n blocks: each of the n - 1 gaps cut or not, each segment checkpointed or not.
std::vector<std::vector<Segment>> all_plans(size_t n) {
  std::vector<std::vector<Segment>> out;
  for (uint32_t cuts = 0; cuts < (1u << (n - 1)); ++cuts) {
    std::vector<std::pair<size_t, size_t>> ranges;
    size_t begin = 0;
    for (size_t i = 1; i <= n; ++i) {
      if (i == n || (cuts >> (i - 1)) & 1u) {
        ranges.emplace_back(begin, i);
        begin = i;
      }
    }
    for (uint32_t flags = 0; flags < (1u << ranges.size()); ++flags) {
      std::vector<Segment> plan;
      for (size_t k = 0; k < ranges.size(); ++k) {
        plan.push_back(Segment{ranges[k].first, ranges[k].second, ((flags >> k) & 1u) != 0});
      }
      out.push_back(plan);
    }
  }
  return out;
}

double grads_step(mlo::nn::ChainImpl& chain, const torch::Tensor& x, const torch::Tensor& y,
                  mlo::memory::MemoryMeter& meter) {
  meter.reset_peak();
  const int64_t start = meter.current();
  {
    const auto loss = torch::nn::functional::cross_entropy(chain.forward(x), y);
    torch::autograd::grad({loss}, chain.parameters());
  }
  return static_cast<double>(meter.peak() - start);
}

}  // namespace

TEST_CASE("Planner: the dynamic programs equal a brute-force optimum on random chains",
          "[memory][planner]") {
  std::mt19937 rng(7);
  for (const bool keep : {true, false}) {
    const CostModel model = CostModel().keep_param_grads(keep);
    for (size_t n = 1; n <= 7; ++n) {
      for (int trial = 0; trial < 4; ++trial) {
        const ChainProfile profile = random_profile(n, rng);
        const auto plans = all_plans(n);
        std::vector<mlo::memory::PlanCost> costs;
        int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
        double fastest = std::numeric_limits<double>::infinity(), slowest = 0;
        for (const auto& plan : plans) {
          costs.push_back(mlo::memory::evaluate(profile, plan, model));
          lo = std::min(lo, costs.back().peak_bytes);
          hi = std::max(hi, costs.back().peak_bytes);
          fastest = std::min(fastest, costs.back().seconds);
          slowest = std::max(slowest, costs.back().seconds);
        }
        std::uniform_int_distribution<int64_t> budgets(lo - 5, hi + 5);
        for (int b = 0; b < 12; ++b) {
          const int64_t budget = budgets(rng);
          double best = std::numeric_limits<double>::infinity();
          for (const auto& c : costs) {
            if (c.peak_bytes <= budget) best = std::min(best, c.seconds);
          }
          INFO("keep=" << keep << " n=" << n << " trial=" << trial << " budget=" << budget);
          const auto solved = mlo::memory::solve_budget(profile, budget, model);
          REQUIRE(solved.has_value() == std::isfinite(best));
          if (!solved) continue;
          const auto cost = mlo::memory::evaluate(profile, *solved, model);
          CHECK(cost.peak_bytes <= budget);
          CHECK(cost.seconds == Approx(best).epsilon(1e-12));
        }
        std::uniform_real_distribution<double> caps(fastest, slowest);
        for (int t = 0; t < 6; ++t) {
          const double cap = t == 0 ? std::numeric_limits<double>::infinity() : caps(rng);
          int64_t least = std::numeric_limits<int64_t>::max();
          for (const auto& c : costs) {
            if (c.seconds <= cap) least = std::min(least, c.peak_bytes);
          }
          INFO("keep=" << keep << " n=" << n << " trial=" << trial << " cap=" << cap);
          const auto plan = mlo::memory::solve_min_memory(profile, cap, model);
          const auto cost = mlo::memory::evaluate(profile, plan, model);
          CHECK(cost.peak_bytes == least);
          CHECK(cost.seconds <= cap);
        }
      }
    }
  }
}

TEST_CASE("Planner: strategies and options", "[memory][planner]") {
  std::mt19937 rng(3);
  const ChainProfile profile = random_profile(9, rng);
  auto plan = mlo::memory::make_plan(profile, CheckpointingOptions(Checkpointing::kNone));
  REQUIRE(plan.segments.size() == 1);
  CHECK(plan.num_checkpointed() == 0);
  CHECK(plan.predicted.peak_bytes == plan.baseline.peak_bytes);

  plan = mlo::memory::make_plan(profile, CheckpointingOptions(Checkpointing::kSqrt));
  CHECK(plan.segments.size() == 3);  // round(sqrt(9)); the last one stored
  CHECK(plan.num_checkpointed() == 2);
  CHECK(!plan.is_checkpointed(8));
  CHECK(plan.is_checkpointed(0));

  plan = mlo::memory::make_plan(profile, CheckpointingOptions(Checkpointing::kUniform).segments(4));
  CHECK(plan.num_checkpointed() == 3);

  plan = mlo::memory::make_plan(profile,
                                CheckpointingOptions(Checkpointing::kOptimal).budget_fraction(0.6));
  CHECK(plan.predicted.peak_bytes <= 0.6 * plan.baseline.peak_bytes);
  plan =
      mlo::memory::make_plan(profile, CheckpointingOptions(Checkpointing::kOptimal).budget_bytes(1));
  CHECK(
      plan.predicted.peak_bytes ==  // below anything reachable: the smallest-memory plan
      mlo::memory::evaluate(profile, mlo::memory::solve_min_memory(profile, INFINITY)).peak_bytes);
  plan = mlo::memory::make_plan(profile,
                                CheckpointingOptions(Checkpointing::kMinMemory).max_overhead(0.2));
  CHECK(plan.time_overhead() <= 0.2 + 1e-12);
  CHECK(plan.to_string().find("predicted peak") != std::string::npos);

  CHECK_THROWS_AS(
      mlo::memory::make_plan(profile, CheckpointingOptions(Checkpointing::kUniform).segments(0)),
      mlo::Error);
  CHECK_THROWS_AS(mlo::memory::make_plan(
                      profile, CheckpointingOptions(Checkpointing::kOptimal).budget_fraction(1.5)),
                  mlo::Error);
  CHECK_THROWS_AS(mlo::memory::evaluate(profile, {Segment{0, 4, true}}), mlo::Error);
  torch::nn::Linear linear(2, 2);
  CHECK_THROWS_AS(mlo::memory::configure_checkpointing(*linear, "inner",
                                                       CheckpointingOptions(Checkpointing::kSqrt)),
                  mlo::Error);
  CHECK(mlo::memory::configure_checkpointing(*linear, "inner", Checkpointing::kNone) == nullptr);
}

TEST_CASE("Planner: predicted peak within 10% of the measured one on ResNet-32, batch 8",
          "[memory][planner]") {
  torch::manual_seed(0);
  auto model = mlo::nn::resnet32();
  model->train();
  const auto x = torch::randn({8, 3, 32, 32});
  const auto y = torch::randint(10, {8});
  const auto profile = mlo::memory::profile_chain(*model, x);
  REQUIRE(profile.size() == model->size());
  for (const auto& b : model->buffers()) {  // profiling left the statistics alone
    if (b.scalar_type() == torch::kLong) CHECK(b.item<int64_t>() == 0);
  }

  mlo::memory::MemoryMeter meter;
  mlo::memory::MemoryMeter::Active on(meter);
  std::vector<CheckpointingOptions> options = {
      CheckpointingOptions(Checkpointing::kNone), CheckpointingOptions(Checkpointing::kSqrt),
      CheckpointingOptions(Checkpointing::kOptimal).budget_fraction(0.5),
      CheckpointingOptions(Checkpointing::kOptimal).budget_fraction(0.3),
      CheckpointingOptions(Checkpointing::kMinMemory).max_overhead(0.3)};
  for (const auto& o : options) {
    const auto plan = mlo::memory::make_plan(profile, o);
    mlo::memory::apply_plan(*model, plan);
    grads_step(*model, x, y, meter);  // warm-up
    const double measured = grads_step(*model, x, y, meter);
    const double predicted = static_cast<double>(plan.predicted.peak_bytes);
    INFO(plan.to_string() << "measured " << measured / 1048576.0 << " MiB");
    CHECK(std::abs(predicted - measured) <= 0.10 * measured);
  }
}

TEST_CASE("Planner: a planned ResNet computes the same loss and gradients", "[memory][planner]") {
  torch::manual_seed(1);
  auto model = mlo::nn::resnet32();
  const auto x = torch::randn({4, 3, 32, 32});
  const auto y = torch::randint(10, {4});
  auto step = [&] {
    const auto state = model->buffers();
    std::vector<torch::Tensor> saved;
    for (const auto& b : state) saved.push_back(b.clone());
    auto grads = torch::autograd::grad({torch::nn::functional::cross_entropy(model->forward(x), y)},
                                       model->parameters());
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < state.size(); ++i) {
      grads.push_back(state[i].clone());
      state[i].copy_(saved[i]);
    }
    return grads;
  };
  const auto plain = step();
  const auto lazy = mlo::memory::configure_checkpointing(
      *model, "test", CheckpointingOptions(Checkpointing::kOptimal).budget_fraction(0.4));
  REQUIRE(lazy != nullptr);
  CHECK(!lazy->plan.has_value());
  const auto ckpt = step();
  REQUIRE(lazy->plan.has_value());
  CHECK(lazy->plan->num_checkpointed() > 0);
  REQUIRE(plain.size() == ckpt.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    INFO("tensor " << i);
    CHECK(torch::allclose(plain[i], ckpt[i], /*rtol=*/1e-4, /*atol=*/1e-6));
  }
}

TEST_CASE("Planner: a bf16 profile inside autocast sees every block's weight gradients",
          "[memory][planner][precision]") {
  // Plans are made lazily at the first forward, inside the level's autocast region. The
  // profile's pass without grad must not leave weight casts without history in autocast's
  // cache for its pass with grad: the conv blocks would report no parameter gradients.
  torch::manual_seed(0);
  auto model = mlo::nn::resnet32();
  model->train();
  const auto x = torch::randn({2, 3, 32, 32});
  const auto fp32 = mlo::memory::profile_chain(*model, x);
  mlo::memory::AutocastGuard autocast(mlo::Precision::kBF16, c10::kCPU);
  const auto bf16 = mlo::memory::profile_chain(*model, x);
  REQUIRE(bf16.size() == fp32.size());
  for (size_t i = 0; i < bf16.size(); ++i) {
    // The weights' gradients stay float32 (the casts' backward widens them): the same bytes.
    INFO("block " << i << " (" << bf16.blocks[i].name << ")");
    CHECK(bf16.blocks[i].param_grad_bytes == fp32.blocks[i].param_grad_bytes);
  }
}

}  // namespace planner_test
