// Tests of mlo::nn::batch_norm_forward: where forward-over-reverse needs it (a tangent on the
// input, grad mode on), its elementary operations give the fused kernel's values, tangents and
// running statistics; elsewhere it is the kernel; and the Hessian-vector product through it,
// forward-over-reverse, equals double backward's.

#include <mlo/hypergrad/forward_mode.h>
#include <mlo/nn/batch_norm.h>
#include <mlo/nn/chain.h>
#include <support/relative_error.h>

#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <vector>

namespace batch_norm_test {

using mlo::testing::relative_error;
using TensorList = std::vector<torch::Tensor>;

namespace {

torch::nn::BatchNorm2d make_bn(c10::optional<double> momentum) {
  torch::nn::BatchNorm2dOptions options(3);
  options.momentum(momentum);
  torch::nn::BatchNorm2d bn(options);
  bn->to(torch::kDouble);
  torch::NoGradGuard no_grad;
  bn->weight.uniform_(0.5, 1.5);
  bn->bias.uniform_(-0.5, 0.5);
  return bn;
}

}  // namespace

TEST_CASE("batch_norm_forward: with a tangent, its elementary route equals LibTorch's kernel",
          "[nn]") {
  torch::manual_seed(3);
  const bool cumulative = GENERATE(false, true);  // momentum 0.1, or none (cumulative average)
  const bool eval = GENERATE(false, true);
  CAPTURE(cumulative, eval);
  const c10::optional<double> momentum =
      cumulative ? c10::nullopt : c10::optional<double>(0.1);
  torch::nn::BatchNorm2d elementary = make_bn(momentum);
  torch::nn::BatchNorm2d fused = make_bn(momentum);
  {
    torch::NoGradGuard no_grad;
    elementary->running_mean.normal_();
    elementary->running_var.uniform_(0.5, 2.0);
    for (const auto& name : {"weight", "bias"}) {
      fused->named_parameters()[name].copy_(elementary->named_parameters()[name]);
    }
    for (const auto& name : {"running_mean", "running_var"}) {
      fused->named_buffers()[name].copy_(elementary->named_buffers()[name]);
    }
  }
  if (eval) {
    elementary->eval();
    fused->eval();
  }
  for (int step = 0; step < 3; ++step) {
    const torch::Tensor x =
        (torch::randn({4, 3, 5, 5}, torch::kDouble) * 2 + 1).requires_grad_(true);
    const torch::Tensor tangent = torch::randn_like(x);
    torch::Tensor y_elementary, t_elementary, y_fused, t_fused;
    {
      mlo::hypergrad::DualLevel level;
      const torch::Tensor dual = at::_make_dual(x, tangent, static_cast<int64_t>(level.index()));
      y_elementary = mlo::nn::batch_norm_forward(*elementary, dual);
      t_elementary = level.tangent(y_elementary).detach();
      y_elementary = y_elementary.detach();
    }
    {
      // (the kernel in forward mode alone: its forward has a formula)
      torch::NoGradGuard no_grad;
      mlo::hypergrad::DualLevel level;
      const torch::Tensor dual =
          at::_make_dual(x.detach(), tangent, static_cast<int64_t>(level.index()));
      y_fused = mlo::nn::batch_norm_forward(*fused, dual);  // no grad mode: the kernel
      t_fused = level.tangent(y_fused).detach();
      y_fused = y_fused.detach();
    }
    CHECK(relative_error({y_elementary}, {y_fused}) < 1e-13);
    CHECK(relative_error({t_elementary}, {t_fused}) < 1e-12);
    CHECK(relative_error({elementary->running_mean}, {fused->running_mean}) < 1e-13);
    CHECK(relative_error({elementary->running_var}, {fused->running_var}) < 1e-13);
    CHECK(elementary->num_batches_tracked.item<int64_t>() ==
          fused->num_batches_tracked.item<int64_t>());
  }
  // In training the statistics moved: the comparison saw three updates.
  CHECK(fused->num_batches_tracked.item<int64_t>() == (eval ? 0 : 3));
}

TEST_CASE("batch_norm_forward: Hessian-vector products through a Chain's batch norm, "
          "forward-over-reverse, equal double backward's",
          "[nn]") {
  torch::manual_seed(5);
  mlo::nn::Chain chain;
  chain->push_back("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(2, 3, 3)))
      .push_back("bn", make_bn(0.1))
      .push_back("act", torch::nn::Functional(torch::tanh))
      .push_back("flat", torch::nn::Flatten())
      .push_back("head", torch::nn::Linear(3 * 4 * 4, 1));
  chain->to(torch::kDouble);
  const torch::Tensor x = torch::randn({6, 2, 6, 6}, torch::kDouble);
  const TensorList w = chain->parameters();
  auto loss = [&] { return chain->forward(x).pow(2).mean(); };
  TensorList u;
  for (const auto& p : w) u.push_back(torch::randn_like(p));
  // Double backward.
  const TensorList g = torch::autograd::grad({loss()}, w, {}, true, true);
  torch::Tensor gu = torch::zeros({}, torch::kDouble);
  for (size_t i = 0; i < g.size(); ++i) gu = gu + (g[i] * u[i]).sum();
  const TensorList want = torch::autograd::grad({gu}, w);
  // Forward-over-reverse: the tangent of the gradient along u.
  TensorList got;
  {
    mlo::hypergrad::DualLevel level;
    level.set_tangents(w, u);
    const TensorList grads = torch::autograd::grad({loss()}, w);
    for (const auto& t : grads) got.push_back(level.tangent(t).detach());
  }
  const double error = relative_error(got, want);
  INFO("relative error " << error);
  CHECK(error < 1e-10);
}

}  // namespace batch_norm_test
