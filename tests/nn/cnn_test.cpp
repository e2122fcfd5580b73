// Tests of the small Fashion-MNIST CNN: shape, blocks, parameter count, chain ranges, gradients.

#include <mlo/base/error.h>
#include <mlo/nn/cnn.h>

#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace cnn_test {

namespace {

int64_t count_params(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

}  // namespace

TEST_CASE("CNN: [2, 1, 28, 28] -> [2, 10], 4 blocks, parameter count", "[nn]") {
  torch::manual_seed(0);
  mlo::nn::Chain model = mlo::nn::cnn();
  const torch::Tensor x = torch::randn({2, 1, 28, 28});
  const torch::Tensor y = model->forward(x);
  CHECK(y.sizes() == torch::IntArrayRef({2, 10}));
  CHECK(model->block_names() == std::vector<std::string>{"conv1", "conv2", "fc", "head"});
  // conv 3x3 with bias: 9 * in * out + out; linear: in * out + out.
  const int64_t expected =
      (9 * 1 * 32 + 32) + (9 * 32 * 64 + 64) + (64 * 7 * 7 * 128 + 128) + (128 * 10 + 10);
  CHECK(count_params(*model) == expected);
  CHECK(count_params(*model) == 421642);
  CHECK(model->forward_range(x, 0, 1).sizes() == torch::IntArrayRef({2, 32, 14, 14}));
  CHECK(model->forward_range(x, 0, 2).sizes() == torch::IntArrayRef({2, 64, 7, 7}));
  for (std::size_t split = 0; split <= model->size(); ++split) {
    CAPTURE(split);
    const torch::Tensor h = model->forward_range(x, 0, split);
    CHECK(torch::equal(model->forward_range(h, split, model->size()), y));
  }

  model->forward(x).sum().backward();
  for (const auto& item : model->named_parameters()) {
    CAPTURE(item.key());
    REQUIRE(item.value().grad().defined());
  }
}

TEST_CASE("CNN: options change the shapes; bad ones throw mlo::Error", "[nn]") {
  mlo::nn::Chain cifar = mlo::nn::cnn(mlo::nn::CNNOptions().in_channels(3).image_size(32));
  CHECK(cifar->forward(torch::randn({2, 3, 32, 32})).sizes() == torch::IntArrayRef({2, 10}));
  CHECK_THROWS_WITH(mlo::nn::cnn(mlo::nn::CNNOptions().image_size(30)),
                    Catch::Contains("image_size"));
  CHECK_THROWS_AS(mlo::nn::cnn(mlo::nn::CNNOptions().hidden(0)), mlo::Error);
}

TEST_CASE("FlattenLinear: equals relu(linear(flatten(x))) in value, gradient and HVP", "[nn]") {
  torch::manual_seed(0);
  mlo::nn::FlattenLinear block(6 * 3 * 3, 5);
  const torch::Tensor x = torch::randn({4, 6, 3, 3}, torch::requires_grad());
  auto reference = [&](const torch::Tensor& in) {
    return torch::relu(torch::linear(in.flatten(1), block->fc->weight, block->fc->bias));
  };
  // Value, then d/dx and d/dW of sum(y^2), then the Hessian-vector product in W along ones.
  auto run = [&](bool fast) {
    const torch::Tensor y = fast ? block(x) : reference(x);
    const auto g = torch::autograd::grad({y.pow(2).sum()}, {x, block->fc->weight}, {},
                                         /*retain_graph=*/true, /*create_graph=*/true);
    const auto hv = torch::autograd::grad({g[1].sum()}, {block->fc->weight});
    return std::vector<torch::Tensor>{y.detach(), g[0].detach(), g[1].detach(), hv[0]};
  };
  const auto fast = run(true), ref = run(false);
  CHECK(block(x.flatten(1)).sizes() == torch::IntArrayRef({4, 5}));  // the 2-D path
  for (std::size_t k = 0; k < fast.size(); ++k) {
    CAPTURE(k);
    // Tolerance: float32 summation order of two kernels.
    CHECK(torch::allclose(fast[k], ref[k], /*rtol=*/1e-4, /*atol=*/1e-5));
  }
}

TEST_CASE("CNN: batch_norm adds a BatchNorm2d after each convolution", "[nn]") {
  torch::manual_seed(0);
  auto plain = mlo::nn::cnn();
  auto with_bn = mlo::nn::cnn(mlo::nn::CNNOptions().batch_norm(true));
  // Two BatchNorm2d layers: 2 x (32 + 64) affine parameters more, and 2 x 3 buffers.
  CHECK(with_bn->parameters().size() == plain->parameters().size() + 4);
  int64_t extra = 0;
  for (const auto& p : with_bn->parameters()) extra += p.numel();
  for (const auto& p : plain->parameters()) extra -= p.numel();
  CHECK(extra == 2 * (32 + 64));
  CHECK(with_bn->buffers().size() == 6);
  // Train mode normalizes with batch statistics: at initialization (gamma 1, beta 0) the first
  // block's output before pooling has zero mean per channel, so train and eval outputs differ.
  const auto x = torch::randn({4, 1, 28, 28}) * 3 + 1;
  with_bn->train();
  const auto train_out = with_bn->forward(x);
  with_bn->eval();
  const auto eval_out = with_bn->forward(x);
  CHECK(train_out.sizes() == eval_out.sizes());
  CHECK((train_out - eval_out).abs().max().item<double>() > 1e-3);
}

TEST_CASE("CNN: a forward without a graph equals the forward with one, bit for bit", "[nn]") {
  // Without a graph the pooling runs channels-last (ConvPoolImpl::forward); the logits must not
  // change, with or without batch norm (in eval mode, as in evaluation).
  for (const bool batch_norm : {false, true}) {
    CAPTURE(batch_norm);
    torch::manual_seed(0);
    mlo::nn::Chain model = mlo::nn::cnn(mlo::nn::CNNOptions().batch_norm(batch_norm));
    if (batch_norm) model->eval();
    // Rounded inputs give ties inside pooling windows too.
    const torch::Tensor x = (torch::randn({8, 1, 28, 28}) * 4).round() / 4;
    const torch::Tensor with_graph = model->forward(x);
    REQUIRE(with_graph.requires_grad());
    torch::Tensor without;
    {
      torch::NoGradGuard no_grad;
      without = model->forward(x);
    }
    REQUIRE_FALSE(without.requires_grad());
    CHECK(without.is_contiguous());
    CHECK(torch::equal(without, with_graph.detach()));
    CHECK(torch::equal(model->forward_range(x.detach(), 0, 1).detach(),
                       [&] {
                         torch::NoGradGuard no_grad;
                         return model->forward_range(x, 0, 1);
                       }()));
  }
}

}  // namespace cnn_test
