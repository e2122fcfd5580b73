// Tests of the CIFAR ResNets: shapes, block structure, parameter counts by formula, chain
// equivalences, gradients, memory-efficient ReLU and Swish equivalence (first and second order)
// and what they keep, channels-last
// equivalence, clone.

#include <mlo/base/error.h>
#include <mlo/memory/meter.h>
#include <mlo/nn/resnet.h>

#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace resnet_test {

namespace {

int64_t conv(int64_t in, int64_t out, int64_t k) { return in * out * k * k; }  // no bias
int64_t bn(int64_t c) { return 2 * c; }                                        // weight + bias
int64_t linear(int64_t in, int64_t out) { return in * out + out; }

// Parameter count of a CIFAR ResNet, from its architecture (He et al. 2016, Sec. 4.2).
int64_t expected_params(const mlo::nn::ResNetOptions& o) {
  const bool projection = o.shortcut() == mlo::nn::Shortcut::kProjection;
  int64_t n = conv(o.in_channels(), o.stem_channels(), 3) + bn(o.stem_channels());
  int64_t in = o.stem_channels();
  for (std::size_t s = 0; s < o.blocks().size(); ++s) {
    for (int64_t b = 0; b < o.blocks()[s]; ++b) {
      const int64_t stride = (s > 0 && b == 0) ? 2 : 1, w = o.widths()[s];
      int64_t out = w;
      if (o.block() == mlo::nn::BlockType::kBasic) {
        n += conv(in, w, 3) + bn(w) + conv(w, w, 3) + bn(w);
      } else {
        out = o.expansion() * w;
        n += conv(in, w, 1) + bn(w) + conv(w, w, 3) + bn(w) + conv(w, out, 1) + bn(out);
      }
      if (projection && (stride != 1 || in != out)) n += conv(in, out, 1) + bn(out);
      in = out;
    }
  }
  return n + linear(in, o.num_classes());
}

int64_t count_params(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

std::vector<std::string> expected_names(const std::vector<int64_t>& blocks) {
  std::vector<std::string> names{"stem"};
  for (std::size_t s = 0; s < blocks.size(); ++s) {
    for (int64_t b = 0; b < blocks[s]; ++b) {
      names.push_back("layer" + std::to_string(s + 1) + "." + std::to_string(b));
    }
  }
  names.push_back("head");
  return names;
}

// Forward equals forward_range over all blocks and over a split, in training mode.
void check_ranges(mlo::nn::ChainImpl& chain, const torch::Tensor& x, std::size_t split) {
  const torch::Tensor y = chain.forward(x);
  CHECK(torch::allclose(chain.forward_range(x, 0, chain.size()), y, /*rtol=*/1e-5,
                        /*atol=*/1e-6));
  const torch::Tensor h = chain.forward_range(x, 0, split);
  CHECK(torch::allclose(chain.forward_range(h, split, chain.size()), y, 1e-5, 1e-6));
}

// Backward of the sum of the outputs reaches every parameter with a finite gradient.
void check_grads(mlo::nn::ChainImpl& chain, const torch::Tensor& x) {
  chain.zero_grad();
  chain.forward(x).sum().backward();
  for (const auto& item : chain.named_parameters()) {
    CAPTURE(item.key());
    REQUIRE(item.value().grad().defined());
    CHECK(torch::isfinite(item.value().grad()).all().item<bool>());
  }
}

}  // namespace

TEST_CASE("ResNet-32: shape, 17 blocks, parameter count", "[nn]") {
  torch::manual_seed(0);
  mlo::nn::Chain model = mlo::nn::resnet32();
  const torch::Tensor x = torch::randn({2, 3, 32, 32});
  CHECK(model->forward(x).sizes() == torch::IntArrayRef({2, 10}));
  CHECK(model->size() == 17);
  CHECK(model->block_names() == expected_names({5, 5, 5}));
  CHECK(count_params(*model) == expected_params(mlo::nn::resnet32_options()));
  CHECK(count_params(*model) == 466906);
  // Named like torchvision.
  CHECK(model->named_parameters().contains("layer2.0.shortcut_conv.weight"));
  CHECK(model->named_parameters().contains("head.fc.weight"));

  SECTION("option A shortcuts: the paper's 0.46M parameters, same shapes") {
    const auto options = mlo::nn::resnet32_options().shortcut(mlo::nn::Shortcut::kZeroPad);
    mlo::nn::Chain a = mlo::nn::resnet(options);
    CHECK(count_params(*a) == expected_params(options));
    CHECK(count_params(*a) == 464154);
    CHECK(a->forward(x).sizes() == torch::IntArrayRef({2, 10}));
    check_grads(*a, x);
  }
  SECTION("chain ranges and gradients") {
    for (std::size_t split : {1, 6, 11, 16}) {
      CAPTURE(split);
      check_ranges(*model, x, split);
    }
    check_grads(*model, x);
  }
  SECTION("100 classes") {
    mlo::nn::Chain m = mlo::nn::resnet32(100);
    CHECK(m->forward(x).sizes() == torch::IntArrayRef({2, 100}));
    CHECK(count_params(*m) == expected_params(mlo::nn::resnet32_options(100)));
  }
}

TEST_CASE("ResNet-50 (CIFAR): shape, 18 blocks, parameter count", "[nn]") {
  torch::manual_seed(0);
  mlo::nn::Chain model = mlo::nn::resnet50();
  const torch::Tensor x = torch::randn({2, 3, 32, 32});
  CHECK(model->size() == 18);
  CHECK(model->block_names() == expected_names({3, 4, 6, 3}));
  CHECK(count_params(*model) == expected_params(mlo::nn::resnet50_options()));
  CHECK(count_params(*model) == 23520842);
  // Stage resolutions: 32 (stem, layer1), 16, 8, 4.
  const torch::Tensor h = model->forward_range(x, 0, 4);
  CHECK(h.sizes() == torch::IntArrayRef({2, 256, 32, 32}));
  const torch::Tensor y = model->forward_range(h, 4, model->size());
  CHECK(y.sizes() == torch::IntArrayRef({2, 10}));
  check_ranges(*model, x, 9);
  // Batch-norm buffers per block: stem has one BN (3 buffers: mean, var, count).
  CHECK(model->range_buffers(0, 1).size() == 3);
  CHECK(model->range_buffers(0, model->size()).size() == model->buffers().size());
  check_grads(*model, x);
}

TEST_CASE("ResNet: memory-efficient ReLU and Swish give the same values, gradients and "
          "Hessian-vector products",
          "[nn]") {
  // A small basic and a small bottleneck ResNet, built twice from the same seed, with each
  // activation: plain, and in its memory-efficient form (in-place ReLU; Swish keeping its input).
  for (auto activation : {mlo::nn::Activation::kReLU, mlo::nn::Activation::kSwish})
  for (auto block : {mlo::nn::BlockType::kBasic, mlo::nn::BlockType::kBottleneck}) {
    CAPTURE(static_cast<int>(block), mlo::nn::activation_name(activation));
    const auto options =
        mlo::nn::ResNetOptions(block, {1, 2}, {4, 8}).expansion(2).activation(activation);
    torch::manual_seed(1);
    mlo::nn::Chain plain = mlo::nn::resnet(options);
    torch::manual_seed(1);
    mlo::nn::Chain inplace = mlo::nn::resnet(mlo::nn::ResNetOptions(options).efficient_activation(true));
    const torch::Tensor x = torch::randn({2, 3, 8, 8});

    auto hvp = [&x](mlo::nn::ChainImpl& m) {
      const auto params = m.parameters();
      const torch::Tensor loss = m.forward(x).pow(2).sum();
      const auto g = torch::autograd::grad({loss}, params, {}, /*retain_graph=*/true,
                                           /*create_graph=*/true);
      torch::Tensor gv = torch::zeros({});
      for (const auto& gi : g) gv = gv + gi.sum();  // v = all ones
      const auto hv = torch::autograd::grad({gv}, params);
      return std::make_pair(loss.detach(), std::vector<torch::Tensor>(hv.begin(), hv.end()));
    };
    const auto a = hvp(*plain);
    const auto b = hvp(*inplace);
    // Tolerance: float32 reassociation only.
    CHECK(torch::allclose(a.first, b.first, 1e-5, 1e-6));
    REQUIRE(a.second.size() == b.second.size());
    for (std::size_t k = 0; k < a.second.size(); ++k) {
      CAPTURE(k);
      CHECK(torch::allclose(a.second[k], b.second[k], 1e-4, 1e-5));
    }
  }
}

TEST_CASE("ResNet blocks: the efficient Swish keeps one activation less per use; in-place ReLU "
          "keeps the same",
          "[nn]") {
  // A bottleneck of 8 -> 4 -> 4 -> 8 channels (identity shortcut) on [2, 8, 6, 6]: activations
  // after bn1 and bn2 (2*4*6*6 = 288 floats each) and after the residual sum (576 floats). The
  // plain Swish x * sigmoid(x) keeps x and sigmoid's output; the efficient one keeps x only: the
  // difference is the three sigmoid outputs, (288 + 288 + 576) * 4 bytes. ReLU's backward keeps
  // only its output either way: in place frees short-lived copies, not what backward keeps.
  const auto sample = torch::zeros({2, 8, 6, 6});
  const auto kept = [&](mlo::nn::Activation activation, bool efficient) {
    torch::manual_seed(0);
    mlo::nn::Bottleneck block(mlo::nn::BottleneckOptions(8, 4)
                                  .expansion(2)
                                  .activation(activation)
                                  .efficient_activation(efficient));
    return mlo::memory::retained_bytes([&](const torch::Tensor& x) { return block(x); }, sample);
  };
  const int64_t swish_plain = kept(mlo::nn::Activation::kSwish, false);
  const int64_t swish_efficient = kept(mlo::nn::Activation::kSwish, true);
  INFO("Swish keeps " << swish_plain << " B plain, " << swish_efficient << " B efficient");
  CHECK(swish_plain - swish_efficient == (288 + 288 + 576) * 4);
  CHECK(kept(mlo::nn::Activation::kReLU, true) == kept(mlo::nn::Activation::kReLU, false));
  // ReLU's output is what its backward and the next layer's both keep: one tensor per use. A
  // Swish keeps its input besides the output the next layer keeps, so even the efficient one
  // keeps one activation more than ReLU per use.
  CHECK(swish_efficient - kept(mlo::nn::Activation::kReLU, false) == (288 + 288 + 576) * 4);
}

TEST_CASE("ResNet: channels-last runs NHWC and gives the same values and gradients", "[nn]") {
  const auto options = mlo::nn::ResNetOptions(mlo::nn::BlockType::kBottleneck, {1, 2}, {4, 8})
                           .expansion(2);
  torch::manual_seed(3);
  mlo::nn::Chain nchw = mlo::nn::resnet(options);
  torch::manual_seed(3);
  mlo::nn::Chain nhwc = mlo::nn::resnet(mlo::nn::ResNetOptions(options).channels_last(true));
  const torch::Tensor x = torch::randn({4, 3, 8, 8});
  // Convolution weights and the activations after the stem are NHWC.
  for (const auto& p : nhwc->parameters()) {
    if (p.dim() == 4) CHECK(p.is_contiguous(at::MemoryFormat::ChannelsLast));
  }
  CHECK(nhwc->forward_range(x, 0, 1).is_contiguous(at::MemoryFormat::ChannelsLast));
  CHECK_FALSE(nchw->forward_range(x, 0, 1).is_contiguous(at::MemoryFormat::ChannelsLast));

  auto loss_and_grads = [&x](mlo::nn::ChainImpl& m) {
    const torch::Tensor loss = m.forward(x).pow(2).sum();
    return std::make_pair(loss.detach(), torch::autograd::grad({loss}, m.parameters()));
  };
  const auto a = loss_and_grads(*nchw);
  const auto b = loss_and_grads(*nhwc);
  // Tolerance: float32 reassociation only (another kernel, the same math).
  CHECK(torch::allclose(a.first, b.first, 1e-5, 1e-6));
  REQUIRE(a.second.size() == b.second.size());
  for (std::size_t k = 0; k < a.second.size(); ++k) {
    CAPTURE(k);
    CHECK(torch::allclose(a.second[k], b.second[k], 1e-4, 1e-5));
  }
}

TEST_CASE("ResNet: clone is a deep copy that computes the same function", "[nn]") {
  torch::manual_seed(0);
  mlo::nn::Chain model = mlo::nn::resnet(
      mlo::nn::ResNetOptions(mlo::nn::BlockType::kBasic, {1, 1}, {4, 8}).num_classes(3));
  model->eval();
  auto copy = std::dynamic_pointer_cast<mlo::nn::ChainImpl>(model->clone());
  REQUIRE(copy);
  CHECK_FALSE(copy->is_training());
  CHECK(copy->block_names() == model->block_names());
  const torch::Tensor x = torch::randn({2, 3, 8, 8});
  CHECK(torch::equal(copy->forward(x), model->forward(x)));
  CHECK_FALSE(copy->parameters()[0].data_ptr() == model->parameters()[0].data_ptr());
}

TEST_CASE("ResNet: bad options throw mlo::Error naming the field", "[nn]") {
  using mlo::nn::BlockType;
  using mlo::nn::ResNetOptions;
  CHECK_THROWS_WITH(mlo::nn::resnet(ResNetOptions(BlockType::kBasic, {1, 1}, {4})),
                    Catch::Contains("widths"));
  CHECK_THROWS_WITH(mlo::nn::resnet(ResNetOptions(BlockType::kBasic, {}, {})),
                    Catch::Contains("blocks"));
  CHECK_THROWS_WITH(mlo::nn::resnet(ResNetOptions(BlockType::kBasic, {1, 0}, {4, 8})),
                    Catch::Contains("blocks[1]"));
  CHECK_THROWS_WITH(mlo::nn::resnet32(0), Catch::Contains("num_classes"));
  CHECK_THROWS_AS(
      mlo::nn::BasicBlock(mlo::nn::BasicBlockOptions(8, 4).shortcut(mlo::nn::Shortcut::kZeroPad)),
      mlo::Error);
}

}  // namespace resnet_test
