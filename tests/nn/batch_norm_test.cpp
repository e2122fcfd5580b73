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

torch::nn::BatchNorm2d make_bn(torch::nn::BatchNorm2dOptions options) {
  torch::nn::BatchNorm2d bn(options);
  bn->to(torch::kDouble);
  torch::NoGradGuard no_grad;
  if (options.affine()) {
    bn->weight.uniform_(0.5, 1.5);
    bn->bias.uniform_(-0.5, 0.5);
  }
  if (options.track_running_stats()) {
    bn->running_mean.normal_();
    bn->running_var.uniform_(0.5, 2.0);
  }
  return bn;
}

// The kernel's copy of `bn` (same parameters and statistics).
torch::nn::BatchNorm2d copy_of(const torch::nn::BatchNorm2d& bn) {
  torch::nn::BatchNorm2d out(bn->options);
  out->to(torch::kDouble);
  torch::NoGradGuard no_grad;
  for (const auto& item : bn->named_parameters()) out->named_parameters()[item.key()].copy_(item.value());
  for (const auto& item : bn->named_buffers()) out->named_buffers()[item.key()].copy_(item.value());
  return out;
}

}  // namespace

TEST_CASE("batch_norm_forward: with a tangent, its elementary route equals LibTorch's kernel",
          "[nn]") {
  torch::manual_seed(3);
  const int variant = GENERATE(0, 1, 2, 3);
  const bool eval = GENERATE(false, true);
  torch::nn::BatchNorm2dOptions options(3);
  if (variant == 1) options.momentum(c10::nullopt);  // the cumulative average
  if (variant == 2) options.affine(false);
  if (variant == 3) options.track_running_stats(false);  // batch statistics in eval too
  CAPTURE(variant, eval);
  torch::nn::BatchNorm2d elementary = make_bn(options);
  torch::nn::BatchNorm2d fused = copy_of(elementary);
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
      // The elementary route: its backward can be differentiated in forward mode (the
      // kernel's cannot).
      const auto grad = torch::autograd::grad({y_elementary.pow(2).sum()}, {x}, {}, true);
      CHECK(level.tangent(grad[0]).defined());
      t_elementary = level.tangent(y_elementary).detach();
      y_elementary = y_elementary.detach();
    }
    {
      // The kernel in forward mode alone (its forward has a formula).
      torch::NoGradGuard no_grad;
      mlo::hypergrad::DualLevel level;
      const torch::Tensor dual =
          at::_make_dual(x.detach(), tangent, static_cast<int64_t>(level.index()));
      y_fused = fused->forward(dual);
      t_fused = level.tangent(y_fused).detach();
      y_fused = y_fused.detach();
    }
    CHECK(relative_error({y_elementary}, {y_fused}) < 1e-13);
    CHECK(relative_error({t_elementary}, {t_fused}) < 1e-12);
    if (options.track_running_stats()) {
      CHECK(relative_error({elementary->running_mean}, {fused->running_mean}) < 1e-13);
      CHECK(relative_error({elementary->running_var}, {fused->running_var}) < 1e-13);
      CHECK(elementary->num_batches_tracked.item<int64_t>() ==
            fused->num_batches_tracked.item<int64_t>());
    }
  }
  // In training the statistics moved: the comparison saw three updates.
  if (options.track_running_stats()) {
    CHECK(fused->num_batches_tracked.item<int64_t>() == (eval ? 0 : 3));
  }
}

TEST_CASE("batch_norm_forward: without a tangent or a backward pass it is the kernel, bit for "
          "bit; bad inputs are named errors",
          "[nn]") {
  torch::manual_seed(4);
  torch::nn::BatchNorm2d a = make_bn(torch::nn::BatchNorm2dOptions(3));
  torch::nn::BatchNorm2d b = copy_of(a);
  const torch::Tensor x = torch::randn({4, 3, 5, 5}, torch::kDouble);
  CHECK(torch::equal(mlo::nn::batch_norm_forward(*a, x), b->forward(x)));
  CHECK(torch::equal(a->running_var, b->running_var));
  {
    mlo::hypergrad::DualLevel level;
    const torch::Tensor tangent = torch::randn_like(x);
    // A tangent, but no backward pass can follow (x and the weight under no grad): the kernel.
    torch::NoGradGuard no_grad;
    const auto dual = at::_make_dual(x, tangent, static_cast<int64_t>(level.index()));
    CHECK(torch::equal(mlo::nn::batch_norm_forward(*a, dual), b->forward(dual)));
  }
  mlo::hypergrad::DualLevel level;
  auto dual = [&](const torch::Tensor& t) {
    return at::_make_dual(t.requires_grad_(true), torch::randn_like(t),
                          static_cast<int64_t>(level.index()));
  };
  CHECK_THROWS_WITH(mlo::nn::batch_norm_forward(*a, dual(torch::randn({4, 2, 5, 5},
                                                                       torch::kDouble))),
                    Catch::Contains("the input has 2 channels, the batch norm 3"));
  CHECK_THROWS_WITH(mlo::nn::batch_norm_forward(*a, dual(torch::randn({1, 3, 1, 1},
                                                                       torch::kDouble))),
                    Catch::Contains("more than 1 value per channel"));
  // An empty batch leaves the statistics as the kernel does.
  const torch::Tensor before = a->running_mean.clone();
  mlo::nn::batch_norm_forward(*a, dual(torch::randn({0, 3, 5, 5}, torch::kDouble)));
  CHECK(torch::equal(a->running_mean, before));
}

TEST_CASE("batch_norm_forward: Hessian-vector products through a Chain's batch norm, "
          "forward-over-reverse, equal double backward's",
          "[nn]") {
  torch::manual_seed(5);
  mlo::nn::Chain chain;
  chain->push_back("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(2, 3, 3)))
      .push_back("bn", make_bn(torch::nn::BatchNorm2dOptions(3)))
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
