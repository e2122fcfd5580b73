#include <mlo/nn/cnn.h>

#include <mlo/base/error.h>
#include <mlo/nn/batch_norm.h>

namespace mlo {
namespace nn {

ConvPoolImpl::ConvPoolImpl(int64_t in_channels_, int64_t out_channels_, bool batch_norm_)
    : in_channels(in_channels_), out_channels(out_channels_), batch_norm(batch_norm_) {
  MLO_CHECK(in_channels > 0 && out_channels > 0,
            "ConvPool: channels must be positive, got in=", in_channels, " out=", out_channels);
  reset();
}

void ConvPoolImpl::reset() {
  conv = register_module(
      "conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_channels, out_channels, 3).padding(1)));
  if (batch_norm) bn = register_module("bn", torch::nn::BatchNorm2d(out_channels));
}

torch::Tensor ConvPoolImpl::forward(const torch::Tensor& x) {
  // NOTE: max-pool commutes with ReLU (both monotone); pooling first halves the ReLU's work
  // and memory.
  const torch::Tensor y = batch_norm ? batch_norm_forward(*bn, conv->forward(x)) : conv->forward(x);
  // NOTE: LibTorch's CPU max_pool2d is slower on NCHW than on channels-last inputs, but its
  // channels-last backward is slower still (docs/reweighting.md, "What it costs"). Without a
  // graph (evaluation, the re-evaluations of DARTS) the pooling therefore runs channels-last:
  // the same maxima, bit for bit, and the output goes back to NCHW so the layers after it
  // compute exactly as before.
  if (!y.requires_grad()) {
    return torch::relu(
        torch::max_pool2d(y.contiguous(at::MemoryFormat::ChannelsLast), /*kernel_size=*/{2, 2})
            .contiguous());
  }
  return torch::relu(torch::max_pool2d(y, /*kernel_size=*/{2, 2}));
}

void ConvPoolImpl::pretty_print(std::ostream& stream) const {
  stream << "mlo::nn::ConvPool(" << in_channels << ", " << out_channels
         << (batch_norm ? ", batch_norm" : "") << ")";
}

FlattenLinearImpl::FlattenLinearImpl(int64_t in_features_, int64_t out_features_)
    : in_features(in_features_), out_features(out_features_) {
  MLO_CHECK(in_features > 0 && out_features > 0,
            "FlattenLinear: sizes must be positive, got in=", in_features, " out=", out_features);
  reset();
}

void FlattenLinearImpl::reset() {
  fc = register_module("fc", torch::nn::Linear(in_features, out_features));
}

torch::Tensor FlattenLinearImpl::forward(const torch::Tensor& x) {
  if (x.dim() == 4 && x.size(1) * x.size(2) * x.size(3) == in_features) {
    // NOTE: the same function as linear(flatten(x)) (an NCHW flatten orders features as the
    // [out, C, H, W] view of the weight does), computed as a full-size convolution: oneDNN
    // runs it faster than a reference BLAS (Debian's default libblas3) runs the matmul.
    const torch::Tensor weight = fc->weight.view({out_features, x.size(1), x.size(2), x.size(3)});
    return torch::relu(torch::conv2d(x, weight, fc->bias).flatten(/*start_dim=*/1));
  }
  return torch::relu(fc->forward(x.flatten(/*start_dim=*/1)));
}

void FlattenLinearImpl::pretty_print(std::ostream& stream) const {
  stream << "mlo::nn::FlattenLinear(" << in_features << ", " << out_features << ")";
}

Chain cnn(const CNNOptions& options) {
  MLO_CHECK(options.in_channels() > 0 && options.conv1_channels() > 0 &&
                options.conv2_channels() > 0 && options.hidden() > 0 && options.num_classes() > 0,
            "CNNOptions: sizes must be positive (in_channels=", options.in_channels(),
            ", conv1_channels=", options.conv1_channels(),
            ", conv2_channels=", options.conv2_channels(), ", hidden=", options.hidden(),
            ", num_classes=", options.num_classes(), ")");
  MLO_CHECK(options.image_size() > 0 && options.image_size() % 4 == 0,
            "CNNOptions: image_size must be a positive multiple of 4, got ", options.image_size());
  const int64_t side = options.image_size() / 4;
  Chain chain;
  chain
      ->push_back("conv1",
                  ConvPool(options.in_channels(), options.conv1_channels(), options.batch_norm()))
      .push_back("conv2",
                 ConvPool(options.conv1_channels(), options.conv2_channels(), options.batch_norm()))
      .push_back("fc", FlattenLinear(options.conv2_channels() * side * side, options.hidden()))
      .push_back("head", torch::nn::Linear(options.hidden(), options.num_classes()));
  return chain;
}

}  // namespace nn
}  // namespace mlo
