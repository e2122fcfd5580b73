#pragma once
/// \file
/// A small CNN for Fashion-MNIST (and other small images) as a `mlo::nn::Chain`:
/// "conv1", "conv2" (3x3 convolution, 2x2 max-pool, ReLU), "fc" (flatten, linear, ReLU), "head".

#include <mlo/nn/chain.h>

#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <ostream>

namespace mlo {
namespace nn {

/// relu(max_pool2d(conv3x3(x), 2)): a 3x3 convolution with bias and padding 1, then a 2x2
/// max-pool, then ReLU (equal to pooling after ReLU, on a quarter of the elements). With
/// `batch_norm`, a `BatchNorm2d` follows the convolution (before the pool: its per-channel scale
/// may be negative, which does not commute with the max).
/// Example: `ConvPool(1, 32)` maps [N, 1, 28, 28] to [N, 32, 14, 14].
class ConvPoolImpl : public torch::nn::Cloneable<ConvPoolImpl> {
 public:
  /// Throws `mlo::Error` for non-positive channels.
  ConvPoolImpl(int64_t in_channels, int64_t out_channels, bool batch_norm = false);

  /// relu(max_pool2d(conv(x), 2)), with `bn` after `conv` when it is set: [N, in, H, W] to
  /// [N, out, H / 2, W / 2] (rounded down).
  torch::Tensor forward(const torch::Tensor& x);
  /// (Re)creates and registers `conv`, and `bn` with `batch_norm`.
  void reset() override;
  /// Prints `mlo::nn::ConvPool(in, out)`, with `, batch_norm` when it is on.
  void pretty_print(std::ostream& stream) const override;

  /// Input channels.
  int64_t in_channels, out_channels;
  /// Whether a `BatchNorm2d` follows the convolution.
  bool batch_norm;
  /// The 3x3 convolution (with bias, padding 1).
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};  ///< null without batch_norm
  /// \var out_channels
  /// \brief Output channels.
};
TORCH_MODULE(ConvPool);

/// relu(linear(flatten(x))): flattens all but the batch dimension first. The parameters are an
/// ordinary `torch::nn::Linear` (`fc`); a 4-D input is computed as the equivalent full-size
/// convolution, which is much faster on CPUs without an optimized BLAS.
/// Example: `FlattenLinear(64 * 7 * 7, 128)` maps [N, 64, 7, 7] to [N, 128].
class FlattenLinearImpl : public torch::nn::Cloneable<FlattenLinearImpl> {
 public:
  /// Throws `mlo::Error` for non-positive sizes.
  FlattenLinearImpl(int64_t in_features, int64_t out_features);

  /// relu(fc(x flattened from dimension 1)): [N, ...] to [N, out_features].
  torch::Tensor forward(const torch::Tensor& x);
  /// (Re)creates and registers `fc`.
  void reset() override;
  /// Prints `mlo::nn::FlattenLinear(in, out)`.
  void pretty_print(std::ostream& stream) const override;

  /// Input features: the product of the input's non-batch dimensions.
  int64_t in_features, out_features;
  /// The linear layer (with bias).
  torch::nn::Linear fc{nullptr};
  /// \var out_features
  /// \brief Output features.
};
TORCH_MODULE(FlattenLinear);

/// Architecture of the small CNN. The defaults are the Fashion-MNIST model (421,642
/// parameters): [N, 1, 28, 28] -> conv 32 -> [N, 32, 14, 14] -> conv 64 -> [N, 64, 7, 7]
/// -> 128 -> 10. Example: `CNNOptions().in_channels(3).image_size(32)` for CIFAR-shaped input.
struct CNNOptions {
  /// Channels of the input images.
  TORCH_ARG(int64_t, in_channels) = 1;
  /// Height and width of the (square) input; must be divisible by 4.
  TORCH_ARG(int64_t, image_size) = 28;
  /// Output channels of "conv1".
  TORCH_ARG(int64_t, conv1_channels) = 32;
  /// Output channels of "conv2".
  TORCH_ARG(int64_t, conv2_channels) = 64;
  /// Width of the hidden fully connected layer.
  TORCH_ARG(int64_t, hidden) = 128;
  /// Outputs of "head": the logits.
  TORCH_ARG(int64_t, num_classes) = 10;
  /// Batch norm after each convolution (as the Meta-Weight-Net reference CNN has).
  TORCH_ARG(bool, batch_norm) = false;
};

/// Builds the CNN as a Chain of 4 blocks: "conv1" and "conv2" (`ConvPool`), "fc"
/// (`FlattenLinear`), "head" (`torch::nn::Linear`). LibTorch's default initialization.
/// Throws `mlo::Error` for non-positive sizes or an image size not divisible by 4.
///
/// ```
/// mlo::nn::Chain model = mlo::nn::cnn();
/// auto logits = model->forward(torch::randn({2, 1, 28, 28}));  // [2, 10]
/// ```
Chain cnn(const CNNOptions& options = {});

}  // namespace nn
}  // namespace mlo
