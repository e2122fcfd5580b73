// The memory meter counts tensor bytes exactly on CPU.
#include <mlo/memory/footprint.h>
#include <mlo/memory/meter.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

namespace meter_test {

using mlo::memory::MemoryMeter;

TEST_CASE("Meter: an N-element float tensor shows exactly 4N bytes", "[memory][meter]") {
  MemoryMeter meter;
  for (const int64_t n : {1, 1000, 12345, 1 << 20}) {
    MemoryMeter::Active on(meter);
    const int64_t before = meter.current();
    auto t = torch::empty({n}, torch::kFloat);
    INFO("n = " << n);
    CHECK(meter.current() - before == 4 * n);
    t = torch::Tensor();
    CHECK(meter.current() == before);
  }
  CHECK(meter.current() == 0);
}

TEST_CASE("Meter: peak, current, reset and scopes", "[memory][meter]") {
  MemoryMeter meter;
  MemoryMeter::Active on(meter);
  {
    auto outer = meter.scope("p", "outer");
    auto a = torch::empty({1000}, torch::kDouble);  // 8000 bytes
    {
      auto inner = meter.scope("p", "inner");
      auto b = torch::empty({500}, torch::kFloat);  // 2000 bytes
      CHECK(meter.current() == 10000);
    }
    CHECK(meter.current() == 8000);
    CHECK(meter.peak() == 10000);
    meter.reset_peak();
    CHECK(meter.peak() == 8000);
  }
  CHECK(meter.current() == 0);
  const auto stats = meter.stats();
  REQUIRE(stats.count({"p", "inner"}) == 1);
  CHECK(stats.at({"p", "inner"}).peak == 10000);
  CHECK(stats.at({"p", "inner"}).peak_delta == 2000);
  CHECK(stats.at({"p", "outer"}).peak == 10000);
  CHECK(stats.at({"p", "outer"}).peak_delta == 10000);
  CHECK(meter.json().find("\"owner\":\"p\",\"phase\":\"inner\",\"count\":1,\"peak_bytes\":10000") !=
        std::string::npos);
  CHECK(meter.table().find("inner") != std::string::npos);
  meter.reset();
  CHECK(meter.stats().empty());
  CHECK(meter.peak() == 0);
}

TEST_CASE("Meter: autograd's allocations in backward are seen", "[memory][meter]") {
  auto w = torch::randn({256, 256}, torch::requires_grad());
  MemoryMeter meter;
  MemoryMeter::Active on(meter);
  auto x = torch::randn({64, 256});
  const int64_t after_input = meter.current();
  CHECK(after_input == 64 * 256 * 4);
  auto loss = torch::tanh(x.matmul(w)).sum();
  auto grads = torch::autograd::grad({loss}, {w});
  // The gradient of w is alive: at least 256*256 floats beyond the input.
  CHECK(meter.current() >= after_input + 256 * 256 * 4);
  // Peak holds the saved activations (tanh output) and the gradient at once.
  CHECK(meter.peak() >= after_input + 64 * 256 * 4 + 256 * 256 * 4);
}

TEST_CASE("Footprint: parameters, gradients and optimizer state", "[memory][footprint]") {
  torch::nn::Linear linear(10, 5);  // 55 floats
  torch::optim::Adam adam(linear->parameters(), torch::optim::AdamOptions(1e-3));
  auto before = mlo::memory::footprint(*linear, &adam);
  CHECK(before.parameters == 55 * 4);
  CHECK(before.gradients == 0);
  CHECK(before.optimizer_state == 0);
  linear->forward(torch::randn({3, 10})).sum().backward();
  adam.step();
  auto after = mlo::memory::footprint(*linear, &adam);
  CHECK(after.gradients == 55 * 4);
  CHECK(after.optimizer_state == 2 * 55 * 4);  // exp_avg and exp_avg_sq
  CHECK(after.total() == 4 * 55 * 4);
}

}  // namespace meter_test
