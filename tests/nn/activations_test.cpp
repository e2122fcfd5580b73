// Memory-efficient activations: same values and derivatives as LibTorch's, no more memory kept.
#include <mlo/memory/meter.h>
#include <mlo/nn/activations.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <functional>
#include <vector>

namespace activations_test {

using mlo::nn::SwishBackend;

namespace {

torch::Tensor reference_swish(const torch::Tensor& x, double beta) {
  return beta == 1.0 ? torch::silu(x) : x * torch::sigmoid(beta * x);
}

// Peak bytes allocated above its start by backward of fn on a 1024-float input.
int64_t backward_peak(const std::function<torch::Tensor(const torch::Tensor&)>& fn) {
  const auto x = torch::randn({1024}).requires_grad_(true);
  const auto y = fn(x);
  const auto g = torch::ones_like(y);
  mlo::memory::MemoryMeter meter;
  mlo::memory::MemoryMeter::Active on(meter);
  const auto gx = torch::autograd::grad({y}, {x}, {g});
  return meter.peak();
}

}  // namespace

TEST_CASE("Swish: values, gradients and second derivatives equal LibTorch's (1e-6)",
          "[nn][activations]") {
  for (const double beta : {1.0, 1.7}) {
    INFO("beta = " << beta);
    const auto x = (4 * torch::randn({64, 33})).requires_grad_(true);
    const auto v = torch::randn({64, 33});
    auto derivatives = [&](const torch::Tensor& y) {
      const auto g = torch::autograd::grad({(y * y).sum()}, {x}, {}, /*retain_graph=*/true,
                                           /*create_graph=*/true)[0];
      const auto h = torch::autograd::grad({(g * v).sum()}, {x})[0];
      return std::vector<torch::Tensor>{y.detach(), g.detach(), h};
    };
    const auto ref = derivatives(reference_swish(x, beta));
    const auto ours = derivatives(mlo::nn::swish(x, beta));
    for (size_t k = 0; k < ref.size(); ++k) {
      INFO("order " << k);
      CHECK((ref[k] - ours[k]).abs().max().item<double>() <
            1e-6 * (1 + ref[k].abs().max().item<double>()));
    }
    // Backward without create_graph (the in-place path).
    const auto g_ref = torch::autograd::grad({reference_swish(x, beta).sum()}, {x})[0];
    const auto g_ours = torch::autograd::grad({mlo::nn::swish(x, beta).sum()}, {x})[0];
    CHECK((g_ref - g_ours).abs().max().item<double>() < 1e-6);
  }
}

TEST_CASE("Swish: the efficient variant keeps no more memory; the module picks the least",
          "[nn][activations]") {
  const auto sample = torch::empty({1024});  // 4096 bytes per tensor
  for (const double beta : {1.0, 1.7}) {
    const int64_t torch_bytes = mlo::memory::retained_bytes(
        [beta](const torch::Tensor& x) { return reference_swish(x, beta); }, sample);
    const int64_t custom_bytes = mlo::memory::retained_bytes(
        [beta](const torch::Tensor& x) { return mlo::nn::swish(x, beta); }, sample);
    INFO("beta " << beta << ": torch keeps " << torch_bytes << " B, mlo::nn::swish keeps "
                 << custom_bytes << " B");
    CHECK(custom_bytes == 4096);  // the output only (the input is the caller's)
    CHECK(custom_bytes <= torch_bytes);
    const int64_t torch_backward =
        backward_peak([beta](const torch::Tensor& x) { return reference_swish(x, beta); });
    const int64_t custom_backward =
        backward_peak([beta](const torch::Tensor& x) { return mlo::nn::swish(x, beta); });
    INFO("backward peaks: torch " << torch_backward << " B, mlo " << custom_backward << " B");
    CHECK(custom_backward <= 4096 + 64);  // the input's gradient (and a wrapped scalar)
    CHECK(custom_backward <= torch_backward);
    const auto expected = custom_bytes < torch_bytes ? SwishBackend::kCustom : SwishBackend::kTorch;
    CHECK(mlo::nn::Swish(mlo::nn::SwishOptions().beta(beta))->backend() == expected);
  }
  // LibTorch's silu already saves only its input; x * sigmoid(1.7 x) also keeps sigmoid's output.
  CHECK(mlo::nn::resolve_swish_backend(1.0) == SwishBackend::kTorch);
  CHECK(mlo::nn::resolve_swish_backend(1.7) == SwishBackend::kCustom);
  mlo::nn::Swish forced(mlo::nn::SwishOptions().backend(SwishBackend::kCustom));
  const auto x = torch::randn({5, 3});
  CHECK(torch::allclose(forced(x), torch::silu(x), 1e-6, 1e-7));
}

TEST_CASE("InplaceReLU: same values and gradients as relu, without a new tensor",
          "[nn][activations]") {
  torch::nn::Linear linear(16, 16);
  mlo::nn::InplaceReLU relu;
  const auto x = torch::randn({32, 16});
  const auto ref = torch::relu(linear(x));
  const auto g_ref = torch::autograd::grad({ref.pow(2).sum()}, linear->parameters());

  mlo::memory::MemoryMeter meter;
  torch::Tensor y;
  {
    mlo::memory::MemoryMeter::Active on(meter);
    const auto h = linear(x);
    meter.reset_peak();
    const int64_t before = meter.current();
    y = relu(h);
    CHECK(meter.peak() - before == 0);  // nothing allocated, nothing extra kept
    CHECK(y.data_ptr() == h.data_ptr());
  }
  CHECK(torch::equal(y, ref));
  const auto g = torch::autograd::grad({y.pow(2).sum()}, linear->parameters());
  for (size_t i = 0; i < g.size(); ++i) CHECK(torch::allclose(g[i], g_ref[i]));

  // A leaf that requires grad is not overwritten.
  const auto leaf = torch::randn({4}, torch::requires_grad());
  const auto copy = leaf.detach().clone();
  CHECK(torch::equal(relu(leaf), torch::relu(copy)));
  CHECK(torch::equal(leaf.detach(), copy));
}

}  // namespace activations_test
