// The LibTorch version shims (mlo/detail/torch_compat.h), run in both lanes (Debian's 1.13 and a
// PyPI wheel's 2.x): each behaves the same whichever LibTorch is underneath.
#include <mlo/detail/torch_compat.h>

#include <catch2/catch.hpp>

#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/autograd/edge.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <cstring>
#include <type_traits>

namespace torch_compat_test {

TEST_CASE("torch_compat: the version string is the headers' own", "[base][compat]") {
  CHECK(std::strcmp(mlo::detail::torch_version(), TORCH_VERSION) == 0);
  CHECK(MLO_TORCH_AT_LEAST(1, 13));
  CHECK_FALSE(MLO_TORCH_AT_LEAST(TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR + 1));
  CHECK_FALSE(MLO_TORCH_AT_LEAST(TORCH_VERSION_MAJOR + 1, 0));
}

TEST_CASE("torch_compat: autocast is switched and typed per device", "[base][compat]") {
  using mlo::detail::autocast_dtype;
  using mlo::detail::autocast_enabled;
  using mlo::detail::set_autocast_dtype;
  using mlo::detail::set_autocast_enabled;
  const bool was = autocast_enabled(c10::kCPU);
  const auto dtype = autocast_dtype(c10::kCPU);
  set_autocast_enabled(c10::kCPU, true);
  set_autocast_dtype(c10::kCPU, at::kBFloat16);
  CHECK(autocast_enabled(c10::kCPU));
  CHECK(autocast_dtype(c10::kCPU) == at::kBFloat16);
  {
    // The switch acts: a matmul under CPU autocast computes in bf16.
    const auto a = torch::randn({4, 4});
    CHECK(torch::mm(a, a).scalar_type() == at::kBFloat16);
  }
  set_autocast_enabled(c10::kCPU, false);
  CHECK_FALSE(autocast_enabled(c10::kCPU));
  CHECK(torch::mm(torch::randn({2, 2}), torch::randn({2, 2})).scalar_type() == at::kFloat);
  // CUDA's switch is its own.
  CHECK_FALSE(autocast_enabled(c10::kCUDA));
  set_autocast_enabled(c10::kCPU, was);
  set_autocast_dtype(c10::kCPU, dtype);
}

TEST_CASE("torch_compat: an optimizer's state is found by its parameter", "[base][compat]") {
  auto w = torch::ones({3}, torch::requires_grad());
  auto other = torch::ones({2}, torch::requires_grad());
  torch::optim::Adam adam({w}, torch::optim::AdamOptions(0.1));
  (w * w).sum().backward();
  adam.step();
  auto& state = adam.state();
  const auto found = mlo::detail::find_optimizer_state(state, w);
  REQUIRE(found != state.end());
  const auto& adam_state = static_cast<const torch::optim::AdamParamState&>(*found->second);
  CHECK(adam_state.step() == 1);
  CHECK(torch::allclose(adam_state.exp_avg(), 0.1 * 2 * torch::ones({3})));  // (1 - beta1) g
  CHECK(mlo::detail::find_optimizer_state(state, other) == state.end());
}

TEST_CASE("torch_compat: NodePtr holds grad_fn and builds autograd edges", "[base][compat]") {
  const auto x = torch::tensor({2.0}, torch::requires_grad());
  const auto y = x * x;
  mlo::detail::NodePtr fn = y.grad_fn();
  REQUIRE(fn);
  // x's gradient accumulator exists from the multiplication on (it is y's node's next edge).
  mlo::detail::NodePtr accumulator = torch::autograd::impl::try_get_grad_accumulator(x);
  REQUIRE(accumulator);
  CHECK(fn->next_edges().at(0).function == accumulator);
  const torch::autograd::Edge edge(fn, 0);
  CHECK(edge.is_valid());
  // The edge reaches x: the gradient of y along it is dy/dx = 2x = 4.
  const auto grads = torch::autograd::grad({y}, {x});
  CHECK(grads[0].item<double>() == 4.0);
}

namespace {

// Counts the CPU bytes allocated while it is installed; its override compiles against either
// LibTorch because the totals' type is read off the base class.
struct Counter : c10::MemoryReportingInfoBase {
  int64_t bytes = 0;
  void reportMemoryUsage(void* /*ptr*/, int64_t alloc_size,
                         mlo::detail::MemoryReportTotal /*total_allocated*/,
                         mlo::detail::MemoryReportTotal /*total_reserved*/,
                         c10::Device device) override {
    if (device.is_cpu() && alloc_size > 0) bytes += alloc_size;
  }
  bool memoryProfilingEnabled() const override { return true; }
};

}  // namespace

TEST_CASE("torch_compat: a memory reporter overrides the allocator's callback",
          "[base][compat]") {
  auto counter = std::make_shared<Counter>();
  {
    c10::DebugInfoGuard guard(c10::DebugInfoKind::PROFILER_STATE, counter);
    const auto t = torch::empty({1000}, torch::kFloat);
    (void)t;
  }
  CHECK(counter->bytes >= 4000);
}

}  // namespace torch_compat_test
