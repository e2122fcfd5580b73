#pragma once
// Private helpers of the nn area: layer construction with the initialization the models share.

#include <torch/nn/init.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/types.h>

#include <cstdint>

namespace mlo {
namespace nn {
namespace detail {

/// A kxk convolution without bias (batch norm follows), Kaiming-normal (fan-out, ReLU gain)
/// as in He et al. 2015 and torchvision's ResNets; padding keeps the size at stride 1.
inline torch::nn::Conv2d kaiming_conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  torch::nn::Conv2d conv(
      torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
  torch::NoGradGuard no_grad;
  torch::nn::init::kaiming_normal_(conv->weight, /*a=*/0, torch::kFanOut, torch::kReLU);
  return conv;
}

/// Batch norm with weight 1 and bias 0 (LibTorch's defaults, stated here on purpose).
inline torch::nn::BatchNorm2d batch_norm(int64_t channels) {
  torch::nn::BatchNorm2d bn{torch::nn::BatchNorm2dOptions(channels)};
  torch::NoGradGuard no_grad;
  bn->weight.fill_(1.0);
  bn->bias.zero_();
  return bn;
}

}  // namespace detail
}  // namespace nn
}  // namespace mlo
